"""triton_on_torch's vector mode against its loop mode, on the same kernels, same process.

The vector mode runs a launch's programs together (one pass over the kernel body with a
program dim; on a CPU, one per group of programs whose blocks fit the caches); the loop
mode runs the body once per program id. Three launches: a vector
add over 1M elements (BLOCK 1024: 977 programs), the eval suite's triton-with-fallback
softmax over 4096 rows (one row per program) and the suite's triton-fused-rmsnorm kernel
(4096 rows of 1024, 16 rows per program). Each is timed in alternating rounds of both
modes, so both see the same machine load; a mode's time is its fastest round. The
outputs of the two modes must agree (checked). The ratio is loop time / vector time
(how many times faster the vector mode is); ``eager`` is the same computation written
in plain torch ops, for scale. Not a test. Usage:
    python benchmarks/triton_vector.py [--device cpu|cuda] [--rounds 3] [--threads N]
        [--cases vector_add_1M ...] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
from torchport.tools.kernel_runtime import triton_on_torch as triton

SUITE = Path(__file__).resolve().parents[1] / "evals" / "suite"
tl = triton.language


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask))


def _suite_module(name: str, relative: str) -> ModuleType:
    """A suite repository's kernel file, run unchanged with ``import triton`` finding
    triton_on_torch."""
    triton.install_as_triton()
    spec = importlib.util.spec_from_file_location(name, SUITE / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# A case: (launch -> outputs, eager torch -> outputs), built for a device.
Case = tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]


def vector_add(device: str) -> Case:
    n = 1 << 20
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)

    def launch() -> torch.Tensor:
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out

    return launch, lambda: x + y


def softmax_rows(device: str) -> Case:
    softmax = _suite_module("bench_softmax", "triton-with-fallback/repo/kernels/softmax.py")
    x = torch.randn(4096, 512, device=device)
    return lambda: softmax._softmax_triton(x), lambda: torch.softmax(x, dim=-1)


def fused_rmsnorm(device: str) -> Case:
    norm = _suite_module("bench_rmsnorm", "triton-fused-rmsnorm/repo/kernels/fused_norm.py")
    x, r = torch.randn(4096, 1024, device=device), torch.randn(4096, 1024, device=device)
    w = torch.rand(1024, device=device) + 0.5

    def eager() -> torch.Tensor:
        h = x + r
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    return lambda: norm.fused_add_rms_norm(x, r, w, 1e-6)[0], eager


CASES = {"vector_add_1M": vector_add, "softmax_4096_rows": softmax_rows,
         "fused_rmsnorm_4096x1024": fused_rmsnorm}  # fmt: skip


def _seconds(run: Callable[[], torch.Tensor], device: str) -> tuple[float, torch.Tensor]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = run()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def measure(name: str, device: str, rounds: int) -> dict[str, object]:
    launch, eager = CASES[name](device)
    best = {"vector": float("inf"), "loop": float("inf"), "eager": float("inf")}
    outputs, modes = {}, {}
    for round in range(rounds + 1):  # round 0 warms up and is not counted
        for mode in ("vector", "loop", "eager"):
            triton.MODE = mode
            seconds, outputs[mode] = _seconds(eager if mode == "eager" else launch, device)
            modes = dict(triton.launch_modes) if mode == "vector" else modes
            best[mode] = min(best[mode], seconds) if round else best[mode]
    triton.MODE = "vector"
    torch.testing.assert_close(outputs["vector"], outputs["loop"])
    torch.testing.assert_close(outputs["vector"], outputs["eager"], rtol=1e-4, atol=1e-5)
    return {
        "case": name,
        "device": device,
        "vector_s": best["vector"],
        "loop_s": best["loop"],
        "eager_s": best["eager"],
        "loop_over_vector": best["loop"] / best["vector"],
        "vector_over_eager": best["vector"] / best["eager"],
        "modes": modes,  # how the vector mode's launches ran
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's)")
    parser.add_argument("--cases", nargs="*", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in args.cases:
        result = measure(name, args.device, args.rounds)
        if args.json:
            print(json.dumps(result))
            continue
        print(
            f"{name:26} vector {result['vector_s'] * 1e3:9.2f} ms   loop "
            f"{result['loop_s'] * 1e3:9.2f} ms   loop/vector {result['loop_over_vector']:7.1f}x"
            f"   vector/eager {result['vector_over_eager']:6.1f}x"
        )


if __name__ == "__main__":
    main()
