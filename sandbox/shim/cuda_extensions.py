"""CUDA extensions in the reference run: ``load_inline`` / ``load`` build them for the CPU.

An extension with CUDA sources (``load_inline(cuda_sources=...)``, ``load(sources=[...
.cu])``) is translated and compiled by torchport's CPU runner for CUDA kernels
(``sandbox.cudacpu``) and that module is returned, so the original program runs its own
kernels on the CPU and produces reference numbers. Extensions without CUDA sources go to
torch's own functions unchanged. The build goes under the run's scratch folder (a
sandboxed run writes nowhere else), never to the ``build_directory`` the program names,
which would be in the user's tree.

:func:`records` is what the run's report says (``cuda_kernel_runner``): per extension,
where it was loaded, its kernels, how many times each was launched, what was refused
(with file and line) and whether its own CPU kernels ran instead.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import Any

from torch.utils import cpp_extension

from .. import patching
from ..cudacpu import CompileFailed, Refused, compile_extension, file_sources, inline_sources
from ..cudacpu.build import cache_root
from .recording import caller_site, record

BUILD_ENV = "TORCHPORT_CUDACPU_BUILD"
_CUDA_SUFFIXES = (".cu", ".cuh")

_loaded: list[tuple[dict[str, Any], Any]] = []  # (record, Extension or None)
_run_folder: Path | None = None


def build_in(folder: Path) -> None:
    """Build under ``folder`` from now on: a sandboxed run's session names its scratch
    folder here (the only place the run may write)."""
    global _run_folder
    _run_folder = folder


def build_root() -> Path:
    """Where extensions are built: ``$TORCHPORT_CUDACPU_BUILD``, else the sandboxed run's
    scratch folder (``build_in``), else torchport's cache (``cudacpu.build.cache_root``)."""
    if os.environ.get(BUILD_ENV):
        return Path(os.environ[BUILD_ENV])
    return _run_folder if _run_folder is not None else cache_root()


def _arguments(real: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = inspect.signature(real).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _compile(api: str, a: dict[str, Any], units: list[Any], site: tuple[str, int]) -> Any:
    entry: dict[str, Any] = {
        "api": api,
        "name": a["name"],
        "site": f"{os.path.relpath(site[0])}:{site[1]}",
        "sources": sorted({seg.origin for _, src in units for seg in src.segments}),
    }
    try:
        extension = compile_extension(
            a["name"],
            units,
            build_root(),
            extra_cflags=a.get("extra_cflags"),
            extra_cuda_cflags=a.get("extra_cuda_cflags"),
            extra_ldflags=a.get("extra_ldflags"),
            extra_include_paths=a.get("extra_include_paths"),
            is_python_module=a.get("is_python_module", True),
        )
    except (Refused, CompileFailed) as exc:
        entry["error"] = str(exc)
        if isinstance(exc, Refused):
            entry["refused"] = [r.to_json() for r in exc.refusals]
        _loaded.append((entry, None))
        raise
    entry.update(extension.record)
    _loaded.append((entry, extension))
    return extension.module


def _load_inline(real: Any) -> Any:
    def load_inline(*args: Any, **kwargs: Any) -> Any:
        """torch.utils.cpp_extension.load_inline; CUDA sources go to torchport's CPU runner."""
        a = _arguments(real, args, kwargs)
        if not a.get("cuda_sources"):
            return real(*args, **kwargs)
        record("torch.utils.cpp_extension.load_inline(cuda_sources)")
        site = caller_site()
        units = inline_sources(
            a["name"],
            a["cpp_sources"],
            a["cuda_sources"],
            a.get("functions"),
            with_pytorch_error_handling=a.get("with_pytorch_error_handling", True),
            no_implicit_headers=a.get("no_implicit_headers", False),
            caller=site[0] if os.path.isfile(site[0]) else None,
        )
        return _compile("load_inline", a, units, site)

    functools.update_wrapper(load_inline, real, assigned=(), updated=())  # __wrapped__ only
    return load_inline


def _load(real: Any) -> Any:
    def load(*args: Any, **kwargs: Any) -> Any:
        """torch.utils.cpp_extension.load; CUDA sources go to torchport's CPU runner."""
        a = _arguments(real, args, kwargs)
        sources = [a["sources"]] if isinstance(a["sources"], str) else list(a["sources"])
        if not any(str(s).endswith(_CUDA_SUFFIXES) for s in sources):
            return real(*args, **kwargs)
        record("torch.utils.cpp_extension.load(.cu sources)")
        if a.get("is_standalone"):
            raise NotImplementedError(
                "torchport's CPU runner for CUDA kernels builds Python extensions, not "
                "standalone executables (load(is_standalone=True))"
            )
        return _compile("load", a, file_sources([str(s) for s in sources]), caller_site())

    functools.update_wrapper(load, real, assigned=(), updated=())  # __wrapped__ only
    return load


def install() -> None:
    """Patch ``torch.utils.cpp_extension.load_inline`` and ``load`` (undone with the
    shim's other patches)."""
    for attr, wrap in (("load_inline", _load_inline), ("load", _load)):
        real = getattr(cpp_extension, attr)
        if getattr(real, "__wrapped__", None) is None:
            patching.patch(cpp_extension, attr, wrap(real), by="shim.cuda_extensions")


def records() -> list[dict[str, Any]]:
    """Each CUDA extension the program loaded, with its kernels' launch counts so far."""
    out = []
    for entry, extension in _loaded:
        out.append({**entry, "launches": extension.launches() if extension else {}})
    return out


def reset() -> None:
    """Forget the extensions loaded so far (their modules stay loaded)."""
    _loaded.clear()
