"""A port that stops at a CUDA-only import it kept: the verdict says the port cannot import.

A migration leaves ``from apex import amp``, ``import cupy``, ``import pycuda.autoinit`` for a
human when it cannot rewrite every use (TPP001). The port then fails at that line before it
runs anything, and so does the CPU reference, where the CUDA-only library cannot be installed
either. Judged as any two failures, the verdict read "the original fails here too:
ModuleNotFoundError", which blames the user's repository for what the port kept and hides
that the port is unimportable on the target. This names the import, says why the target
cannot have it, and what to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from fnmatch import fnmatchcase
from functools import cache
from typing import Any

from torchport.tools.catalogue import load_catalogue

from .results import Verification
from .verdicts import Reason, Verdict

CUDA_ONLY_IMPORT = "TPP001"  # the rule whose imports the target cannot install
NO_MODULE = re.compile(r"No module named '([^']+)'")


@cache
def _patterns() -> tuple[str, ...]:
    rule = load_catalogue().by_code[CUDA_ONLY_IMPORT]
    return tuple(rule.match.get("import", ()))


def cuda_only_module(module: str) -> str | None:
    """The CUDA-only library ``module`` belongs to (``apex`` for ``apex.amp``), or None."""
    parts = module.split(".")
    for end in range(1, len(parts) + 1):  # the library: its top-most matched name
        name = ".".join(parts[:end])
        if any(fnmatchcase(name, p) for p in _patterns()):
            return name
    return None


def _missing(result: Mapping[str, Any] | None) -> tuple[str, Mapping[str, Any]] | None:
    """The CUDA-only library a failed run could not import, with the run's error."""
    if not result or result.get("status") == "ok":
        return None
    error = result.get("error") or {}
    found = NO_MODULE.search(str(error.get("message", "")))
    if error.get("type") != "ModuleNotFoundError" or not found:
        return None
    library = cuda_only_module(found.group(1))
    return (library, error) if library else None


def unimportable_port(v: Verification, target: str) -> Verification:
    """``v`` with a reason that names the CUDA-only import the port kept, where the port
    stopped there: ``not-runnable`` when the original stopped at it too (nothing to compare,
    and the original needs its CUDA machine for it), ``failed`` when the original ran."""
    missing = _missing(v.target)
    if missing is None:
        return v
    library, error = missing
    frame = error.get("frame") or {}
    where = f"{frame['file']}:{frame['line']}" if frame.get("file") and frame.get("line") else ""
    code = str(frame.get("code") or f"import {library}").strip()
    original_too = _missing(v.reference) is not None
    reason = (
        f"the port cannot import: it keeps `{code}`"
        + (f" ({where})" if where else "")
        + f", and {library} is a CUDA-only library that {target} cannot install "
        f"(TPP001, left for a human in manual.md)"
        + ("; the original stops there too on this CUDA-less machine" if original_too else "")
    )
    return replace(
        v,
        verdict=Verdict.NOT_RUNNABLE if original_too else Verdict.FAILED,
        code=Reason.PORT_CANNOT_IMPORT,
        reason=reason,
        next_step=(
            "guard the import (try: ... except ImportError: ... = None) where every use is "
            "guarded or rewritten, or remove it with its remaining uses"
        ),
    )
