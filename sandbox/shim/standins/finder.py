"""The import hook that serves the reference stand-ins when a CUDA-only library is absent.

One finder sits at the front of ``sys.meta_path`` in a reference run. For a top-level name
it knows (``flash_attn``, ``xformers``, ``apex``) it first asks the other finders: if the
real package is there, the real one is imported and nothing is stood in. Otherwise it
serves a stand-in module whose attributes come from this package; submodules of a
stand-in are served the same way, and a submodule or attribute the stand-in does not
cover fails with an error that says so.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from . import apex, flash, xformers

MARK = "__torchport_standin__"


@dataclass(frozen=True)
class Stub:
    source: ModuleType | None  # the implementation in this package
    names: tuple[str, ...]
    package: bool


_FLASH = tuple(flash.__all__)
_XOPS = tuple(xformers.__all__)
_BIASES = tuple(n for n in xformers.__all__ if n.endswith(("Mask", "Bias")))

STUBS: dict[str, Stub] = {
    "flash_attn": Stub(flash, _FLASH, True),
    "flash_attn.flash_attn_interface": Stub(flash, _FLASH, False),
    "xformers": Stub(None, (), True),
    "xformers.ops": Stub(xformers, _XOPS, True),
    "xformers.ops.fmha": Stub(xformers, _XOPS, True),
    "xformers.ops.fmha.attn_bias": Stub(xformers, _BIASES, False),
    "apex": Stub(None, (), True),
    "apex.optimizers": Stub(apex, apex.OPTIMIZERS, True),
    "apex.optimizers.fused_adam": Stub(apex, ("FusedAdam",), False),
    "apex.normalization": Stub(apex, apex.NORMALIZATION, True),
    "apex.normalization.fused_layer_norm": Stub(apex, apex.NORMALIZATION, False),
    "apex.amp": Stub(apex, apex.AMP, True),
    "apex.parallel": Stub(apex, apex.PARALLEL, True),
}
VERSIONS = {"flash_attn": flash.__version__, "xformers": xformers.__version__}
TOPS = frozenset(name for name in STUBS if "." not in name)


def _modules(top: str) -> str:
    """The stand-in modules of one library, for error messages."""
    return ", ".join(name for name in STUBS if name.partition(".")[0] == top)


def _provided(name: str) -> str:
    """What one stand-in module provides (attributes and submodules), for error messages."""
    children = [child.rpartition(".")[2] for child in STUBS if child.rpartition(".")[0] == name]
    return ", ".join([*STUBS[name].names, *children]) or "nothing"


def _missing_attribute(name: str) -> Callable[[str], Any]:
    """A module ``__getattr__``: known submodules on demand, a clear error otherwise."""

    def __getattr__(attr: str) -> Any:
        child = f"{name}.{attr}"
        if child in STUBS:
            return importlib.import_module(child)
        if attr.startswith("_"):
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        top = name.partition(".")[0]
        raise AttributeError(
            f"module {name!r} has no attribute {attr!r}: {top} is not installed, and "
            f"torchport's reference stand-in for {name} provides only {_provided(name)}"
        )

    return __getattr__


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        stub = STUBS[name]
        top = name.partition(".")[0]
        setattr(module, MARK, True)
        module.__doc__ = (
            f"torchport reference stand-in for {name}, NOT the {top} library (which is not "
            "installed): pure-PyTorch versions of its API, with the library's documented "
            f"semantics, served only to the CPU reference run. Provides: "
            f"{', '.join(stub.names) or 'its submodules'}."
        )
        if name in VERSIONS:
            module.__dict__["__version__"] = VERSIONS[name]
        for attr in stub.names:
            setattr(module, attr, getattr(stub.source, attr))
        module.__dict__["__getattr__"] = _missing_attribute(name)  # PEP 562


class StandinFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        top = name.partition(".")[0]
        if top not in TOPS:
            return None
        if "." in name:
            parent = sys.modules.get(name.rpartition(".")[0])
            if parent is None or not getattr(parent, MARK, False):
                return None  # part of the real library: not ours to serve
            if name in STUBS:
                return self._stub(name)
            raise ModuleNotFoundError(
                f"No module named {name!r}: {top} is not installed and torchport's reference "
                f"stand-in for it has only the modules {_modules(top)}",
                name=name,
            )
        real = self._real_spec(name, path, target)
        return real if real is not None else self._stub(name)

    def _real_spec(self, name: str, path: Any, target: Any) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                return spec
        return None

    @staticmethod
    def _stub(name: str) -> importlib.machinery.ModuleSpec:
        return importlib.machinery.ModuleSpec(
            name,
            _StubLoader(),
            origin="torchport-reference-standin",
            is_package=STUBS[name].package,
        )


_FINDER = StandinFinder()


def install() -> StandinFinder:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return _FINDER


def uninstall() -> None:
    """Take the finder off ``sys.meta_path`` (modules already served stay imported)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
