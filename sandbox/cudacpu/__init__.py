"""torchport's CPU runner for CUDA C++ kernels: the reference for custom-kernel programs.

A program that JIT-compiles CUDA C++ (``torch.utils.cpp_extension.load_inline(
cuda_sources=...)``, ``load(sources=[... .cu])``) cannot run on a CPU-only machine, so its
original had no reference numbers and a port of it could never be verified. In the
reference run (``sandbox.shim.cuda_extensions`` patches ``load_inline`` and ``load``),
this package translates the extension's CUDA C++ into host C++ (``translate``), compiles
it with the system C++ compiler through torch's cpp_extension machinery, against the
runtime in ``runtime/`` (``build``), and loads the result in place of the CUDA one: the
ORIGINAL program, unmodified, runs its kernels on the CPU.

What it runs: ``__global__`` kernels over ``blockIdx``/``threadIdx``/``blockDim``/
``gridDim`` (1-3 D), launches with or without shared-memory size and stream, grid-stride
loops, ``__device__``/``__host__``/``__forceinline__``/``__restrict__``/
``__launch_bounds__``, templates, static and dynamic (``extern``) ``__shared__`` memory with
``__syncthreads()`` (each thread a fiber that yields at the barrier; kernels without one
run as a plain loop), atomics, the math intrinsics, and the host code around kernels
(``TORCH_CHECK(x.is_cuda())``, ``AT_DISPATCH_*``, current streams, device guards, launch
checks, ``cudaMemcpy``/``cudaMemset``, ``torch::kCUDA`` options).

What it refuses (``unsupported.toml``): warp intrinsics and warp-synchronous code,
cooperative groups, tensor cores, inline PTX, textures, asynchronous copies, device RNG,
CUDA libraries, kernels launching kernels. A function using one becomes a stub that
raises with the construct's name, file and line when called; outside any function the
build stops with that message. The run's report lists each extension, its kernels and
launches, and what was refused (``cuda_kernel_runner``).

An extension that ships CPU kernels beside its CUDA ones (see ``translate.cpu_dispatch``)
keeps its device checks, so the CPU tensors of the reference run take its own CPU code.
"""

from __future__ import annotations

from .build import CompileFailed
from .extension import Extension, compile_extension, file_sources, inline_sources
from .refusals import Refusal, Refused

__all__ = [
    "CompileFailed",
    "Extension",
    "Refusal",
    "Refused",
    "compile_extension",
    "file_sources",
    "inline_sources",
]
