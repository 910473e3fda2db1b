"""CUDA graphs on the CPU reference: capture records the ops, replay runs them again.

A CPU-only torch has no ``torch.cuda.CUDAGraph`` (its dummy base class raises), so an
original that captures its step in a graph cannot run on the reference at all, and no port
of it could be compared with anything. What a CUDA graph does is small to state: capture
records the kernels the captured code launches, WITHOUT running them; ``replay()`` runs
those kernels again, on the same memory, whatever the tensors hold then. The shim does that
at the level of aten ops:

- during capture a ``TorchDispatchMode`` records every op (the forward, the backward the
  autograd engine runs, the optimizer's updates) with the very tensors it read and wrote.
  The op does run, so that its outputs exist with their shapes and memory (on a GPU they
  would hold garbage until the first replay); every tensor that existed before the capture
  and that an op wrote is put back as it was when the capture ends, because on a GPU no
  captured kernel ran;
- ``replay()`` runs the recorded ops in order on the recorded tensors, writing each result
  into the tensor the capture produced, so that the "static" outputs a program reads after
  ``replay()`` (``static_loss``, the parameters, their gradients) change as on a GPU.

Python code in the captured block runs once, at capture, as on a GPU. The step budget is
told what each replay redid (its backward calls' losses, its optimizer steps:
``sandbox.replays``) and counts nothing at the capture, so the reference's steps are the
replays, as a port's eager steps will be. Random ops draw again
from the CPU generator on each replay (a graph's RNG also advances per replay).
``make_graphed_callables`` returns its callables unchanged: graphed callables compute
what the eager ones do, which is what the reference needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .. import patching, replays
from .recording import record


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _written(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors ``func`` writes in place (its schema's ``Tensor(a!)`` arguments)."""
    written: list[torch.Tensor] = []
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = kwargs.get(argument.name, args[i] if i < len(args) else None)
        written += _tensors(value)
    return written


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _Capture(TorchDispatchMode):
    """Records the ops of one capture; keeps what pre-existing memory held before them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[Any, tuple, dict, Any]] = []
        self.fresh: set[int] = set()  # storages the captured ops allocated
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # storage -> (t, copy)

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        for t in _written(func, args, kwargs):
            key = _storage(t)
            if key not in self.fresh and key not in self.saved:
                base = t if t._base is None else t._base
                self.saved[key] = (base, base.detach().clone())
        inputs = {_storage(t) for t in _tensors((args, kwargs))}
        out = func(*args, **kwargs)
        self.fresh.update(k for k in map(_storage, _tensors(out)) if k not in inputs)
        self.ops.append((func, args, kwargs, out))
        return out

    def restore(self) -> None:
        """Memory that existed before the capture holds what it held then."""
        with torch.no_grad():
            for base, copy in self.saved.values():
                base.detach().copy_(copy)
        self.saved.clear()


def _write_back(recorded: Any, result: Any) -> None:
    for old, new in zip(_tensors(recorded), _tensors(result), strict=True):
        if old is new or (
            old.data_ptr() == new.data_ptr()
            and old.shape == new.shape
            and old.stride() == new.stride()
        ):
            continue  # an in-place op or a view: it wrote where the capture's result lives
        old.detach().copy_(new)


class _Steps:
    """The backward calls and optimizer steps of one capture: what each replay redoes, told
    to the step budget (``sandbox.replays``), which does not count the capture itself."""

    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.steps = 0
        self._hook: Any = None

    def __enter__(self) -> _Steps:
        original = torch.Tensor.backward
        steps = self

        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if tensor.numel() == 1 and not any(tensor is t for t in steps.losses):
                steps.losses.append(tensor)
            return original(tensor, *args, **kwargs)

        self._patch = patching.patch(torch.Tensor, "backward", backward, by="shim.graphs")
        self._hook = register_optimizer_step_post_hook(self._stepped)
        replays.begin_capture()
        return self

    def _stepped(self, *args: Any) -> None:
        self.steps += 1

    def __exit__(self, *exc: object) -> None:
        replays.end_capture()
        self._hook.remove()
        patching.undo(self._patch)


class CUDAGraph:
    """``torch.cuda.CUDAGraph`` for the reference run (see the module docstring)."""

    def __init__(self, keep_graph: bool = False) -> None:
        record("torch.cuda.CUDAGraph")
        self._ops: list[tuple[Any, tuple, dict, Any]] = []
        self._capture: _Capture | None = None
        self._steps = _Steps()

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        if self._capture is not None:
            raise RuntimeError("this CUDA graph is already capturing")
        self._steps = _Steps().__enter__()
        self._capture = _Capture()
        self._capture.__enter__()
        _capturing.append(self)

    def capture_end(self) -> None:
        capture, self._capture = self._capture, None
        if capture is None:
            raise RuntimeError("capture_end() without capture_begin()")
        capture.__exit__(None, None, None)
        self._steps.__exit__(None, None, None)
        _capturing.remove(self)
        capture.restore()
        self._ops = capture.ops

    def replay(self) -> None:
        record("torch.cuda.CUDAGraph.replay")
        with torch.no_grad():
            for func, args, kwargs, out in self._ops:
                _write_back(out, func(*args, **kwargs))
        if self._steps.losses or self._steps.steps:
            replays.replayed(self._steps.losses, self._steps.steps)

    def reset(self) -> None:
        self._ops = []

    def instantiate(self) -> None:
        pass

    def pool(self) -> tuple[int, int]:
        return (0, id(self))

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        pass


_capturing: list[CUDAGraph] = []


class graph:  # torch.cuda.graph is a class spelled in lower case
    """``with torch.cuda.graph(g): ...`` captures the block into ``g``."""

    def __init__(
        self,
        cuda_graph: CUDAGraph,
        pool: Any = None,
        stream: Any = None,
        capture_error_mode: str = "global",
    ) -> None:
        record("torch.cuda.graph")
        self.cuda_graph = cuda_graph

    def __enter__(self) -> None:
        self.cuda_graph.capture_begin()

    def __exit__(self, *exc: object) -> None:
        self.cuda_graph.capture_end()


def make_graphed_callables(callables: Any, sample_args: Any, *args: Any, **kwargs: Any) -> Any:
    """The callables themselves: a graphed callable computes what the eager one does."""
    record("torch.cuda.make_graphed_callables")
    return callables


def graph_pool_handle() -> tuple[int, int]:
    record("torch.cuda.graph_pool_handle")
    return (0, 0)


def is_current_stream_capturing() -> bool:
    return bool(_capturing)


def _replacements() -> Iterator[tuple[Any, str, Any]]:
    for owner in (torch.cuda, torch.cuda.graphs):
        yield owner, "CUDAGraph", CUDAGraph
        yield owner, "graph", graph
        yield owner, "make_graphed_callables", make_graphed_callables
        yield owner, "graph_pool_handle", graph_pool_handle
        yield owner, "is_current_stream_capturing", is_current_stream_capturing


def install() -> None:
    """Put the recording CUDA graphs in place of the CPU build's dummy ones."""
    for owner, name, value in _replacements():
        patching.patch(owner, name, value, by="shim.graphs")
