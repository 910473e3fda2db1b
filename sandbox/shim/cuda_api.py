"""`torch.cuda.*` answered as on a machine with ``devices`` idle GPUs (default 2).

A CPU-only torch raises on most of `torch.cuda` and reports `is_available() == False`,
which makes programs either crash or silently take a CPU branch. The reference run must
follow the program's CUDA branch, so every query answers like idle GPUs would (as many as
the emulated target has, so a program that spawns one rank per GPU spawns as many ranks),
and everything that would act on the device is a recorded no-op. RNG calls go to the CPU
generator: under the shim, "CUDA" random numbers are drawn from it. The `torch.backends`
knobs live in backends.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.autograd.profiler
import torch.cuda.memory
import torch.cuda.nvtx
import torch.cuda.profiler

from .. import patching
from .recording import record

DEVICE_NAME = "torchport reference (CPU)"
CAPABILITY = (8, 0)
TOTAL_MEMORY = 80 * 2**30
CUDA_VERSION = "12.8"


@dataclass(frozen=True)
class DeviceProperties:
    """Plausible properties of the one emulated GPU (an A100-like sm_80 part)."""

    name: str = DEVICE_NAME
    major: int = CAPABILITY[0]
    minor: int = CAPABILITY[1]
    total_memory: int = TOTAL_MEMORY
    multi_processor_count: int = 108
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    warp_size: int = 32
    max_threads_per_multi_processor: int = 2048
    regs_per_multiprocessor: int = 65536
    L2_cache_size: int = 40 * 2**20
    uuid: str = "00000000-0000-0000-0000-000000000000"
    gcnArchName: str = "NVIDIA"


class Event:
    """A CUDA event timed with `time.perf_counter` (CPU work is synchronous)."""

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
    ) -> None:
        record("torch.cuda.Event")
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: Any = None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event's and `end_event`'s record(), as CUDA reports."""
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0


class Stream:
    """A CUDA stream: work is already ordered on the CPU, so every method is a no-op."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("cpu")
        self.priority = priority

    def wait_event(self, event: Event) -> None:
        pass

    def wait_stream(self, stream: Stream) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_DEFAULT_STREAM = Stream()
_TENSOR_RECORD_STREAM = torch.Tensor.record_stream


def _record_stream(tensor: torch.Tensor, stream: Any) -> None:
    """``x.record_stream(s)`` keeps a CUDA allocation alive for stream ``s``; with the
    shim's streams (CPU work is ordered already) there is nothing to keep."""
    if isinstance(stream, Stream):
        record("torch.Tensor.record_stream", direct=True)
        return None
    return _TENSOR_RECORD_STREAM(tensor, stream)


@contextlib.contextmanager
def _null_context(*args: Any, **kwargs: Any) -> Iterator[None]:
    yield


def _recorded(api: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        record(api, direct=True)
        return fn(*args, **kwargs)

    wrapper.__name__ = api.rsplit(".", 1)[-1]
    wrapper.__doc__ = f"Shim for {api}: recorded, answered as the reference GPUs would."
    return wrapper


@dataclass
class _Machine:
    """How many GPUs the reference answers for, and which one the process selected."""

    count: int = 2
    current: int = 0

    def select(self, device: Any) -> None:
        index = device if isinstance(device, int) else torch.device(device).index
        if index is not None and index >= 0:
            self.current = index


_machine = _Machine()


def _const(value: Any) -> Callable[..., Any]:
    return lambda *args, **kwargs: value


def _set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    torch.set_rng_state(new_state)


def _set_rng_state_all(new_states: Any) -> None:
    for state in new_states:
        torch.set_rng_state(state)


def _manual_seed(seed: int) -> None:
    # Not torch.manual_seed: that calls torch.cuda.manual_seed_all itself.
    torch.default_generator.manual_seed(int(seed))


def _memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return "torchport reference (CPU): CUDA memory is not tracked; all counters are 0."


_TORCH_CUDA: dict[str, Callable[..., Any]] = {
    "is_available": _const(True),
    "is_initialized": _const(True),
    "init": _const(None),
    "device_count": lambda: _machine.count,
    "current_device": lambda: _machine.current,
    "set_device": lambda device: _machine.select(device),
    "get_device_name": _const(DEVICE_NAME),
    "get_device_properties": _const(DeviceProperties()),
    "get_device_capability": _const(CAPABILITY),
    "get_arch_list": _const([f"sm_{CAPABILITY[0]}{CAPABILITY[1]}"]),
    "is_bf16_supported": _const(True),
    "is_tf32_supported": _const(True),
    "synchronize": _const(None),
    "ipc_collect": _const(None),
    "empty_cache": _const(None),
    "current_stream": _const(_DEFAULT_STREAM),
    "default_stream": _const(_DEFAULT_STREAM),
    "set_stream": _const(None),
    "stream": _null_context,
    "device": _null_context,
    "device_of": _null_context,
    "manual_seed": _manual_seed,
    "manual_seed_all": _manual_seed,
    "seed": lambda: torch.default_generator.seed(),
    "seed_all": lambda: torch.default_generator.seed(),
    "initial_seed": lambda: torch.initial_seed(),
    "get_rng_state": lambda device="cuda": torch.get_rng_state(),
    "get_rng_state_all": lambda: [torch.get_rng_state()],
    "set_rng_state": _set_rng_state,
    "set_rng_state_all": _set_rng_state_all,
    "memory_allocated": _const(0),
    "max_memory_allocated": _const(0),
    "memory_reserved": _const(0),
    "max_memory_reserved": _const(0),
    "memory_cached": _const(0),
    "max_memory_cached": _const(0),
    "memory_stats": lambda *a, **k: {},
    "memory_snapshot": lambda *a, **k: [],
    "memory_summary": _memory_summary,
    "list_gpu_processes": _const("no processes are running"),
    "mem_get_info": _const((TOTAL_MEMORY, TOTAL_MEMORY)),
    "reset_peak_memory_stats": _const(None),
    "reset_max_memory_allocated": _const(None),
    "reset_max_memory_cached": _const(None),
    "reset_accumulated_memory_stats": _const(None),
    "set_per_process_memory_fraction": _const(None),
    "get_per_process_memory_fraction": _const(1.0),
    "utilization": _const(0),
    "memory_usage": _const(0),
    "temperature": _const(40),
    "power_draw": _const(0),
    "clock_rate": _const(0),
}
_MEMORY = ("_record_memory_history", "_dump_snapshot", "_snapshot")
_NVTX: dict[str, Callable[..., Any]] = {
    "range_push": _const(0),
    "range_pop": _const(0),
    "range_start": _const(0),
    "range_end": _const(None),
    "mark": _const(None),
    "range": _null_context,
}
# Nsight capture ranges (cudaProfilerStart/Stop): they record nothing on the CPU
_PROFILER: dict[str, Callable[..., Any]] = {
    "start": _const(None),
    "stop": _const(None),
    "init": _const(None),
    "profile": _null_context,
}


def install(devices: int = 2) -> None:
    """Replace the `torch.cuda` / backend functions above with recorded answers for a
    machine of ``devices`` GPUs."""
    _machine.count, _machine.current = devices, 0
    for name, fn in _TORCH_CUDA.items():
        patching.patch(torch.cuda, name, _recorded(f"torch.cuda.{name}", fn), by="shim.cuda_api")
    for name in _MEMORY:
        fn = (lambda *a, **k: {}) if name == "_snapshot" else _const(None)
        patching.patch(
            torch.cuda.memory, name, _recorded(f"torch.cuda.memory.{name}", fn), by="shim.cuda_api"
        )
    for name, fn in _NVTX.items():
        patching.patch(
            torch.cuda.nvtx, name, _recorded(f"torch.cuda.nvtx.{name}", fn), by="shim.cuda_api"
        )
    for name, fn in _PROFILER.items():
        patching.patch(
            torch.cuda.profiler,
            name,
            _recorded(f"torch.cuda.profiler.{name}", fn),
            by="shim.cuda_api",
        )
    patching.patch(
        torch.autograd.profiler,
        "emit_nvtx",
        _recorded("torch.autograd.profiler.emit_nvtx", _null_context),
        by="shim.cuda_api",
    )
    # torch.compile's inductor asks the CUDA caching allocator whether CUDA graphs may be
    # captured (reduce-overhead mode), through a binding a CPU build lacks: answer as a
    # CUDA build does; inductor then leaves graphs off for the CPU tensors it compiles
    patching.patch(
        torch._C,
        "_cuda_cudaCachingAllocator_is_enabled",
        _recorded("torch.cuda.caching_allocator_enabled", _const(True)),
        by="shim.cuda_api",
    )
    # Libraries that ship CUDA and CPU kernels side by side (bitsandbytes) bind the CUDA
    # stream getter at import once CUDA is available; their CUDA kernels are never reached
    # with the reference's CPU tensors, so the default stream's null handle answers
    patching.patch(
        torch._C,
        "_cuda_getCurrentRawStream",
        _recorded("torch.cuda.current_raw_stream", _const(0)),
        by="shim.cuda_api",
    )
    patching.patch(torch.Tensor, "record_stream", _record_stream, by="shim.cuda_api")
    patching.patch(torch.cuda, "Event", Event, by="shim.cuda_api")
    patching.patch(torch.cuda, "Stream", Stream, by="shim.cuda_api")
    patching.patch(torch.cuda, "default_generators", (torch.default_generator,), by="shim.cuda_api")
    patching.patch(torch.version, "cuda", CUDA_VERSION, by="shim.cuda_api")
