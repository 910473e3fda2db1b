"""``torch.autocast("tpu"|"neuron", dtype=torch.bfloat16)`` on the emulated device.

torch 2.13 has autocast kernels for CPU, CUDA, XPU, MPS, MTIA and MAIA, but none
for PrivateUse1: every op reaching the ``AutocastPrivateUse1`` key then fails
("Could not run 'aten::linear' ... from the 'Autocasttpu' backend"). This module
registers, under that key, a fallthrough for all ops plus casting kernels. On ``tpu``
they follow TorchTPU's own AutocastPrivateUse1 registrations (``sandbox/data/
torch_tpu.toml``, ``[autocast]``, read from the wheel's ``WrapFunction_`` symbols):
matmul/linear/conv/SDPA in the autocast dtype; float32 only for losses, linalg, FFT,
3-D pooling, padding and the like; ``prod`` given a float32 dtype; nothing promoted, so
softmax, layer_norm, exp and sum run in the dtype they are given. Other devices follow
CUDA's lists (torch/csrc/autocast docs, "CUDA Ops that can autocast"): reductions,
softmax and norms in float32 too, and a few multi-input ops at the widest input dtype.
The casts are done with ``Tensor.to`` above autograd, so backward sees them as real ops.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..torchtpu_facts import section
from . import state

_KEY = "AutocastPrivateUse1"

# Ops that run in the autocast dtype (CUDA's "lower_precision_fp" list).
CUDA_LOWER_PRECISION: tuple[str, ...] = (
    "conv1d",
    "conv1d.padding",
    "conv2d",
    "conv2d.padding",
    "conv3d",
    "conv3d.padding",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "_convolution",
    "convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "scaled_dot_product_attention",
)

# Ops that run in float32 (CUDA's "fp32" list, the common part).
CUDA_FLOAT32: tuple[str, ...] = (
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "frobenius_norm.dim",
    "nuclear_norm",
    "nuclear_norm.dim",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "prod",
    "prod.dim_int",
    "cumprod",
    "cumsum",
    "sum",
    "sum.dim_IntList",
    "softmax.int",
    "log_softmax.int",
    "cross_entropy_loss",
    "norm.Scalar",
    "norm.ScalarOpt_dim",
)

# Multi-input ops that run at the widest floating dtype among their inputs.
CUDA_PROMOTE: tuple[str, ...] = (
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "grid_sampler",
    "index_put",
    "scatter_add",
    "tensordot",
    "cat",
    "stack",
)

_libs: list[torch.library.Library] = []


def resolve(struct_name: str) -> str | None:
    """``conv1d_padding`` (an ``at::_ops`` struct name: op, then overload) -> ``conv1d.padding``;
    None when no aten op has that name."""
    candidates = [(struct_name, "default")]
    candidates += [
        (struct_name[:i], struct_name[i + 1 :])
        for i in range(len(struct_name) - 1, 0, -1)
        if struct_name[i] == "_"
    ]
    for name, overload in candidates:
        packet = getattr(torch.ops.aten, name, None) if name else None
        if packet is not None and overload in packet.overloads():
            return name if overload == "default" else f"{name}.{overload}"
    return None


def _tpu(policy: str) -> tuple[str, ...]:
    """TorchTPU's ops of one cast policy (the facts' ``[autocast]``), as ``name.overload``."""
    return tuple(q for q in map(resolve, section("autocast").get(policy, ())) if q is not None)


# TorchTPU's lists, one per torch CastPolicy.
LOWER_PRECISION = _tpu("lower_precision_fp")
FLOAT32 = _tpu("fp32")
FP32_SET_OPT_DTYPE = _tpu("fp32_set_opt_dtype")
FP32_APPEND_DTYPE = _tpu("fp32_append_dtype")
PROMOTE = _tpu("promote")


def policy(device: str) -> dict[str, tuple[str, ...]]:
    """The autocast op lists of ``device``: TorchTPU's for ``tpu``, CUDA's otherwise."""
    if device == "tpu":
        if FP32_APPEND_DTYPE:
            raise NotImplementedError(
                f"TorchTPU autocasts {FP32_APPEND_DTYPE} with fp32_append_dtype, "
                "which the emulator does not implement"
            )
        return {
            "lower_precision_fp": LOWER_PRECISION,
            "fp32": FLOAT32,
            "fp32_set_opt_dtype": FP32_SET_OPT_DTYPE,
            "promote": PROMOTE,
        }
    return {"lower_precision_fp": CUDA_LOWER_PRECISION, "fp32": CUDA_FLOAT32,
            "promote": CUDA_PROMOTE}  # fmt: skip


def _eligible(x: Any) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and x.is_floating_point()
        and x.device.type == state.name
        and x.dtype != torch.float64
    )


def _cast(args: Any, dtype: torch.dtype) -> Any:
    return tree_map(lambda x: x.to(dtype) if _eligible(x) and x.dtype != dtype else x, args)


def _run(op: Any, args: tuple, kwargs: dict, dtype: torch.dtype | None) -> Any:
    autocast_key = torch._C.DispatchKey.AutocastPrivateUse1  # type: ignore[attr-defined]  # torch's stubs omit it
    keys = torch._C.DispatchKeySet(autocast_key)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        if dtype is not None:
            args, kwargs = _cast((args, kwargs), dtype)
        return op(*args, **kwargs)


def _lower(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return _run(op, args, kwargs, torch.get_autocast_dtype(state.name))

    return kernel


def _float32(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return _run(op, args, kwargs, torch.float32)

    return kernel


def _fp32_set_opt_dtype(op: Any) -> Any:
    """torch's fp32_set_opt_dtype: float32 output when the call names no dtype."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dtype") is None and any(map(_eligible, tree_flatten(args)[0])):
            kwargs = {**kwargs, "dtype": torch.float32}
        return _run(op, args, kwargs, None)

    return kernel


def _promote(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtypes = [x.dtype for x in tree_flatten((args, kwargs))[0] if _eligible(x)]
        widest = None
        for d in dtypes:
            widest = d if widest is None else torch.promote_types(widest, d)
        return _run(op, args, kwargs, widest)

    return kernel


def register() -> None:
    """Install the AutocastPrivateUse1 fallthrough and the casting kernels."""
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, _KEY)
    lib = torch.library.Library("aten", "IMPL")
    for kind, names in policy(state.name).items():
        make = _KERNELS[kind]
        for qualname in names:
            name, _, overload = qualname.partition(".")
            packet = getattr(torch.ops.aten, name, None)
            if packet is None or (overload or "default") not in packet.overloads():
                continue
            lib.impl(qualname, make(getattr(packet, overload or "default")), _KEY)
    _libs.extend((fallback, lib))
    # TorchTPU and TorchNeuron autocast to bfloat16 by default (torch's PrivateUse1
    # default is float16), so `torch.autocast(device.type)` without a dtype is bf16.
    torch.set_autocast_dtype(torch._C._get_privateuse1_backend_name(), torch.bfloat16)


_KERNELS = {
    "lower_precision_fp": _lower,
    "fp32": _float32,
    "fp32_set_opt_dtype": _fp32_set_opt_dtype,
    "promote": _promote,
}
