"""A kernel call site called on given inputs, in a sandboxed run: the differential check's driver.

    python -m torchport.sandbox.site_check CASES.pt     (run by the harness, any mode)

``CASES.pt`` (written by ``agents.kernel_check``, read with ``weights_only=True``) holds the
cases: a site (``kernels/fused_norm.py:fused_add_rms_norm``), the module it was imported as
and from which folder, and the arguments, tensors already drawn. For each case the driver
imports the module of the program in front of it (the original on the reference shim, its
kernels through Triton's interpreter or the CUDA runner; the port on the emulated device),
moves the tensors to the run's device, calls the site, and reports every output tensor, the
tensor arguments after the call (a kernel may write in place) and, where arguments require
grad, their gradients of a fixed random projection of the outputs (``sum(P_i * out_i)``, each
``P_i`` drawn on the CPU from seed ``PROJECTION_SEED + i``, so both runs use the same). It
also times a few more forward calls (``seconds``, the fastest; the first call's one-time work,
a kernel's compilation or a build's load, left out): the verifier reports the port's cost at
the site as a ratio to the original's on the reference. The report goes into the run's result
as ``site_check``; the verifier compares the two runs'.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import time
from typing import Any

from .tensor_json import leaves, values

PROJECTION_SEED = 20240917
TIMED_CALLS = 3  # forward calls timed after the compared one, at most
TIMED_BUDGET_S = 2.0  # no further timed call once these have been spent


def _device(mode: str, names: dict[str, str] | None) -> Any:
    """The run's device: the shim's cuda, the emulated mode's, or a target's own name for it."""
    import torch

    if names is not None:
        return torch.device(names["device"])
    return torch.device("cuda" if mode == "reference" else mode)


def _build(arg: dict[str, Any], device: Any) -> Any:
    """An argument from its case entry: tensors to the device (with requires_grad)."""
    import torch

    kind = arg.get("kind")
    if kind == "tensor":
        tensor = arg["tensor"].to(device)
        if arg.get("requires_grad"):
            tensor.requires_grad_(True)
        return tensor
    if kind == "dtype":
        return getattr(torch, arg["value"])
    if kind in ("list", "tuple"):
        items = [_build(a, device) for a in arg["items"]]
        return items if kind == "list" else tuple(items)
    return arg.get("value")


def _named_leaves(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each tensor argument with its parameter's name (``x``, ``tensors[1]``)."""
    try:
        bound = dict(inspect.signature(fn).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        bound = {f"argument {i}": a for i, a in enumerate(args)} | kwargs
    named: list[tuple[str, Any]] = []
    for name, value in bound.items():
        found = leaves(value)
        if len(found) == 1 and found[0] is value:
            named.append((name, value))
        else:
            named += [(f"{name}[{i}]", t) for i, t in enumerate(found)]
    return named


def _projection(outputs: list[Any]) -> Any:
    import torch

    total = None
    for i, out in enumerate(outputs):
        if not (out.requires_grad and out.dtype.is_floating_point):
            continue
        gen = torch.Generator().manual_seed(PROJECTION_SEED + i)
        weight = torch.randn(tuple(out.shape), generator=gen, dtype=torch.float32)
        term = (out.float() * weight.to(out.device)).sum()
        total = term if total is None else total + term
    return total


def run_case(case: dict[str, Any], device: Any) -> dict[str, Any]:
    """One call of the site: outputs, the tensor arguments after it, and gradients."""
    import torch

    root = os.path.abspath(case.get("root") or ".")
    if root not in sys.path:
        sys.path.insert(0, root)
    target: Any = importlib.import_module(case["module"])
    for part in case["entry"].split("."):
        if not hasattr(target, part):  # the port renamed or removed it: nothing to call
            return {"missing": f"{case['module']} has no {case['entry']}"}
        target = getattr(target, part)
    args = [_build(a, device) for a in case["args"]]
    kwargs = {k: _build(v, device) for k, v in case["kwargs"].items()}
    named = _named_leaves(target, args, kwargs)
    result = target(*args, **kwargs)
    outputs = leaves(result)
    report: dict[str, Any] = {
        "outputs": [values(o) for o in outputs],
        "after": [{"name": n, **values(t)} for n, t in named],
        "grads": [],
    }
    wanted = [(n, t) for n, t in named if t.requires_grad]
    loss = _projection(outputs)
    if wanted and loss is not None:
        grads = torch.autograd.grad(loss, [t for _, t in wanted], allow_unused=True)
        report["grads"] = [
            {"name": n, **(values(g) if g is not None else {"none": True})}
            for (n, _), g in zip(wanted, grads, strict=True)
        ]
    seconds = _timed(target, args, kwargs)
    if seconds is not None:
        report["seconds"] = seconds
    return report


def _timed(target: Any, args: list[Any], kwargs: dict[str, Any]) -> float | None:
    """The fastest of a few more forward calls, or None where a repeated call fails (the
    compared call's answer stands; a timing is only evidence of cost)."""
    import torch

    best, spent = None, 0.0
    try:
        with torch.no_grad():
            for _ in range(TIMED_CALLS):
                start = time.perf_counter()
                target(*args, **kwargs)
                took = time.perf_counter() - start
                best, spent = took if best is None else min(best, took), spent + took
                if spent > TIMED_BUDGET_S:
                    break
    except Exception:  # an in-place site may refuse a second call
        return None
    return best


def main(argv: list[str]) -> int:
    import torch
    from torchport.sandbox.session import current

    session = current()
    mode = session.config.mode if session is not None else "reference"
    cases = torch.load(argv[0], weights_only=True)
    device = _device(mode, session.config.names if session is not None else None)
    reports = []
    for case in cases:
        try:
            reports.append({"site": case["site"], **run_case(case, device)})
        except Exception as exc:  # the site failed on this case: that is its answer
            message = f"{type(exc).__name__}: {exc}"[:1000]
            reports.append({"site": case["site"], "error": message})
    if session is not None:
        session.extra["site_check"] = {"mode": mode, "cases": reports}
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
