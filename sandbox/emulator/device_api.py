"""The rest of the public ``torch.tpu`` / ``torch.neuron`` surface, for API parity.

TorchTPU's public names (see TARGETS.md, "tpu") beyond device management and
seeding: streams and events (placeholders there too: work is ordered, and timing
is done with ``torch.accelerator.synchronize()`` + ``time.perf_counter()``),
``device_of``, ``get_device_properties``, matmul ``precision`` (its arithmetic:
``precision.py``) and ``eager_mode`` settings, and the
submodules ``compiler``, ``distributed``, ``optimizers``, ``pallas``, ``profiler``,
``ops``, whose contents are not emulated and say so when used.
"""

from __future__ import annotations

import enum
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import precision, state

TOTAL_MEMORY = 16 * 2**30


_PRIVATEUSE1 = int(torch._C._autograd.DeviceType.PrivateUse1)


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
    """``torch.<device>.Event``; ``elapsed_time`` is host time between the two records."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._recorded_at: float | None = None

    def __new__(cls, enable_timing: bool = False, **kwargs: Any) -> Event:
        kwargs.pop("device", None)
        return super().__new__(cls, device=state.device(), enable_timing=enable_timing, **kwargs)

    def record(self, stream: Any = None) -> None:
        super().record(stream)
        self._recorded_at = time.perf_counter()

    def elapsed_time(self, end_event: Event) -> float:  # type: ignore[override]
        """Milliseconds between this event's and ``end_event``'s ``record()``."""
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
    """TorchTPU's execution modes; the emulator always runs eagerly."""

    DEFER_NEVER = "defer_never"
    DEFER_AND_FUSE = "defer_and_fuse"


_settings: dict[str, Any] = {
    "eager_mode": EagerMode.DEFER_NEVER,
    "excess_precision": True,
}


@contextmanager
def _setting(key: str, value: Any) -> Iterator[None]:
    prev = _settings[key]
    _settings[key] = value
    try:
        yield
    finally:
        _settings[key] = prev


def _set_eager_mode(mode: EagerMode | str) -> None:
    _settings["eager_mode"] = EagerMode(mode) if isinstance(mode, str) else mode


def _eager_mode(mode: EagerMode | str | None = None) -> Any:
    """Current mode, or (given one) a context manager that sets it."""
    if mode is None:
        return _settings["eager_mode"]
    return _setting("eager_mode", EagerMode(mode) if isinstance(mode, str) else mode)


def _allow_excess_precision(allow: bool = True) -> Any:
    return _setting("excess_precision", bool(allow))


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
        "set_stream": lambda stream: None,
        "stream": _stream_ctx,
        "device_of": _device_of,
        "get_device_properties": _device_properties,
    }
    if name == "tpu":
        extras.update(
            {
                "Precision": precision.Precision,
                "precision": precision.precision,
                "allow_excess_precision": _allow_excess_precision,
                "EagerMode": EagerMode,
                "eager_mode": _eager_mode,
                "set_eager_mode": _set_eager_mode,
                "topology_aware_mesh": _topology_aware_mesh,
            }
        )
        for sub in ("compiler", "distributed", "optimizers", "pallas", "profiler", "ops"):
            extras[sub] = _NotEmulated(f"torch.tpu.{sub}", "Not emulated by torchport.")
    return extras
