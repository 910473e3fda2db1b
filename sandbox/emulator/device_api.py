"""The rest of the public ``torch.tpu`` / ``torch.neuron`` surface, for API parity.

TorchTPU's public names (sandbox/data/torch_tpu.toml, derived from the torch-tpu wheel)
beyond device management and
seeding: streams and events (placeholders there too: work is ordered, and timing
is done with ``torch.accelerator.synchronize()`` + ``time.perf_counter()``),
``device_of``, ``get_device_properties``, matmul ``precision`` (its arithmetic:
``precision.py``) and ``eager_mode`` settings, and the
submodules ``compiler``, ``optimizers``, ``pallas``, ``profiler``, ``ops``, whose contents
are not emulated and say so when used; ``distributed`` is ``tpu_distributed`` (the launch step).
"""

from __future__ import annotations

import enum
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import precision, state, tpu_distributed

TOTAL_MEMORY = 16 * 2**30


_PRIVATEUSE1 = int(torch._C._autograd.DeviceType.PrivateUse1)  # type: ignore[call-overload]  # a pybind enum: int() works, the stubs do not say so


def _stream(cls: type, device: Any) -> Any:
    # Built from (stream_id, device_index, device_type): torch.Stream(device=...) asks the
    # Python device guard, which always answers device index 0.
    index = state.check_index(_index(device))
    return torch.Stream.__new__(cls, stream_id=0, device_index=index, device_type=_PRIVATEUSE1)


class Stream(torch.Stream):
    """``torch.<device>.Stream``: a ``torch.Stream`` of the emulated device (a placeholder)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        return _stream(cls, device)


class Event(torch.Event):
    """``torch.<device>.Event``; ``elapsed_time`` is host time between the two records.

    As TorchTPU's ``TpuEvent.elapsed_time``: both events must be created with
    ``enable_timing=True`` and recorded (and completed: on the emulator, work is done
    when ``record`` returns), else its RuntimeError.
    """

    _timing: bool  # enable_timing, set by __new__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._recorded_at: float | None = None

    def __new__(cls, enable_timing: bool = False, **kwargs: Any) -> Event:
        kwargs.pop("device", None)
        kwargs.pop("external", None)  # TorchTPU accepts it for CUDA's API, torch.Event not
        event = super().__new__(cls, device=state.device(), enable_timing=enable_timing, **kwargs)
        event._timing = bool(enable_timing)
        return event

    def record(self, stream: Any = None) -> Event:  # type: ignore[override]  # returns the event, as TorchTPU's does
        super().record(stream)
        self._recorded_at = time.perf_counter()
        return self

    def query(self) -> bool:
        """True: TorchTPU's ``TpuEvent.query`` is whether the work ``record`` captured has
        completed, and on the emulator it has when ``record`` returns (or was never
        recorded: nothing captured). Answered here, not by torch's ``Event.query``, which the
        Python backend's device guard does not implement."""
        return True

    def synchronize(self) -> None:
        """Returns at once: TorchTPU's ``TpuEvent.synchronize`` waits for the work ``record``
        captured (returning at once if never recorded), and on the emulator that work is done
        when ``record`` returns. Not torch's ``Event.synchronize``, which on the Python
        backend raises "Backend doesn't support synchronizing events."."""

    def elapsed_time(self, end_event: Event) -> float:  # type: ignore[override]  # only another emulated Event has a record time
        """Milliseconds between this event's and ``end_event``'s ``record()``."""
        if not (getattr(self, "_timing", False) and getattr(end_event, "_timing", False)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        start, end = self._recorded_at, getattr(end_event, "_recorded_at", None)
        if start is None or end is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end - start) * 1000.0


def _index(device: Any) -> int | None:
    if device is None:
        return None
    if isinstance(device, int):
        return device
    if isinstance(device, torch.Stream):
        return device.device_index
    device = torch.device(device)
    if device.type != state.name:
        raise ValueError(f"expected a {state.name} device, got {device}")
    return device.index


def current_stream(device: Any = None) -> torch.Stream:
    """The (placeholder) stream of ``device``, or of the current device."""
    return _stream(torch.Stream, device)


def set_stream(stream: Any) -> None:
    """The emulator has one (placeholder) stream: nothing to switch."""


@contextmanager
def _stream_ctx(stream: Any = None) -> Iterator[Any]:
    yield stream


@contextmanager
def _device_of(obj: Any) -> Iterator[None]:
    """Make ``obj``'s device current inside the block (no-op for a CPU tensor)."""
    if isinstance(obj, torch.Tensor) and obj.device.type == state.name:
        prev = state.current_index()
        state.set_current_index(obj.device.index or 0)
        try:
            yield
        finally:
            state.set_current_index(prev)
    else:
        yield


def _device_properties(device: Any = None) -> types.SimpleNamespace:
    index = state.check_index(_index(device))
    return types.SimpleNamespace(
        name=f"emulated {state.name} (CPU)",
        type=state.name,
        index=index,
        total_memory=TOTAL_MEMORY,
        is_emulated=True,
    )


class EagerMode(enum.Enum):
    """TorchTPU's execution modes (``torch_tpu/_internal/execution_mode``); the emulator
    runs every mode eagerly, op by op."""

    DEFER_AND_FUSE = "defer_and_fuse"
    DEFER_NEVER = "defer_never"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "defer_never_and_launch_blocking"
    _INTERNAL_COMPILE_FX_GRAPH = "internal_compile_fx_graph"


# TorchTPU's execution settings: read and assigned as properties of ``torch.tpu``.
_modes: dict[str, Any] = {"eager_mode": EagerMode.DEFER_NEVER, "allow_excess_precision": False}


def _check_eager_mode(mode: Any) -> EagerMode:
    if not isinstance(mode, EagerMode):
        raise TypeError(f"expected a torch.tpu.EagerMode, got {mode!r}")
    return mode


@contextmanager
def _set_eager_mode(mode: EagerMode) -> Iterator[None]:
    """``with torch.tpu.set_eager_mode(EagerMode.DEFER_NEVER):`` (TorchTPU's context manager)."""
    prev = _modes["eager_mode"]
    _modes["eager_mode"] = _check_eager_mode(mode)
    try:
        yield
    finally:
        _modes["eager_mode"] = prev


class _TpuModule(types.ModuleType):
    """``torch.tpu`` with TorchTPU's module properties: ``torch.tpu.eager_mode`` and
    ``torch.tpu.allow_excess_precision`` are read and assigned, not called."""

    @property
    def eager_mode(self) -> EagerMode:
        return _modes["eager_mode"]

    @eager_mode.setter
    def eager_mode(self, value: EagerMode) -> None:
        _modes["eager_mode"] = _check_eager_mode(value)

    @property
    def allow_excess_precision(self) -> bool:
        return _modes["allow_excess_precision"]

    @allow_excess_precision.setter
    def allow_excess_precision(self, value: bool) -> None:
        _modes["allow_excess_precision"] = bool(value)


def with_properties(module: types.ModuleType) -> types.ModuleType:
    """Give ``torch.tpu`` its property-shaped settings (as TorchTPU's module class does)."""
    module.__class__ = _TpuModule
    return module


def _topology_aware_mesh(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(
        f"torch.{state.name}.topology_aware_mesh is not emulated; build the mesh with "
        f"torch.distributed.device_mesh.init_device_mesh({state.name!r}, shape)."
    )


class _NotEmulated(types.ModuleType):
    """A TorchTPU submodule whose contents the emulator does not provide."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(
            f"{self.__name__}.{attr} is not emulated (torchport's CPU emulator provides "
            "device management, RNG, autocast, streams/events and torch.compile/distributed "
            "backends); use the portable torch API instead (torch.optim, torch.compile, "
            "torch.distributed, torch.nn.functional.scaled_dot_product_attention, ...)."
        )


def extra_functions(name: str) -> dict[str, Callable[..., Any] | Any]:
    """Names added to ``torch.<name>`` besides device management and seeding."""
    extras: dict[str, Any] = {
        "Stream": Stream,
        "Event": Event,
        "current_stream": current_stream,
        "default_stream": current_stream,
        "set_stream": set_stream,
        "stream": _stream_ctx,
        "device_of": _device_of,
        "get_device_properties": _device_properties,
    }
    if name == "tpu":
        extras.update(
            {
                "Precision": precision.Precision,
                "precision": precision.precision,
                "EagerMode": EagerMode,
                "set_eager_mode": _set_eager_mode,
                "topology_aware_mesh": _topology_aware_mesh,
            }
        )
        for sub in ("compiler", "optimizers", "pallas", "profiler", "ops"):
            extras[sub] = _NotEmulated(f"torch.tpu.{sub}", "Not emulated by torchport.")
        extras["distributed"] = tpu_distributed.install("torch.tpu.distributed")
    return extras
