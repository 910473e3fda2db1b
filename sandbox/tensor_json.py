"""Tensors as JSON on the results channel: what the kernel check (``site_check``) and the
module trace (``module_trace``) report of a tensor, so that two runs' reports compare.

Standard library only until called; torch after.
"""

from __future__ import annotations

from typing import Any

MAX_VALUES = 1 << 16  # values reported per tensor; a larger one reports a fixed sample
SAMPLE_SEED = 20240917  # the sample's positions: the same for the same size in any run


def leaves(value: Any) -> list[Any]:
    """The tensors in ``value`` (nested lists, tuples, dicts by key), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in leaves(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value, key=str) for t in leaves(value[k])]
    return []


def values(tensor: Any, limit: int = MAX_VALUES) -> dict[str, Any]:
    """A tensor as JSON: shape, dtype and its values (a fixed sample of ``limit`` of a
    larger one, the same positions for the same size in any run)."""
    import torch

    flat = tensor.detach().to("cpu").reshape(-1)
    out: dict[str, Any] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype)[6:]}
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    if flat.numel() > limit:
        gen = torch.Generator().manual_seed(SAMPLE_SEED)
        index = torch.randperm(flat.numel(), generator=gen)[:limit].sort().values
        flat = flat[index]
        out["sampled"] = limit
    if flat.dtype.is_floating_point:
        flat = flat.double()
    out["values"] = flat.tolist()
    return out
