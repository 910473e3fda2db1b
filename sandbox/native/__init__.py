"""The emulator's C++ backend: which emulator a process gets, and why.

``choose()`` is the one place that reads ``TORCHPORT_EMULATOR`` (``auto``, ``native``
or ``python``). ``auto`` takes the native backend when its library is at hand (given to
the run in ``TORCHPORT_EMULATOR_LIB``, or already in the build cache) or can be built
here, and the Python emulator otherwise; the reason is kept with the choice, and the
counters of the run report both. A sandboxed run never compiles (``build=False``): its
trusted parent builds first (:func:`prepare_for_sandbox`) and hands it the library.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..modes import EMULATED

ENV = "TORCHPORT_EMULATOR"
LIB_ENV = "TORCHPORT_EMULATOR_LIB"
WHY_ENV = "TORCHPORT_EMULATOR_WHY"  # the parent's reason when it could not prepare one
CHOICES = ("auto", "native", "python")


@dataclass(frozen=True)
class Choice:
    """The emulator a process runs (``native`` or ``python``) and why."""

    backend: str
    reason: str
    library: Path | None = None


def requested(backend: str | None = None) -> str:
    """``backend`` if given, else ``$TORCHPORT_EMULATOR``, else ``auto`` (checked)."""
    value = (backend or os.environ.get(ENV) or "auto").strip().lower()
    if value not in CHOICES:
        raise ValueError(f"unknown emulator backend {value!r}; expected one of {CHOICES}")
    return value


def _found() -> tuple[Path, str] | None:
    from . import build

    given = os.environ.get(LIB_ENV)
    if given and Path(given).is_file():
        return Path(given), f"the library prepared for this run ({given})"
    cached = build.library_path()
    if cached.is_file():
        return cached, f"the cached build ({cached})"
    return None


def choose(backend: str | None = None, *, build: bool = True) -> Choice:
    """Decide the emulator; ``native`` asked for and impossible raises RuntimeError."""
    from . import build as builder

    wanted = requested(backend)
    if wanted == "python":
        return Choice("python", f"{ENV}=python (or backend='python') asked for it")
    found = _found()
    if found is not None:
        return Choice("native", found[1], found[0])
    if not build:
        why = os.environ.get(WHY_ENV) or (
            f"no native library was given to this run ({LIB_ENV} unset or missing)"
        )
    elif (missing := builder.missing_tools()) is not None:
        why = missing
    elif wanted == "auto" and (failed := builder.previous_failure()) is not None:
        why = f"{failed} (cached; TORCHPORT_EMULATOR=native retries)"
    else:
        started = time.monotonic()
        try:
            path = builder.build()
        except builder.BuildError as exc:
            why = str(exc)
        else:
            return Choice("native", f"built now in {time.monotonic() - started:.0f} s", path)
    if wanted == "native":
        raise RuntimeError(f"the native emulator is not available: {why}")
    return Choice("python", f"native backend unavailable: {why}")


def describe(backend: str | None = None) -> tuple[str, str]:
    """(backend, why) that a run would get now, without compiling (``torchport doctor``)."""
    from . import build as builder

    wanted = requested(backend)
    if wanted == "python":
        return "python", f"{ENV}=python asked for it"
    found = _found()
    if found is not None:
        return "native", found[1]
    missing = builder.missing_tools()
    failed = builder.previous_failure()
    if missing or (failed and wanted == "auto"):
        return "python", f"native backend unavailable: {missing or failed}"
    return "native", f"built on first use (about a minute of CPU), cached in {builder.cache_root()}"


def prepare_for_sandbox(mode: str, backend: str | None = None) -> tuple[list[Path], dict[str, str]]:
    """In the trusted parent, before a sandboxed run in ``mode``: build (or find) the library.

    Returns the folders the sandbox must show read-only and the variables to pass, so
    that the run loads the same library without compiling; without a library, the
    variables carry the reason, which the run's counters then report. Nothing for a
    mode that is not an emulated device.
    """
    if mode not in EMULATED:
        return [], {}
    choice = choose(backend, build=True)
    env = {ENV: requested(backend)}
    if choice.library is None:
        env[WHY_ENV] = choice.reason
        return [], env
    env[LIB_ENV] = str(choice.library)
    return [choice.library.parent], env
