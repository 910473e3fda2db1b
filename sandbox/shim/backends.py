"""`torch.backends.cuda` / `cudnn` and SDPA kernel choices, as a GPU machine answers them.

Flags that a CPU-only torch already accepts (cudnn.benchmark, deterministic, allow_tf32,
matmul.allow_tf32) are left alone: they are settable and do not change CPU results.
What raises or answers "no CUDA" is replaced. Forcing a fused attention kernel
(`sdpa_kernel(FLASH_ATTENTION)`, `sdp_kernel(enable_math=False)`) also allows the math
kernel, because the CPU may have no fused kernel for the inputs; the math kernel computes
the same function (in fp32, the reference's precision).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
import torch.backends.cuda
import torch.backends.cudnn
import torch.nn.attention
from torch.nn.attention import SDPBackend

from .. import patching
from .recording import record

CUDNN_VERSION = 90100


class _CufftPlanCache:
    """Settable stand-in for torch.backends.cuda.cufft_plan_cache (asserts without CUDA)."""

    max_size = 4096
    size = 0

    def clear(self) -> None:
        pass

    def __getitem__(self, device: Any) -> _CufftPlanCache:
        return self


def _answer(api: str, value: Any) -> Any:
    def answer(*args: Any, **kwargs: Any) -> Any:
        record(api, direct=True)
        return value

    answer.__doc__ = f"Shim for {api}: answers {value!r} as a CUDA machine would."
    return answer


def _make_sdpa_kernel(real: Any) -> Any:
    def sdpa_kernel(backends: Any, set_priority: bool = False) -> Any:
        """torch.nn.attention.sdpa_kernel, with the math kernel always allowed."""
        chosen = list(backends) if isinstance(backends, list | tuple) else [backends]
        if SDPBackend.MATH not in chosen:
            record("torch.nn.attention.sdpa_kernel(fused only)")
            chosen.append(SDPBackend.MATH)
        return real(chosen, set_priority=set_priority)

    functools.update_wrapper(sdpa_kernel, real, assigned=(), updated=())  # __wrapped__ only
    return sdpa_kernel


@contextlib.contextmanager
def _sdp_kernel(
    enable_flash: bool = True,
    enable_math: bool = True,
    enable_mem_efficient: bool = True,
    enable_cudnn: bool = True,
) -> Iterator[None]:
    """torch.backends.cuda.sdp_kernel (deprecated upstream), with the math kernel allowed."""
    record("torch.backends.cuda.sdp_kernel")
    chosen = [SDPBackend.MATH]
    if enable_flash:
        chosen.append(SDPBackend.FLASH_ATTENTION)
    if enable_mem_efficient:
        chosen.append(SDPBackend.EFFICIENT_ATTENTION)
    if enable_cudnn:
        chosen.append(SDPBackend.CUDNN_ATTENTION)
    with patching.original(torch.nn.attention, "sdpa_kernel")(chosen):
        yield


def install() -> None:
    """Replace the backend answers that differ on a CPU-only build."""
    cuda = torch.backends.cuda
    patching.patch(
        cuda, "is_built", _answer("torch.backends.cuda.is_built", True), by="shim.backends"
    )
    patching.patch(
        cuda,
        "preferred_linalg_library",
        _answer("torch.backends.cuda.preferred_linalg_library", torch._C._LinalgBackend.Default),
        by="shim.backends",
    )
    patching.patch(cuda, "cufft_plan_cache", _CufftPlanCache(), by="shim.backends")
    patching.patch(cuda, "sdp_kernel", _sdp_kernel, by="shim.backends")
    cudnn = torch.backends.cudnn
    patching.patch(
        cudnn,
        "is_available",
        _answer("torch.backends.cudnn.is_available", True),
        by="shim.backends",
    )
    patching.patch(
        cudnn, "version", _answer("torch.backends.cudnn.version", CUDNN_VERSION), by="shim.backends"
    )
    patching.patch(
        torch.nn.attention,
        "sdpa_kernel",
        _make_sdpa_kernel(torch.nn.attention.sdpa_kernel),
        by="shim.backends",
    )
