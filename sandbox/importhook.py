"""A module's own loader, then a patch of the fresh module: how the sandbox adapts a library
the program imports (torchvision's datasets, triton's interpreter) without importing it
before the program does. Standard library only."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class PatchingLoader(importlib.abc.Loader):
    """The real loader, then the patch (a failed patch leaves the real module as is, and
    says so on stderr: never break the program's import over a patch). What it does not
    define itself (get_code, is_package, resources) is the real loader's."""

    def __init__(self, real: Any, patch: Callable[[ModuleType], None]) -> None:
        self._real, self._patch = real, patch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def create_module(self, spec: Any) -> Any:
        return self._real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._real.exec_module(module)
        try:
            self._patch(module)
        except Exception as exc:
            print(f"torchport: could not patch {module.__name__}: {exc!r}", file=sys.stderr)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ``name`` as the finders after it would, and patches the module once loaded:
    a library adapted only when the program imports it (importing it for every run costs)."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self._name, self._patch = name, patch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self._name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = PatchingLoader(spec.loader, self._patch)
                return spec
        return None  # not installed: the program meets its ImportError
