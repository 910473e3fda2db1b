"""Triton kernels in the reference run: executed by Triton's own interpreter on the CPU.

A program whose training path launches a ``@triton.jit`` kernel cannot run on a CPU-only
machine: Triton compiles for NVIDIA and AMD GPUs. Triton ships an interpreter for
debugging (``TRITON_INTERPRET=1``): every ``@triton.jit`` function becomes an
``InterpretedFunction`` that runs each program instance of the grid with numpy, on host
memory, with Triton's semantics (masks, reductions, dtypes). Under the reference shim the
program's "CUDA" tensors are CPU tensors already, so the kernels run on them as they are.

In the REFERENCE run only (a target run must fail on a kernel, as the real device does;
see ``sandbox.target_imports``), :func:`install` sets the variable before the program
imports triton and adapts what the interpreter leaves to a GPU driver:

- ``triton.runtime.driver.active``: a GPU machine has one; a CPU one has none ("0 active
  drivers"). A reference driver answers like the shim's GPU (device 0, an sm_80 target,
  A100-like properties) for launch helpers that ask
  (``driver.active.get_active_torch_device()``, ``utils.get_device_properties``).
- ``@triton.autotune``: the autotuner times every config with the driver's benchmarker.
  Timing means nothing here, and each timed run costs seconds in the interpreter, so the
  reference takes the first config (the order the author listed them) without running
  the others; a correct kernel computes the same with any config. Recorded.
- ``triton.testing.do_bench`` works (CPU events from the shim); its numbers are the
  interpreter's, not a GPU's.

Two things compiled Triton does that the interpreter (3.x) leaves out are filled in:

- a float scalar argument: compiled Triton passes it as an fp32 scalar (the launcher's
  signature says ``fp32``), so kernels call its methods (``eps.to(tl.float32)``); the
  interpreter passes the Python float, which has none. It becomes an fp32 scalar here.
- a libdevice function imported by name (``from triton.language.extra.libdevice import
  rsqrt``): compiled Triton maps the stub to the backend's libdevice; the interpreter runs
  the stub's body (``...``) and gets None. In the module of a kernel the interpreter runs,
  such a name calls ``triton.language.math``'s function of the same name (which the
  interpreter runs with numpy); one that module lacks stays as it was. Recorded as a note.

What the interpreter cannot do is left failing where the program reaches it, with
Triton's own error: the compiled kernel's metadata (``kernel.warmup(...).n_regs``,
``metadata.shared``, used by occupancy heuristics), inline PTX
(``tl.inline_asm_elementwise``), and tensor descriptors/TMA on some versions.

Every kernel launched is recorded (:func:`records`) for the run's result
(``reference_interpreters``): the reference numbers of such a run came from Triton's
interpreter, and the verdict says so.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections import Counter
from types import ModuleType
from typing import Any

from .. import patching
from ..importhook import PatchOnImport

ENV = "TRITON_INTERPRET"
BY = "shim.triton"
INTERPRETER = "triton-interpreter"

_launches: Counter[str] = Counter()
_notes: set[str] = set()
_version: list[str] = []
_lock = threading.Lock()


def _kernel_name(fn: Any) -> str:
    """``file:function`` of the Python function a ``@triton.jit`` decorated, the file
    relative to the program's folder (``kernels/softmax.py:_softmax_fwd``); else
    ``module.function``."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    filename = getattr(getattr(fn, "__code__", None), "co_filename", "")
    if filename and os.path.abspath(filename).startswith(os.getcwd() + os.sep):
        return f"{os.path.relpath(filename)}:{name}"
    return f"{getattr(fn, '__module__', None) or '?'}.{name}"


def _note(text: str) -> None:
    with _lock:
        _notes.add(text)


def _recording_run(real_run: Any) -> Any:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = _kernel_name(getattr(self, "fn", None))
        with _lock:
            _launches[name] += 1
        return real_run(self, *args, **kwargs)

    functools.update_wrapper(run, real_run, assigned=(), updated=())  # __wrapped__ only
    return run


def _untimed(kernel_call: Any, quantiles: Any = None, **kwargs: Any) -> Any:
    """The autotuner's benchmarker: every config "takes" the same time without running,
    so ``min`` keeps the first one listed."""
    _note("autotune: the first config listed was used, untimed")
    return [0.0] * len(quantiles) if quantiles else 0.0


class _Utils:
    """``driver.active.utils``: what launch helpers read of the device."""

    @staticmethod
    def get_device_properties(device: Any = 0) -> dict[str, int]:
        from .cuda_api import DeviceProperties

        props = DeviceProperties()
        return {
            "max_shared_mem": 166912,  # bytes per block on an sm_80 part
            "max_num_regs": props.regs_per_multiprocessor,
            "multiprocessor_count": props.multi_processor_count,
            "warpSize": props.warp_size,
            "sm_clock_rate": 1410000,
            "mem_clock_rate": 1215000,
            "mem_bus_width": 5120,
        }


class ReferenceDriver:
    """``triton.runtime.driver.active`` in the reference run: the shim's GPU, for the
    questions launch code asks; nothing is ever compiled with it."""

    utils = _Utils()

    @classmethod
    def is_active(cls) -> bool:
        return True

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        from .cuda_api import CAPABILITY

        return GPUTarget("cuda", CAPABILITY[0] * 10 + CAPABILITY[1], 32)

    def get_active_torch_device(self) -> Any:
        import torch

        from .cuda_api import _machine

        return torch.device("cuda", _machine.current)

    def get_current_device(self) -> int:
        from .cuda_api import _machine

        return _machine.current

    def set_current_device(self, device: Any) -> None:
        from .cuda_api import _machine

        _machine.select(device)

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        from .cuda_api import CAPABILITY

        return CAPABILITY

    def get_device_interface(self) -> Any:
        import torch

        return torch.cuda  # the shim's: events time with the CPU clock

    def get_benchmarker(self) -> Any:
        return _untimed

    def get_empty_cache_for_benchmark(self) -> Any:
        import torch

        return torch.empty(1024, dtype=torch.int8)  # no L2 to flush on the CPU

    def clear_cache(self, cache: Any) -> None:
        cache.zero_()

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise NotImplementedError("the reference run compiles no Triton kernel")


LIBDEVICE = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice")
STAND_IN = "_torchport_libdevice"  # marks a stand-in of _math_call: the name it stands for


def _as_fp32(real_cvt: Any) -> Any:
    """The interpreter's argument conversion, with a float scalar as compiled Triton passes
    it: an fp32 scalar (``triton.runtime.jit.mangle_type`` of a float is ``fp32``)."""

    def convert(arg: Any) -> Any:
        if isinstance(arg, float):
            import numpy as np
            import triton.language as tl
            from triton.runtime.interpreter import TensorHandle

            return tl.tensor(
                TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32
            )
        return real_cvt(arg)

    functools.update_wrapper(convert, real_cvt, assigned=(), updated=())
    return convert


def _math_call(name: str) -> Any:
    """A stand-in for libdevice's ``name`` that calls ``triton.language.math.name`` when
    called, which is when the interpreter has made it run with numpy."""

    def call(*args: Any, **kwargs: Any) -> Any:
        import triton.language as tl

        return getattr(tl.math, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = __name__
    setattr(call, STAND_IN, name)
    return call


def libdevice_by_name(namespace: dict[str, Any]) -> list[str]:
    """Point the libdevice functions that ``namespace`` (a kernel's module) imported by
    name at ``triton.language.math``'s of the same name; returns the names changed. The
    module's own names, never triton's: only code that reads them sees the change."""
    import triton.language as tl

    changed = []
    for key, value in list(namespace.items()):
        name = getattr(value, "__name__", "")
        if (
            callable(value)
            and getattr(value, "__module__", "") in LIBDEVICE
            and hasattr(tl.math, name)
        ):
            namespace[key] = _math_call(name)
            changed.append(key)
    return changed


def _rewriting_libdevice(real_rewrite: Any) -> Any:
    def rewrite(self: Any) -> Any:
        namespace = self.fn.__globals__
        libdevice_by_name(namespace)
        standing = sorted(k for k, v in list(namespace.items()) if hasattr(v, STAND_IN))
        if standing:  # noted at every launch: a forked child's records start empty
            _note(f"libdevice {', '.join(standing)} imported by name ran as triton.language.math's")
        return real_rewrite(self)

    functools.update_wrapper(rewrite, real_rewrite, assigned=(), updated=())
    return rewrite


def adapt(triton: ModuleType) -> None:
    """Record every interpreted launch and give the interpreter a driver (``triton`` is
    the freshly imported package)."""
    from triton.runtime import interpreter
    from triton.runtime.driver import driver

    with _lock:
        _version[:] = [str(getattr(triton, "__version__", "?"))]
    real_run = patching.original(interpreter.InterpretedFunction, "run")
    patching.patch(interpreter.InterpretedFunction, "run", _recording_run(real_run), by=BY)
    real_rewrite = patching.original(interpreter.InterpretedFunction, "rewrite")
    patching.patch(
        interpreter.InterpretedFunction, "rewrite", _rewriting_libdevice(real_rewrite), by=BY
    )
    real_cvt = patching.original(interpreter, "_implicit_cvt")
    patching.patch(interpreter, "_implicit_cvt", _as_fp32(real_cvt), by=BY)
    reference = ReferenceDriver()
    patching.patch(driver, "_default", reference, by=BY)  # reset_active() comes back to it
    patching.patch(driver, "_active", reference, by=BY)


_FINDER = PatchOnImport("triton", adapt)


def install() -> None:
    """Make ``@triton.jit`` kernels run in Triton's interpreter in this process and the
    processes it starts (idempotent). Call before the program imports triton."""
    os.environ[ENV] = "1"
    triton = sys.modules.get("triton")
    if triton is not None:
        if not patching.active(BY):
            adapt(triton)
        return
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Take the import hook off and undo the adaptations (tests; a run never does)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    patching.undo_all(BY)
    os.environ.pop(ENV, None)


def records() -> list[dict[str, Any]]:
    """What ran in Triton's interpreter: ``[{"interpreter", "version", "kernels": {name:
    launches}, "notes"}]``, or ``[]`` when no kernel was launched."""
    with _lock:
        if not _launches:
            return []
        return [
            {
                "interpreter": INTERPRETER,
                "version": _version[0] if _version else "?",
                "kernels": dict(sorted(_launches.items())),
                "notes": sorted(_notes),
            }
        ]


def reset() -> None:
    """Forget the launches recorded so far (a forked child counts its own)."""
    with _lock:
        _launches.clear()
        _notes.clear()
