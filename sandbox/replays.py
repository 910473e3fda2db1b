"""Work a program captured once and replays later, told to the watchers its replays pass by.

A captured CUDA graph (the reference shim's, ``sandbox/shim/graphs.py``) runs the
program's backward and optimizer step again at each ``replay()``, below ``Tensor.backward``
and the optimizer's hooks, where the step budget (``sandbox/budget.py``) watches. Without
being told, the budget would count the one capture (on a GPU nothing runs then) and none of
the replays, and the reference's losses would not line up with a port's eager steps. So
the capture says while it is capturing (``capturing``), and each replay says what it redid:
the scalar tensors its backward calls started from (their new values) and how many
optimizer steps it ran. Standard library only: both sides import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# told after each replay: (the losses' tensors, optimizer steps)
Watcher = Callable[[list[Any], int], None]
_watchers: list[Watcher] = []
_capturing = 0


def watch(watcher: Watcher) -> None:
    if watcher not in _watchers:
        _watchers.append(watcher)


def unwatch(watcher: Watcher) -> None:
    if watcher in _watchers:
        _watchers.remove(watcher)


def capturing() -> bool:
    """Whether a capture is under way (its backward calls and steps are not steps yet)."""
    return _capturing > 0


def begin_capture() -> None:
    global _capturing
    _capturing += 1


def end_capture() -> None:
    global _capturing
    _capturing = max(0, _capturing - 1)


def replayed(losses: list[Any], steps: int) -> None:
    for watcher in list(_watchers):
        watcher(losses, steps)
