"""``F.scaled_dot_product_attention`` on the emulated ``tpu`` device, chosen as TorchTPU chooses.

TorchTPU's ``_fused_sdp_choice`` (``torch_tpu::AtenFusedSdpChoice`` in the wheel's glue
library, ``csrc/ops/scaled_dot_product_attention/scaled_dot_product_attention_aten_kernels.cc``)
asks torch for the FLASH, OVERRIDEABLE and MATH switches only (EFFICIENT and cuDNN are not
TorchTPU's), and runs its fused flash kernel when FLASH or OVERRIDEABLE is enabled and, in its
own words, "TorchTPU only supports FLASH_ATTENTION SDPBackend for scaled_dot_product_attention
when these conditions are met": static shapes, ``dropout_p`` in [0.0, 1.0), float32 or
bfloat16 inputs, query rank at least 4, the same rank for query, key and value, batch size at
least 1, head dimension below 128 or a multiple of 128, and an ``attn_mask`` that does not
require gradient. The fused kernel takes the mask and the scale, and ignores ``dropout_p``
(its cache key: ``IgnoreInCacheKey(dropout_p, "Unused")``). Otherwise it warns with that
message and takes MATH (warning again when ``dropout_p`` is not 0.0: its optimized MATH
wants none); with none of the three enabled it raises "no viable SDPBackend found".

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

from . import state

aten = torch.ops.aten
_PERFORMANCE = "<TorchTpu/Performance/> "
_FLASH = (
    "TorchTPU only supports FLASH_ATTENTION SDPBackend for scaled_dot_product_attention when "
    "these conditions are met:\n- inputs have static shapes\n- dropout_p is in [0.0, 1.0) "
    "(current: {dropout})\n- inputs are float32 or bfloat16 (current: {dtype})\n- query rank "
    "is at least 4 (current: {rank})\n- inputs have the same rank (query: {rank}, key: "
    "{key_rank}, value: {value_rank})\n- batch size is at least 1\n- Head dimension (dim - 1) "
    "is less than 128 or divisible by 128\n(query shape: {shape})\n- attn_mask does not "
    "require gradient (current: {mask_grad})"
)
_MATH = (
    "TorchTPU only supports SHLO optimized MATH SDPBackend when these conditions are met:\n"
    "- dropout_p is 0.0 (current: {dropout})"
)
NO_BACKEND = (
    "no viable SDPBackend found: all supported backends are disabled, including the fallback "
    "MATH backend; enable at least one of FLASH, OVERRIDEABLE, or MATH for TorchTPU"
)
_libs: list[torch.library.Library] = []


def fused_kernel_runs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any, dropout_p: float
) -> bool:
    """TorchTPU's conditions for its fused (flash) kernel, the switches aside."""
    rank = query.dim()
    mask_grad = isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad
    return (
        0.0 <= dropout_p < 1.0
        and query.dtype in (torch.float32, torch.bfloat16)
        and rank >= 4
        and key.dim() == rank == value.dim()
        and math.prod(query.shape[:-3]) >= 1
        and (query.shape[-1] < 128 or query.shape[-1] % 128 == 0)
        and not (mask_grad and torch.is_grad_enabled())
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
            message = _flash_message(query, key, value, attn_mask, dropout_p)
            warnings.warn(_PERFORMANCE + message, stacklevel=2)
        if dropout_p != 0.0:
            warnings.warn(_PERFORMANCE + _MATH.format(dropout=dropout_p), stacklevel=2)
    else:
        raise RuntimeError(NO_BACKEND)
    return aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
        enable_gqa=enable_gqa,
    )[0]  # fmt: skip


def _flash_message(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float) -> str:
    return _FLASH.format(
        dropout=dropout_p, dtype=query.dtype, rank=query.dim(), key_rank=key.dim(),
        value_rank=value.dim(), shape=list(query.shape),
        mask_grad=isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad,
    )  # fmt: skip


def register() -> None:
    """Install TorchTPU's choice for ``scaled_dot_product_attention`` on the ``tpu`` device."""
    if state.name != "tpu":
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("scaled_dot_product_attention", _attention, "AutogradPrivateUse1")
    _libs.append(lib)
