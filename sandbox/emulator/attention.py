"""``F.scaled_dot_product_attention`` on the emulated ``tpu`` device, chosen as TorchTPU chooses.

TorchTPU's ``_fused_sdp_choice`` (``torch_tpu::AtenFusedSdpChoice`` in the wheel's glue
library, ``csrc/ops/scaled_dot_product_attention/scaled_dot_product_attention_aten_kernels.cc``)
asks torch for the FLASH, OVERRIDEABLE and MATH switches only (EFFICIENT and cuDNN are not
TorchTPU's), and runs its fused flash kernel when FLASH or OVERRIDEABLE is enabled and, in its
own words, "TorchTPU only supports FLASH_ATTENTION SDPBackend for scaled_dot_product_attention
when these conditions are met" (``FLASH_CONDITIONS``; the lines are the facts' ``[sdpa]``).
The fused kernel takes the mask and the scale, and ignores ``dropout_p`` (its cache key:
``IgnoreInCacheKey(dropout_p, "Unused")``). Otherwise it warns with that message and takes
MATH, warning again when its optimized MATH's conditions fail (``MATH_CONDITIONS``: no
dropout, ...); with none of the three enabled it raises the facts' ``no_backend_error``.

Emulated here below autocast (at ``AutogradPrivateUse1``, so autocast's bfloat16 casts come
first and autograd records the math decomposition): the fused kernel's result is torch's math
attention without dropout, the math path torch's math attention, both at the device's matmul
precision (``precision.py``). Eager shapes are always static here.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..torchtpu_facts import section
from . import state

aten = torch.ops.aten
_FACTS = section("sdpa")
NO_BACKEND = _FACTS["no_backend_error"]
_PERFORMANCE = "<TorchTpu/Performance/> "
# The wheel's two performance warnings. The facts hold their condition lines (pooled strings);
# which warning each line belongs to is the order AtenFusedSdpChoice loads them in
# (objdump of libpywrap_2_13_0_common.so): FLASH's eight, MATH's four.
FLASH_CONDITIONS = (
    "inputs have static shapes",
    "dropout_p is in [0.0, 1.0)",
    "inputs are float32 or bfloat16",
    "inputs have the same rank",
    "query rank is at least 4",
    "batch size is at least 1",
    "Head dimension (dim - 1) is less than 128 or divisible by 128",
    "attn_mask does not require gradient",
)
MATH_CONDITIONS = (
    "dropout_p is 0.0",
    "inputs are not complex",
    "inputs have the same rank",
    "attn_mask does not require gradient",
)
_FLASH = (
    "TorchTPU only supports FLASH_ATTENTION SDPBackend for scaled_dot_product_attention when "
    "these conditions are met:\n- inputs have static shapes\n- dropout_p is in [0.0, 1.0) "
    "(current: {dropout})\n- inputs are float32 or bfloat16 (current: {dtype})\n- inputs have "
    "the same rank (query: {rank}, key: {key_rank}, value: {value_rank})\n- query rank is at "
    "least 4 (current: {rank})\n- batch size is at least 1\n- Head dimension (dim - 1) is less "
    "than 128 or divisible by 128\n(query shape: {shape})\n- attn_mask does not require "
    "gradient (current: {mask_grad})"
)
_MATH = (
    "TorchTPU only supports SHLO optimized MATH SDPBackend when these conditions are met:\n"
    "- dropout_p is 0.0 (current: {dropout})\n- inputs are not complex (current: {dtype})\n- "
    "inputs have the same rank (query: {rank}, key: {key_rank}, value: {value_rank})\n- "
    "attn_mask does not require gradient (current: {mask_grad})"
)
# c10's names of the dtypes the messages print
_SCALAR_TYPE = {
    torch.float32: "Float", torch.bfloat16: "BFloat16", torch.float16: "Half",
    torch.float64: "Double", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}  # fmt: skip
_libs: list[torch.library.Library] = []


def _mask_grad(attn_mask: Any) -> bool:
    return (
        isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad and torch.is_grad_enabled()
    )


def fused_kernel_runs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any, dropout_p: float
) -> bool:
    """TorchTPU's conditions for its fused (flash) kernel, the switches aside."""
    rank = query.dim()
    return (
        0.0 <= dropout_p < 1.0
        and query.dtype in (torch.float32, torch.bfloat16)
        and key.dim() == rank == value.dim()
        and rank >= 4
        and math.prod(query.shape[:-3]) >= 1
        and (query.shape[-1] < 128 or query.shape[-1] % 128 == 0)
        and not _mask_grad(attn_mask)
    )


def optimized_math_runs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any, dropout_p: float
) -> bool:
    """TorchTPU's conditions for its optimized MATH kernel (else a plain decomposition)."""
    return (
        dropout_p == 0.0
        and not query.is_complex()
        and key.dim() == query.dim() == value.dim()
        and not _mask_grad(attn_mask)
    )


def _attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    fused_enabled = torch._C._get_flash_sdp_enabled() or torch._C._get_overrideable_sdp_enabled()
    if fused_enabled and fused_kernel_runs(query, key, value, attn_mask, dropout_p):
        dropout_p = 0.0  # the fused kernel ignores it
    elif fused_enabled or torch._C._get_math_sdp_enabled():
        if fused_enabled:
            message = _message(_FLASH, query, key, value, attn_mask, dropout_p)
            warnings.warn(_PERFORMANCE + message, stacklevel=2)
        if not optimized_math_runs(query, key, value, attn_mask, dropout_p):
            message = _message(_MATH, query, key, value, attn_mask, dropout_p)
            warnings.warn(_PERFORMANCE + message, stacklevel=2)
    else:
        raise RuntimeError(NO_BACKEND)
    # torch's own attention (its boolean-mask conversion, GQA, scale) on its math kernel
    with sdpa_kernel(SDPBackend.MATH):
        return aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
            enable_gqa=enable_gqa,
        )  # fmt: skip


def _message(text: str, query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float) -> str:
    return text.format(
        dropout=dropout_p, dtype=_SCALAR_TYPE.get(query.dtype, str(query.dtype)),
        rank=query.dim(), key_rank=key.dim(), value_rank=value.dim(),
        shape=list(query.shape), mask_grad=int(_mask_grad(attn_mask)),
    )  # fmt: skip


def register() -> None:
    """Install TorchTPU's choice for ``scaled_dot_product_attention`` on the ``tpu`` device."""
    if state.name != "tpu":
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("scaled_dot_product_attention", _attention, "AutogradPrivateUse1")
    _libs.append(lib)
