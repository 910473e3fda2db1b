"""The emulated device's ``torch.distributed`` backend: registration and device checks.

Collectives are dispatcher ops (``c10d::allreduce_``...), so on emulated tensors they
reach the emulator, which runs them again on the CPU tensors inside: gloo runs them, in
place, and the device tensors see the result. The backend is therefore registered for
``cpu`` too, which torch would otherwise refuse a CPU tensor with; TorchTPU registers its
backends (the facts' ``[distributed] backends``) for ``devices=["tpu"]`` only, so for a
``tpu`` group the collectives themselves refuse non-TPU tensors with torch's own error,
before the emulator's plumbing is reached. The emulated neuron group takes CPU tensors.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from .. import patching, torchtpu_facts
from . import state

# The tensor collectives of torch.distributed (and their process-group parameter's name).
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
)


def _gloo_creator(store: Any, rank: int, size: int, timeout: Any) -> Any:
    import torch.distributed as dist

    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _tpu_creator(store: Any, rank: int, size: int, timeout: Any) -> Any:
    """A ``tpu`` group starts the device (TorchTPU's ProcessGroupTpu runs on its PJRT
    client): its first-use checks (the launch step's variables) fail the creation."""
    state.initialize()
    return _gloo_creator(store, rank, size, timeout)


def _group_backend(group: Any) -> str:
    import torch.distributed as dist

    try:
        return str(dist.get_backend(group))
    except (RuntimeError, ValueError):  # no default group yet: torch's own error follows
        return ""


def _device_checked(fn: Callable[..., Any], names: frozenset[str]) -> Callable[..., Any]:
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        if _group_backend(bound.arguments.get("group")) in names:
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, torch.Tensor) and t.device.type not in _devices():
                    raise RuntimeError(
                        f"No backend type associated with device type {t.device.type}"
                    )
        return fn(*args, **kwargs)

    return collective


def _flat_all_gather(fn: Callable[..., Any], names: frozenset[str]) -> Callable[..., Any]:
    """``all_gather_single`` into any contiguous output of ``world_size x input.numel()``
    elements, as NCCL (and the device's own backend) take it.

    gloo splits the output along dimension 0 into one piece per rank, so it refuses the
    ``(1, world_size * n)`` output that ``torch.nn.SyncBatchNorm`` gathers its statistics
    into on every backend but gloo (it asks the group's backend name, here the
    device's). The same memory viewed as ``(world_size * input.shape[0], ...)`` is what
    gloo wants, and the device tensor sees the gathered values.
    """
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def all_gather_single(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        out, inp = bound.arguments["output_tensor"], bound.arguments["input_tensor"]
        group = bound.arguments.get("group")
        if _group_backend(group) in names and inp.dim() > 0 and out.is_contiguous():
            import torch.distributed as dist

            world = dist.get_world_size(group)
            shape = (world * inp.shape[0], *inp.shape[1:])
            if out.shape != shape and out.numel() == world * inp.numel():
                bound.arguments["output_tensor"] = out.view(shape)
        return fn(*bound.args, **bound.kwargs)

    return all_gather_single


@functools.cache
def _devices() -> frozenset[str]:
    return frozenset(torchtpu_facts.section("distributed")["backend_devices"])


def install(name: str, own: str) -> None:
    """``init_process_group(backend=own)`` on the device ``name`` (for tpu, each of TorchTPU's
    backend names)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not dist.is_available():
        return
    aliases = tuple(torchtpu_facts.section("distributed")["backends"]) if name == "tpu" else (own,)
    known = dist.Backend.backend_list
    for alias in aliases:
        if alias not in known and alias.upper() not in known:
            creator = _tpu_creator if name == "tpu" else _gloo_creator
            dist.Backend.register_backend(alias, creator, devices=["cpu", name])
    names = frozenset(aliases)
    flat = _flat_all_gather(distributed_c10d.all_gather_single, names)
    for owner in (distributed_c10d, dist):
        patching.patch(owner, "all_gather_single", flat, by="emulator.process_group")
    if name != "tpu":
        return
    for fn_name in COLLECTIVES:
        checked = _device_checked(getattr(distributed_c10d, fn_name), names)
        for owner in (distributed_c10d, dist):
            patching.patch(owner, fn_name, checked, by="emulator.process_group")
