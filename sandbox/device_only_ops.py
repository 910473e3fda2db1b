"""Kernels for the ops torch implements for accelerators only (no CPU kernel), and which
emulated devices refuse them.

The emulator runs every op by its CPU kernel, so an op torch has for CUDA but not for
the CPU would fail on the emulated device for want of a kernel, not because the target
lacks it: ``torch.nn.SyncBatchNorm`` with world_size > 1 calls ``torch.batch_norm_stats``,
``batch_norm_gather_stats_with_counts``, ``batch_norm_elemt`` and their backward ops, none
of which the CPU has. ``KERNELS`` maps each such op to a kernel written with ops every
backend has; the Python emulator runs it on the CPU tensors behind the device tensors
(tensor.py), the native backend registers it as the op's PrivateUse1 kernel
(native/register.py), and the reference run, whose CPU stands for the GPU, gets them as
CPU kernels (shim/distributed.py). A CPU tensor still gets torch's own "Could not run ...
'CPU' backend" error, as it would on the real machine.

Whether the real device has them is the target's to say, and TorchTPU 0.2.0 does not:
its glue library names none of these ops (sandbox/data/torch_tpu.toml, [device_only_ops],
derived from the wheel), so on ``tpu`` each is refused with TorchTPU's own missing-op error
(:func:`refusals`), and a SyncBatchNorm port does not verify here to fail on the hardware.
On ``neuron`` the kernels stay: there is no evidence either way (no TorchNeuron artefact
to read), so the emulator keeps the ops CUDA has.

The arithmetic follows torch's CUDA kernels (aten/src/ATen/native/cuda/Normalization.cuh):
statistics over every dimension but the channel dimension 1, the biased variance in
``invstd = 1 / sqrt(var + eps)``, half-precision inputs reduced in float32, and
the running variance updated with the unbiased (``n / (n - 1)``) variance.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from . import torchtpu_facts

aten = torch.ops.aten
Tensor = torch.Tensor


def _reduce_dims(x: Tensor) -> list[int]:
    return [d for d in range(x.dim()) if d != 1]


def _channel_shape(x: Tensor) -> list[int]:
    """(1, C, 1, ...): per-channel vectors broadcast against ``x``."""
    return [1, x.shape[1], *([1] * (x.dim() - 2))] if x.dim() > 1 else [-1]


def _acc(x: Tensor) -> Tensor:
    """Half-precision values accumulate in float32, as torch's CUDA kernels do."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def batch_norm_stats(input: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Per-channel mean and ``1 / sqrt(biased var + eps)`` of ``input``."""
    x = _acc(input)
    var, mean = torch.var_mean(x, dim=_reduce_dims(x), correction=0)
    return mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats_with_counts(
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    momentum: float,
    eps: float,
    counts: Tensor,
) -> tuple[Tensor, Tensor]:
    """Merge the ranks' (mean, invstd, count) rows into the global statistics, and
    update the running statistics in place (as SyncBatchNorm's all-gather feeds it)."""
    n = counts.to(mean.dtype).reshape(-1, 1)
    total = n.sum(0)
    global_mean = (n * mean).sum(0) / total
    var_i = 1.0 / (invstd * invstd) - eps
    var = (n * (var_i + (mean - global_mean) ** 2)).sum(0) / total
    if running_mean is not None:
        running_mean.copy_(running_mean * (1 - momentum) + global_mean * momentum)
    if running_var is not None:
        unbiased = var * total / (total - 1)
        running_var.copy_(running_var * (1 - momentum) + unbiased * momentum)
    return global_mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats(
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    momentum: float,
    eps: float,
    count: int,
) -> tuple[Tensor, Tensor]:
    """:func:`batch_norm_gather_stats_with_counts` with the same ``count`` on every rank."""
    counts = torch.full((mean.shape[0],), float(count), dtype=mean.dtype, device=mean.device)
    return batch_norm_gather_stats_with_counts(
        input, mean, invstd, running_mean, running_var, momentum, eps, counts
    )


def batch_norm_elemt(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: Tensor,
    invstd: Tensor,
    eps: float,
) -> Tensor:
    """``(input - mean) * invstd * weight + bias``, per channel."""
    shape = _channel_shape(input)
    out = (_acc(input) - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.to(input.dtype)


def batch_norm_backward_reduce(
    grad_out: Tensor,
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    weight: Tensor | None,
    input_g: bool,
    weight_g: bool,
    bias_g: bool,
) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]:
    """Per-channel ``sum(dy)``, ``sum(dy * (x - mean))`` and the weight and bias gradients
    (None where not asked for, as torch leaves them undefined)."""
    shape, dims = _channel_shape(input), _reduce_dims(input)
    dy = _acc(grad_out)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (_acc(input) - mean.reshape(shape))).sum(dims)
    dtype = weight.dtype if weight is not None else mean.dtype
    grad_weight = (sum_dy_xmu * invstd).to(dtype) if weight_g else None
    grad_bias = sum_dy.to(dtype) if bias_g else None
    if not input_g:
        return None, None, grad_weight, grad_bias
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


def batch_norm_backward_elemt(
    grad_out: Tensor,
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    weight: Tensor | None,
    sum_dy: Tensor,
    sum_dy_xmu: Tensor,
    count: Tensor,
) -> Tensor:
    """The input gradient from the all-reduced sums over ``count.sum()`` elements."""
    shape = _channel_shape(input)
    total = count.sum().to(sum_dy.dtype)
    mean_dy = (sum_dy / total).reshape(shape)
    mean_dy_xmu = (sum_dy_xmu / total).reshape(shape)
    inv = invstd.reshape(shape)
    scale = inv if weight is None else inv * weight.reshape(shape)
    xmu = _acc(input) - mean.reshape(shape)
    grad = (_acc(grad_out) - mean_dy - xmu * inv * inv * mean_dy_xmu) * scale
    return grad.to(input.dtype)


KERNELS: dict[Any, Callable[..., Any]] = {
    aten.batch_norm_stats.default: batch_norm_stats,
    aten.batch_norm_gather_stats.default: batch_norm_gather_stats,
    aten.batch_norm_gather_stats_with_counts.default: batch_norm_gather_stats_with_counts,
    aten.batch_norm_elemt.default: batch_norm_elemt,
    aten.batch_norm_backward_reduce.default: batch_norm_backward_reduce,
    aten.batch_norm_backward_elemt.default: batch_norm_backward_elemt,
}


def op_name(op: Any) -> str:
    """``batch_norm_stats`` (the default overload) or ``name.overload``: how the facts name
    an op of KERNELS."""
    name = op._schema.name.split("::", 1)[1]
    overload = op._schema.overload_name
    return f"{name}.{overload}" if overload else name


@functools.cache
def refusals(device: str) -> dict[Any, str]:
    """The ops of KERNELS the real ``device`` has no kernel for -> the error it raises.

    ``tpu``: the ops absent from TorchTPU's glue library, each with its missing-op message
    (a NotImplementedError in the emulators; the wheel's compiled fallback does not show the
    type). Any other device: none (no evidence that its runtime lacks them)."""
    if device != "tpu":
        return {}
    facts = torchtpu_facts.section("device_only_ops")
    absent, template = set(facts["absent"]), facts["missing_op_error"]
    return {
        op: template.format(op=f"aten::{op_name(op)}") for op in KERNELS if op_name(op) in absent
    }
