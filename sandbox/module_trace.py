"""Every module's output at one training step, recorded in a sandboxed run: the evidence of
where a port first computes something else (``agents.divergence`` compares two traces).

When the losses of a port and its original part at step ``k``, the verifier runs both again
with this trace on. During step ``k`` (the forward and backward before the ``k``-th
optimizer step), a global forward hook notes each module call in execution order: the
module's qualified name, its class and where its ``forward`` is defined, the output's dtype
and shape, a fixed sample of its values (``tensor_json.values``: the same positions on both
sides) and of its first input's, and, on an emulated device, the ops that
reached the device inside a module with no submodules. At the ``k``-th optimizer step it
notes each parameter's gradient the same way.

Both sides must see the same weights for a module's output to mean anything: the original's
run sends its models' weights at the start of step ``k`` (``send_weights``), and the port's
run loads them at the same point (``weights``: a file torchport wrote into the port's copy),
so a module that differs computes otherwise from the same inputs and the same weights.

Standard library only until ``install``; torch after.
"""

from __future__ import annotations

import base64
import inspect
import io
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

SAMPLE = 256  # values noted per tensor, at fixed positions
MAX_CALLS = 1500  # module calls noted in the step (the channel takes 2M values)
MAX_WEIGHT_BYTES = 24 * 2**20  # the largest state a run sends (the channel's bound is 64 MiB)


class Trace:
    """What one process notes: settings, the model roots seen, and the calls."""

    def __init__(self, spec: dict[str, Any], program_dir: str, counters: Any) -> None:
        self.step = int(spec["step"])
        self.send_weights = bool(spec.get("send_weights"))
        weights = spec.get("weights")
        self.weights_file = os.path.abspath(weights) if weights else None
        self.program_dir = os.path.realpath(program_dir)
        self.counters = counters  # the emulator's op counters, or None
        self.done = 0  # optimizer steps seen
        self.stack: list[str] = []  # the names of the modules executing, innermost last
        self.names: dict[int, str] = {}
        self.roots: list[Any] = []
        self.calls: list[dict[str, Any]] = []
        self.grads: list[dict[str, Any]] = []
        self.weights: dict[str, Any] = {}
        self.ops_before: dict[int, dict[str, int]] = {}
        self.truncated = False
        self.places: dict[type, str] = {}

    def recording(self) -> bool:
        return self.done == self.step - 1

    def report(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "steps_seen": self.done,
            "calls": self.calls,
            "grads": self.grads,
            "weights": self.weights,
            "truncated": self.truncated,
        }


def _plain_name(name: str) -> str:
    """DataParallel and DDP wrap a model as ``module``: the same layer on both sides."""
    while name.startswith("module."):
        name = name[len("module.") :]
    return "" if name == "module" else name


def sample(tensor: Any) -> dict[str, Any]:
    """A tensor's dtype, shape and ``SAMPLE`` of its values, at the positions the kernel
    check samples (``tensor_json.values``: the same for the same size on both sides)."""
    from .tensor_json import values

    return values(tensor, SAMPLE)


def _first_tensor(value: Any) -> Any:
    from .tensor_json import leaves

    return next(iter(leaves(value)), None)


def _where(trace: Trace, module: Any) -> str:
    """``path:first-last`` of the module class's ``forward``, relative to the program's
    folder, or ``package.module.Class`` for a class outside it (torch's own layers)."""
    cls = type(module)
    if cls not in trace.places:
        trace.places[cls] = _place(trace, cls)
    return trace.places[cls]


def _place(trace: Trace, cls: type[torch.nn.Module]) -> str:
    forward = cls.forward
    try:
        filename = os.path.realpath(inspect.getsourcefile(forward) or "")
        lines, first = inspect.getsourcelines(forward)
    except (OSError, TypeError):
        return f"{cls.__module__}.{cls.__qualname__}"
    if not filename.startswith(trace.program_dir + os.sep):
        return f"{cls.__module__}.{cls.__qualname__}"
    relative = os.path.relpath(filename, trace.program_dir)
    return f"{relative}:{first}-{first + len(lines) - 1}"


def _name_root(trace: Trace, root: Any) -> None:
    trace.roots.append(root)
    same = sum(type(r) is type(root) for r in trace.roots)  # two models of one class: #2
    label = type(root).__name__ if same == 1 else f"{type(root).__name__}#{same}"
    for name, module in root.named_modules():
        trace.names.setdefault(id(module), _plain_name(name) or label)


def _is_model(module: Any) -> bool:
    """A model, not a transform or a loss: the step budget's test."""
    from .budget import has_weights

    return has_weights(module)


def _root_index(trace: Trace, root: Any) -> int:
    return next(i for i, r in enumerate(trace.roots) if r is root)


def _weights_at_step(trace: Trace, root: Any) -> None:
    """The original's run sends its model's weights; the port's loads the original's."""
    import torch

    key = str(_root_index(trace, root))
    if key in trace.weights:
        return
    state = {_plain_name(k): v for k, v in root.state_dict().items()}
    if trace.send_weights:
        size = sum(v.numel() * v.element_size() for v in state.values() if hasattr(v, "numel"))
        if size > MAX_WEIGHT_BYTES:
            trace.weights[key] = {"sent": False, "bytes": size}
            return
        buffer = io.BytesIO()
        torch.save({k: v.detach().to("cpu") for k, v in state.items()}, buffer)
        trace.weights[key] = {
            "sent": True,
            "bytes": size,
            "state": base64.b64encode(buffer.getvalue()).decode(),
        }
    elif trace.weights_file:
        trace.weights[key] = _load(root, state, key, trace.weights_file)


def _load(root: Any, state: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    import torch

    try:
        given = torch.load(f"{path}-{key}.pt", map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError) as exc:
        return {"loaded": 0, "problem": f"{type(exc).__name__}: {exc}"}
    if not isinstance(given, dict):
        return {"loaded": 0, "problem": "the original's run sent no weights for this model"}
    loaded, differing = 0, []
    with torch.no_grad():
        for name, tensor in state.items():
            theirs = given.get(name)
            if theirs is None or tuple(theirs.shape) != tuple(tensor.shape):
                differing.append(name)
                continue
            tensor.copy_(theirs.to(tensor.dtype))
            loaded += 1
    return {"loaded": loaded, "missing": differing[:20], "missing_count": len(differing)}


def _ops_now(trace: Trace) -> dict[str, int]:
    try:
        return dict(trace.counters.counters().get("ops_by_name") or {})
    except Exception:  # the counters are evidence only: a trace without them still says where
        return {}


def before(trace: Trace, module: Any, args: Any) -> None:
    if not trace.recording():
        return
    if not trace.stack and id(module) not in trace.names and _is_model(module):
        _name_root(trace, module)
    if not trace.stack and any(module is r for r in trace.roots):
        _weights_at_step(trace, module)
    trace.stack.append(trace.names.get(id(module), ""))
    if trace.counters is not None and not any(True for _ in module.children()):
        trace.ops_before[id(module)] = _ops_now(trace)


def after(trace: Trace, module: Any, args: Any, output: Any) -> None:
    if not trace.recording():
        return
    if trace.stack:
        trace.stack.pop()
    ops = None
    if id(module) in trace.ops_before:  # before sampling: its copies are not the module's
        was, now = trace.ops_before.pop(id(module)), _ops_now(trace)
        ops = sorted(op for op, n in now.items() if n > was.get(op, 0))
    out = _first_tensor(output)
    if out is None or id(module) not in trace.names:
        return
    if len(trace.calls) >= MAX_CALLS:
        trace.truncated = True
        return
    call: dict[str, Any] = {
        "name": trace.names[id(module)],
        "cls": type(module).__name__,
        "where": _where(trace, module),
        "leaf": not any(True for _ in module.children()),
        # the module whose forward called this one: its code made this call's input
        "parent": next((n for n in reversed(trace.stack) if n), None),
        "out": sample(out),
    }
    given = _first_tensor(args)
    if given is not None:
        call["in"] = sample(given)
    if ops is not None:
        call["ops"] = ops
    trace.calls.append(call)


def after_step(trace: Trace) -> None:
    """The ``k``-th optimizer step: each parameter's gradient, then the trace is done."""
    trace.done += 1
    if trace.done != trace.step:
        return
    for index, root in enumerate(trace.roots):
        for name, parameter in root.named_parameters():
            if parameter.grad is not None and len(trace.grads) < MAX_CALLS:
                trace.grads.append(
                    {"root": index, "name": _plain_name(name), "grad": sample(parameter.grad)}
                )


_trace: Trace | None = None


def install(spec: dict[str, Any], mode: str) -> Trace:
    """Hook this process's modules and optimizers for the trace ``spec``."""
    global _trace
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # hooks see eager modules; compile is off
    if (dynamo := sys.modules.get("torch._dynamo")) is not None:
        dynamo.config.disable = True
    counters = (
        sys.modules.get("torchport.sandbox.emulator.counters") if mode != "reference" else None
    )
    trace = _trace = Trace(spec, os.getcwd(), counters)
    torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: before(trace, m, a))
    torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: after(trace, m, a, o))
    register_optimizer_step_post_hook(lambda opt, a, k: after_step(trace))
    return trace


def report() -> dict[str, Any] | None:
    return _trace.report() if _trace is not None else None
