"""``torch.Generator(device="tpu")``: device generators backed by CPU generators.

torch builds a PrivateUse1 generator through the C++
``PrivateUse1HooksInterface::getNewGenerator``, which a Python backend cannot
provide (``torch._C.Generator(device="tpu")`` raises ``NotImplementedError``).
``torch._C.Generator`` can be subclassed, though, and the dispatcher hands a
kernel the same C++ generator (same ``_cdata``) that the program passed. So
``activate()`` replaces ``torch.Generator`` with :class:`Generator`:

* ``Generator()`` / ``Generator("cpu")`` still return a plain ``torch._C.Generator``;
* ``Generator(device="tpu:1")`` returns a :class:`DeviceGenerator`, a real
  ``torch._C.Generator`` holding a CPU generator's state whose ``.device`` reports
  ``tpu:1``; it seeds, saves and restores state like any generator and, with the
  same seed, draws the same numbers as a CPU generator (device random ops run on
  the CPU);
* ``isinstance(g, torch.Generator)`` holds for both kinds.

Device random ops (``torch.randn(..., device="tpu", generator=g)``,
``x.uniform_(generator=g)`` on a device tensor) accept only device generators, as
on CUDA: a CPU generator there raises torch's ``Expected a 'tpu' device type for
generator but found 'cpu'``. CPU ops given a device generator (``torch.randperm(n,
generator=g)``, hence ``DataLoader(shuffle=True, generator=g)``) run with its CPU
state; CUDA would refuse them (a documented divergence).

``torch.tpu.default_generators[i]`` are device generators that stand for the CPU
default generator, from which the emulated device draws when no generator is given:
seeding or restoring them acts on ``torch.default_generator``.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .. import patching
from . import state
from .counters import record_cuda

_RealGenerator = torch._C.Generator
# _cdata (the C++ generator) -> the device generator object that owns it.
_registry: weakref.WeakValueDictionary[int, Generator] = weakref.WeakValueDictionary()
_default: list[DeviceGenerator] = []


class _GeneratorMeta(type(_RealGenerator)):  # type: ignore[misc]  # pybind's metaclass: a value to mypy
    """``isinstance(g, torch.Generator)`` stays true for plain ``torch._C.Generator``."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls is Generator:
            return isinstance(obj, _RealGenerator)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub: type) -> bool:
        if cls is Generator:
            return issubclass(sub, _RealGenerator)
        return super().__subclasscheck__(sub)


class Generator(_RealGenerator, metaclass=_GeneratorMeta):
    """Replacement for ``torch.Generator`` that also makes emulated-device generators."""

    def __new__(cls, device: Any = "cpu") -> Any:
        dev = torch.device("cpu" if device is None else device)
        if dev.type == "cuda":
            record_cuda(f"torch.Generator(device={str(dev)!r})")
        if dev.type != state.name:
            # Plain CPU (or meta/cuda: torch raises as usual) generator, exact type.
            if cls is Generator:
                return _RealGenerator(dev)
            return super().__new__(cls, dev)  # type: ignore[call-arg]  # the stubs have only __init__
        index = state.check_index(dev.index)
        kind = DeviceGenerator if cls is Generator else cls
        gen = super().__new__(kind, "cpu")  # type: ignore[call-arg]  # the same
        gen.__dict__["_emulated_index"] = index
        _enroll(gen, is_default=False)
        return gen

    def __init__(self, device: Any = "cpu") -> None:
        pass

    @property
    def device(self) -> torch.device:  # type: ignore[override]  # a property over torch's attribute: the emulated device
        index = self.__dict__.get("_emulated_index")
        return super().device if index is None else torch.device(state.name, index)


class DeviceGenerator(Generator):
    """A generator of the emulated device: CPU generator state, device ``tpu:N``."""

    def __repr__(self) -> str:
        return f"<torch.Generator object at {id(self):#x} (device={self.device})>"

    def __reduce__(self) -> Any:
        return (_rebuild, (str(self.device), self.get_state()))

    def __deepcopy__(self, memo: dict) -> DeviceGenerator:
        return _rebuild(str(self.device), self.get_state())


class _DefaultDeviceGenerator(DeviceGenerator):
    """``torch.<device>.default_generators[i]``: a view of ``torch.default_generator``."""

    def manual_seed(self, seed: int) -> _DefaultDeviceGenerator:
        torch.default_generator.manual_seed(seed)
        return self

    def seed(self) -> int:
        return torch.default_generator.seed()

    def initial_seed(self) -> int:
        return torch.default_generator.initial_seed()

    def get_state(self) -> torch.Tensor:
        return torch.default_generator.get_state()

    def set_state(self, new_state: torch.Tensor) -> _DefaultDeviceGenerator:
        torch.default_generator.set_state(new_state)
        return self

    def get_offset(self) -> int:
        return torch.default_generator.get_offset()

    def set_offset(self, offset: int) -> _DefaultDeviceGenerator:
        torch.default_generator.set_offset(offset)
        return self


def _enroll(gen: Generator, is_default: bool) -> None:
    """Make ``gen`` a device generator: the Python emulator's registry, or the native
    backend's (its C++ fallback refuses other generators and maps default ones)."""
    cdata: int = gen._cdata  # type: ignore[attr-defined]  # the C++ generator; not in the stubs
    _registry[cdata] = gen
    if state.native is not None:
        state.native.mark_generator(cdata, is_default)
        weakref.finalize(gen, state.native.forget_generator, cdata).atexit = False


def _rebuild(device: str, new_state: torch.Tensor) -> Any:
    gen = Generator(device=device)
    gen.set_state(new_state)
    return gen


def for_device_op(gen: Any) -> torch._C.Generator:
    """The CPU generator a device random op given ``generator=gen`` draws from.

    Raises torch's own error (aten's ``check_generator``) for a non-device generator.
    """
    owner = _registry.get(gen._cdata)
    if owner is None:
        raise RuntimeError(
            f"Expected a '{state.name}' device type for generator but found "
            f"'{gen.device.type}'. (Create it with torch.Generator(device='{state.name}').)"
        )
    return torch.default_generator if isinstance(owner, _DefaultDeviceGenerator) else gen


def default_generators() -> tuple[DeviceGenerator, ...]:
    """One generator per emulated device, all standing for the CPU default generator."""
    if not _default:
        for index in range(state.count):
            gen = Generator.__new__(_DefaultDeviceGenerator, torch.device(state.name, index))
            _enroll(gen, is_default=True)
            _default.append(gen)
    return tuple(_default)


def install() -> None:
    """Make ``torch.Generator`` the replacement (called by ``activate()``)."""
    patching.patch(torch, "Generator", Generator, by="emulator.generator")
