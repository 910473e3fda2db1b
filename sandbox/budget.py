"""Watch a program from inside its own process: count optimizer steps (and stop it
cleanly after a budget), record the loss passed to each ``.backward()``, and, for
inference programs, summarise the outputs of top-level module calls.

Nothing here edits the program: it hooks torch's own global extension points
(optimizer step hooks, module forward hooks) and wraps ``Tensor.backward``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from . import patching, replays
from .emulator.counters import quiet

LOSS_SCALE = "_torchport_loss_scale"


# How many times the forward budget a training program may call its models before its
# first optimizer step (see Budget.forward_limit).
TRAINING_FORWARDS = 4


def has_weights(module: torch.nn.Module) -> bool:
    """A model, not a transform or a loss: torchvision's transforms are Modules too, and
    a data pipeline calling them must not spend the program's forward budget."""
    return next(module.parameters(), None) is not None


class StepBudgetReached(BaseException):
    """Raised after the last budgeted step. A BaseException, so a program's own
    ``except Exception`` does not swallow it."""


@dataclass
class Budget:
    max_steps: int | None = None  # optimizer steps (training)
    max_forwards: int | None = None  # top-level module calls (inference)
    steps: int = 0
    forwards: int = 0
    losses: list[float] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    # Told after every optimizer step (steps so far, the last loss): live progress.
    on_step: Callable[[int, float | None], None] | None = None
    # Told when the budget is spent, before StepBudgetReached is raised: a child process
    # writes its result and exits there (see ``sandbox.session``).
    on_limit: Callable[[str], None] | None = None
    # Told each number the moment it is recorded ("loss", "step", "forward", "output"):
    # the results channel's sender (sandbox.channel), so that what reaches the verdict
    # is what was recorded, not what this object holds when the program ends.
    journal: Callable[..., None] | None = None
    optimizers: int = 0  # constructed so far: a program that has one is training
    _depth: int = 0
    _in_backward: bool = False

    def forward_limit(self) -> int | None:
        """Forward calls before a stop. A program that built an optimizer is training:
        its steps are the budget, and forward calls before its first step (a generator
        and a discriminator, an evaluation pass) get a few rounds' room to reach it."""
        if self.max_forwards is None or not self.optimizers:
            return self.max_forwards
        return self.max_forwards * TRAINING_FORWARDS

    def record_loss(self, value: float) -> None:
        self.losses.append(value)
        if self.journal is not None:
            self.journal("loss", v=value)

    def count(self, name: str) -> int:
        """One more optimizer step ("steps") or top-level forward call ("forwards")."""
        setattr(self, name, getattr(self, name) + 1)
        if self.journal is not None:
            self.journal("step" if name == "steps" else "forward", n=getattr(self, name))
        return getattr(self, name)

    def record_output(self, summary: dict[str, Any]) -> None:
        self.outputs.append(summary)
        if self.journal is not None:
            self.journal("output", s=summary)

    def stop(self, reason: str) -> None:
        if self.on_limit is not None:
            self.on_limit(reason)
        raise StepBudgetReached(reason)

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "forwards": self.forwards,
            "losses": self.losses,
            "outputs": self.outputs,
        }


def _scalar(t: torch.Tensor) -> float:
    # Recording is the harness's business: its sync and float64 cast are not the program's.
    with quiet():
        value = float(t.detach().reshape(()).to("cpu", torch.float64))
        value /= getattr(t, LOSS_SCALE, 1.0)
    return value if math.isfinite(value) else float("nan")


def _tag_scaled_losses() -> None:
    """Make ``GradScaler.scale(loss)`` remember its factor, so the loss recorded at
    ``backward()`` is the program's loss, not loss x 65536: a reference run (CUDA
    GradScaler disabled on the CPU) and a port that keeps an enabled scaler must
    record the same numbers."""
    original = torch.amp.GradScaler.scale

    def scale(self: torch.amp.GradScaler, outputs: Any) -> Any:
        scaled = original(self, outputs)
        if isinstance(scaled, torch.Tensor) and scaled is not outputs and self.is_enabled():
            with quiet():
                setattr(scaled, LOSS_SCALE, float(self.get_scale()))
        return scaled

    patching.patch(torch.amp.GradScaler, "scale", scale, by="budget")


def summarize(value: Any) -> dict[str, Any] | None:
    """A few numbers that identify a tensor well enough to compare two runs."""
    if isinstance(value, tuple | list) and value:
        value = value[0]
    if isinstance(value, dict) and value:
        value = next(iter(value.values()))
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return None
    cpu = value.detach().to("cpu", torch.float64)
    return {
        "shape": list(cpu.shape),
        "mean": float(cpu.mean()) if cpu.numel() else 0.0,
        "std": float(cpu.std()) if cpu.numel() > 1 else 0.0,
        "abs_max": float(cpu.abs().max()) if cpu.numel() else 0.0,
    }


def _count_optimizers(budget: Budget) -> None:
    """Every optimizer's constructor ends in ``Optimizer.__init__``: count them there."""
    original = torch.optim.Optimizer.__init__

    def __init__(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        budget.optimizers += 1
        original(self, *args, **kwargs)

    patching.patch(torch.optim.Optimizer, "__init__", __init__, by="budget")


def install(budget: Budget) -> Budget:
    """Hook torch for this process; returns the budget being filled."""
    _tag_scaled_losses()
    original_backward = torch.Tensor.backward

    def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        # A TorchFunctionMode (the reference shim's) re-enters Tensor.backward through
        # torch's override machinery: record the outermost call only.
        outer = not budget._in_backward
        if outer and self.numel() == 1 and not replays.capturing():
            budget.record_loss(_scalar(self))
        budget._in_backward = True
        try:
            return original_backward(self, *args, **kwargs)
        finally:
            if outer:
                budget._in_backward = False

    patching.patch(torch.Tensor, "backward", backward, by="budget")

    def count_step() -> None:
        budget.count("steps")
        if budget.on_step is not None:
            budget.on_step(budget.steps, budget.losses[-1] if budget.losses else None)
        if budget.max_steps is not None and budget.steps >= budget.max_steps:
            budget.stop(f"{budget.steps} optimizer steps")

    def after_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not replays.capturing():  # a captured step runs at its replays
            count_step()

    def after_replay(losses: list[torch.Tensor], steps: int) -> None:
        for t in losses:
            budget.record_loss(_scalar(t))
        for _ in range(steps):
            count_step()

    register_optimizer_step_post_hook(after_step)
    replays.watch(after_replay)

    def before_forward(module: torch.nn.Module, args: Any) -> None:
        budget._depth += 1

    def after_forward(module: torch.nn.Module, args: Any, output: Any) -> None:
        budget._depth -= 1
        if budget._depth or not has_weights(module):
            return  # a submodule, a transform or a loss: only the program's models count
        budget.count("forwards")
        if budget.steps or budget.losses:
            return  # training: the optimizer steps are the budget
        if len(budget.outputs) < 64:
            summary = summarize(output)
            if summary is not None:
                budget.record_output(summary)
        limit = budget.forward_limit()
        if limit is not None and budget.forwards >= limit:
            budget.stop(f"{budget.forwards} forward calls")

    _count_optimizers(budget)
    torch.nn.modules.module.register_module_forward_pre_hook(before_forward)
    torch.nn.modules.module.register_module_forward_hook(after_forward)
    return budget
