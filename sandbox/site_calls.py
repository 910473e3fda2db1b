"""The arguments a program's kernel call sites are called with, recorded in its REFERENCE run.

The verifier's differential check (``agents.kernel_check``) calls a kernel's call site
(``kernels/fused_norm.py:fused_add_rms_norm``) in the original and in the port on the same
random inputs; for those to be the inputs the program really gives it, the original's run
records, for the first few distinct signatures of each site, every argument: a tensor's
shape, dtype, ``requires_grad`` and value statistics (mean, std, min, max: a residual stream
of std 0.02 and a weight of ones make a wrong ``eps`` show; N(0, 1) inputs would hide it),
or a plain value (``eps=1e-6``). Nothing of the program changes: each site's function (or
an autograd Function's ``apply``) is wrapped, right after its module is imported, by a
function that notes its arguments and calls it.

Sites are named ``path:attribute`` relative to the program's folder (the launcher's working
directory); a site defined in the entry script itself (``__main__``) is not imported, so it
is not recorded. Standard library only until a site is called.
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
import threading
from types import ModuleType
from typing import Any

from .importhook import PatchingLoader

MAX_SIGNATURES = 3  # distinct argument signatures kept per site
MAX_STATS_VALUES = 1 << 20  # statistics read from at most this many elements

_lock = threading.Lock()
_wanted: dict[str, list[tuple[str, str]]] = {}  # absolute file -> [(spec, attribute)]
_records: dict[str, dict[str, Any]] = {}
_seen: dict[str, set[Any]] = {}


def _key(value: Any) -> Any:
    """A hashable summary that tells two signatures apart (shape, dtype, requires_grad)."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("t", tuple(value.shape), str(value.dtype), bool(value.requires_grad))
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, bool | int | float | str) or value is None:
        return ("v", value)
    return ("o", type(value).__name__)


def describe(value: Any) -> dict[str, Any]:
    """One argument as the check rebuilds it: a tensor's spec and statistics, a plain
    value, a dtype, a list or tuple of those, or an opaque object (not rebuilt)."""
    import torch

    if isinstance(value, torch.Tensor):
        spec: dict[str, Any] = {
            "kind": "tensor",
            "shape": list(value.shape),
            "dtype": str(value.dtype).removeprefix("torch."),
            "requires_grad": bool(value.requires_grad),
        }
        spec.update(_stats(value))
        return spec
    if isinstance(value, torch.dtype):
        return {"kind": "dtype", "value": str(value).removeprefix("torch.")}
    if isinstance(value, tuple | list):
        return {"kind": type(value).__name__, "items": [describe(v) for v in value]}
    if isinstance(value, bool | int | float | str) or value is None:
        return {"kind": "value", "value": value}
    return {"kind": "opaque", "type": type(value).__name__}


def _stats(tensor: Any) -> dict[str, float]:
    import torch

    try:
        with torch.no_grad():
            flat = tensor.detach().reshape(-1)[:MAX_STATS_VALUES]
            if flat.numel() == 0 or flat.is_complex() or flat.device.type == "meta":
                return {}
            values = flat.to("cpu", torch.float64)
            return {
                "mean": float(values.mean()),
                "std": float(values.std()) if values.numel() > 1 else 0.0,
                "min": float(values.min()),
                "max": float(values.max()),
            }
    except Exception:  # a fake or traced tensor: no values to read
        return {}


def _note(spec: str, module: ModuleType, root: str, args: tuple, kwargs: dict) -> None:
    try:
        key = (_key(args), tuple(sorted((k, _key(v)) for k, v in kwargs.items())))
    except Exception:
        return
    with _lock:
        record = _records.setdefault(
            spec,
            {"site": spec, "module": module.__name__, "root": root, "calls": 0, "signatures": []},
        )
        record["calls"] += 1
        seen = _seen.setdefault(spec, set())
        if key in seen or len(record["signatures"]) >= MAX_SIGNATURES:
            return
        seen.add(key)
    described = {
        "args": [describe(a) for a in args],
        "kwargs": {k: describe(v) for k, v in kwargs.items()},
    }
    with _lock:
        record["signatures"].append(described)


def _root(module: ModuleType) -> str:
    """The folder, relative to the working directory, that ``module`` is imported from."""
    path = os.path.abspath(module.__file__ or "")
    depth = module.__name__.count(".") + (1 if path.endswith("__init__.py") else 0)
    folder = os.path.dirname(path)
    for _ in range(depth):
        folder = os.path.dirname(folder)
    return os.path.relpath(folder)


def _wrap(spec: str, module: ModuleType, attribute: str) -> None:
    owner: Any = module
    *parents, name = attribute.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return
    real = getattr(owner, name, None)
    if not callable(real) or getattr(real, "torchport_site", None):
        return
    root = _root(module)

    @functools.wraps(real)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        _note(spec, module, root, args, kwargs)
        return real(*args, **kwargs)

    recorded.__dict__["torchport_site"] = spec
    setattr(owner, name, staticmethod(recorded) if owner is not module else recorded)


def _patch(module: ModuleType) -> None:
    path = os.path.abspath(getattr(module, "__file__", None) or "")
    for spec, attribute in _wanted.get(path, ()):
        _wrap(spec, module, attribute)


class _SiteFinder(importlib.abc.MetaPathFinder):
    """The other finders' spec, with a loader that wraps the sites after the module ran."""

    def __init__(self) -> None:
        self._busy = threading.local()  # other finders that delegate (triton's) call us back

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is None:
                    continue
                origin = os.path.abspath(spec.origin) if spec.origin else ""
                if origin in _wanted and spec.loader is not None:
                    spec.loader = PatchingLoader(spec.loader, _patch)
                return spec
            return None
        finally:
            self._busy.on = False


_FINDER = _SiteFinder()


def install(sites: tuple[str, ...]) -> None:
    """Record the calls of ``sites`` (``path:attribute``, relative to the working
    directory) in this process; modules imported already are wrapped now."""
    for site in sites:
        path, _, attribute = site.partition(":")
        if attribute:
            _wanted.setdefault(os.path.abspath(path), []).append((site, attribute))
    for module in list(sys.modules.values()):
        if os.path.abspath(getattr(module, "__file__", None) or "") in _wanted:
            _patch(module)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def records() -> list[dict[str, Any]]:
    """Each site called so far: ``{"site", "module", "root", "calls", "signatures"}``."""
    with _lock:
        return [dict(r, signatures=list(r["signatures"])) for r in _records.values()]


def reset() -> None:
    """Forget the calls recorded so far (a forked child records its own)."""
    with _lock:
        _records.clear()
        _seen.clear()
