"""Run Triton kernels under one runtime and save their outputs: the driver of
tests/test_triton_on_torch.py.

``python tests/triton_compare.py --runtime interpreter OUT`` (with TRITON_INTERPRET=1 set
before anything imports triton) runs them with Triton's own interpreter;
``--runtime torch`` installs triton_on_torch as ``triton`` first (``sys.modules``: the
kernels' source, the eval repositories' included, runs unchanged, as it would in a port);
``--device tpu`` runs them on torchport's emulated TPU; ``--mode loop`` makes
triton_on_torch run every program one by one (its default runs them together where the
kernel allows), and the saved ``modes`` say how each case's kernels ran. Either way a
fresh interpreter, because which ``triton`` a process has is fixed once anything imports
it.

The eval repositories' kernel modules are loaded from their files, untouched; each case
calls the repository's own launch code (its autograd Function, its wrapper).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

SUITE = Path(__file__).resolve().parents[1] / "evals" / "suite"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def case_rmsnorm(device: str) -> dict[str, torch.Tensor]:
    norm = _load("eval_rmsnorm", SUITE / "triton-fused-rmsnorm/repo/kernels/fused_norm.py")
    x, r = torch.randn(3, 13, 200).to(device), torch.randn(3, 13, 200).to(device)
    w = (torch.rand(200) + 0.5).to(device)
    y, h = norm.fused_add_rms_norm(x, r, w, 1e-6)
    return {"y": y.cpu(), "h": h.cpu()}


def case_swiglu(device: str) -> dict[str, torch.Tensor]:
    swiglu = _load("eval_swiglu", SUITE / "triton-swiglu-autograd/repo/ops/swiglu.py")
    a = torch.randn(3, 1000).to(device).requires_grad_()
    b = torch.randn(3, 1000).to(device).requires_grad_()
    c = swiglu.silu_mul(a, b)
    c.backward(torch.randn(3, 1000).to(device))
    return {"c": c.detach().cpu(), "da": a.grad.cpu(), "db": b.grad.cpu()}


def case_softmax_fallback(device: str) -> dict[str, torch.Tensor]:
    """The repository's Triton path itself (its ``softmax`` takes it only on CUDA)."""
    softmax = _load("eval_softmax", SUITE / "triton-with-fallback/repo/kernels/softmax.py")
    assert softmax.HAS_TRITON
    return {"out": softmax._softmax_triton(torch.randn(2, 13, 77).to(device) * 4).cpu()}


EVAL_CASES: dict[str, Callable[[str], dict[str, torch.Tensor]]] = {
    "rmsnorm": case_rmsnorm,
    "swiglu": case_swiglu,
    "softmax_fallback": case_softmax_fallback,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--runtime", choices=("interpreter", "torch"), required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases", nargs="*", help="the cases to run (default: all)")
    parser.add_argument("--mode", choices=("vector", "loop"), default="vector")
    args = parser.parse_args()
    launch_modes: dict[str, str] = {}
    if args.runtime == "torch":
        from torchport.tools.kernel_runtime import triton_on_torch

        triton_on_torch.install_as_triton()
        triton_on_torch.MODE = args.mode
        launch_modes = triton_on_torch.launch_modes
    else:
        assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1"
    if args.device != "cpu":
        from torchport.sandbox import emulated

        emulated.activate(args.device)
    import triton_kernels  # after the choice of triton: it imports one

    cases = {**EVAL_CASES, **triton_kernels.CASES}
    if args.runtime == "torch":
        cases |= triton_kernels.WRONG
    results, seconds, modes = {}, {}, {}
    for name in args.cases or cases:
        torch.manual_seed(0)
        launch_modes.clear()
        start = time.perf_counter()
        results[name] = cases[name](args.device)
        seconds[name] = time.perf_counter() - start
        modes[name] = dict(launch_modes)
    torch.save({"results": results, "seconds": seconds, "modes": modes}, args.out)


if __name__ == "__main__":
    main()
