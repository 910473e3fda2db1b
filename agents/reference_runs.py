"""The sandboxed runs a verification makes, and the reference run's cache.

``run_program`` runs one program as plain data under ``RunLimits``; ``reference_run``
runs the original on the CUDA reference shim, once for as long as nothing it depends on
(its files, the command, the limits, torchport's sandbox code, the kernel interpreters)
changed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, cast

from torchport.sandbox.harness import RunError, RunSpec, run, torchrun_parts
from torchport.sandbox.limits import (
    DEFAULT_DEVICES,
    DEFAULT_ISOLATION,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
)
from torchport.sandbox.modes import GENERIC, DeviceNames
from torchport.sandbox.safepath import digest_regular
from torchport.tools.atomicfile import atomic_write

from .defaults import VERIFY_STEPS
from .run_record import RunRecord
from .trace_records import TraceSpec
from .verdicts import FailureKind


@dataclass(frozen=True)
class RunLimits:
    """How each of a verification's two runs is bounded and what machine it sees (not
    ``sandbox.budget.Budget``, the step counter inside the running program)."""

    steps: int | None = VERIFY_STEPS  # None: no step budget (the differential check's runs)
    forwards: int | None = VERIFY_STEPS
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    isolation: str = DEFAULT_ISOLATION
    seed: int = 0
    devices: int = DEFAULT_DEVICES  # what device_count() answers in both runs
    lower_args: bool = True  # size and time arguments lowered (False: --keep-args)
    # the generic emulated device under the target's own names (its profile's), or None
    names: DeviceNames | None = None


def budget_of(settings: Mapping[str, Any]) -> RunLimits:
    """The run limits a migration's settings ask for (the graph's, or a chat session's)."""
    steps = int(settings.get("steps", RunLimits.steps))
    return RunLimits(
        steps=steps,
        forwards=steps,
        timeout_s=float(settings.get("timeout_s", RunLimits.timeout_s)),
        memory_mb=int(settings.get("memory_mb", RunLimits.memory_mb)),
        isolation=str(settings.get("isolation", RunLimits.isolation)),
        devices=int(settings.get("devices", RunLimits.devices)),
        lower_args=not settings.get("keep_args", False),
    )


def run_program(
    root: Path,
    argv: list[str],
    mode: str,
    limits: RunLimits,
    preload: tuple[str, ...] = (),
    progress: Callable[[dict[str, Any]], None] | None = None,
    site_paths: tuple[str, ...] = (),
    record_sites: tuple[str, ...] = (),
    matmul_precision: str | None = None,
    launch_step: bool = False,
    trace: TraceSpec | None = None,
) -> RunRecord:
    """One sandboxed run as plain data (a harness that cannot start is a failed run).
    ``matmul_precision``: pinned on the emulated device (``RunSpec``), or None;
    ``launch_step``: TorchTPU's launch step runs in torchrun's parent first; ``trace``:
    ``sandbox.module_trace``'s settings."""
    dist = torchrun_parts(argv)
    spec = RunSpec(
        launch_step=launch_step,
        preload=preload,
        # at least one device per local rank, as each rank sets its own
        devices=max(limits.devices, dist.nproc if dist is not None and dist.nproc else 1),
        root=root,
        command=argv,
        mode=mode,
        steps=limits.steps,
        forwards=limits.forwards,
        seed=limits.seed,
        timeout_s=limits.timeout_s,
        memory_mb=limits.memory_mb,
        isolation=limits.isolation,
        progress=progress,
        site_paths=tuple(Path(p) for p in site_paths),
        record_sites=record_sites,
        matmul_precision=matmul_precision,
        lower_args=limits.lower_args,
        trace=trace,
        names=limits.names if mode == GENERIC else None,
    )
    try:
        return cast(RunRecord, run(spec).to_json())  # the harness's record, as typed here
    except RunError as exc:
        return {
            "status": "failed",
            "exit_code": None,
            "error": {"type": FailureKind.RUN_ERROR, "message": str(exc), "frame": None},
        }


_NOT_COPIED = {".git", "__pycache__", ".venv", "venv", "torchport-report"}


def tree_digest(root: Path) -> str:
    """A digest of every file's path and bytes under ``root`` (what a run can see).

    A path is hashed as the bytes of its name (``os.fsencode``): a name that is not
    UTF-8 is as much a file as any other."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root)
        if _NOT_COPIED.intersection(rel.parts):
            continue  # the harness does not copy these into the run either
        digest.update(os.fsencode(rel) + b"\0")
        file_digest = hashlib.sha256()
        digest_regular(path, file_digest)  # streamed: a file of any size, not held whole
        digest.update(file_digest.digest())
    return digest.hexdigest()


@cache
def sandbox_digest() -> str:
    """What the reference run's numbers also depend on: torchport's own sandbox code (the
    shim, the step budget, the stand-ins). A cached run from another version is stale."""
    return tree_digest(Path(__file__).resolve().parents[1] / "sandbox")


@cache
def interpreter_versions() -> dict[str, str | None]:
    """The kernel interpreters the reference run has (Triton's, from the ``triton`` extra):
    with one installed, upgraded or removed, an original's kernels run (or fail) otherwise."""
    try:
        return {"triton": importlib.metadata.version("triton")}
    except importlib.metadata.PackageNotFoundError:
        return {"triton": None}


def reference_run(
    root: Path,
    argv: list[str],
    limits: RunLimits,
    cache: Path | None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    site_paths: tuple[str, ...] = (),
    record_sites: tuple[str, ...] = (),
) -> RunRecord:
    """The original's run on the reference shim, reused when nothing it depends on changed.

    The original is read only and runs with fixed seeds, so its numbers depend only on
    its files, the command and the budget: migrating one repository to several
    targets (or resuming, or re-running an evaluation) runs it once. A failed run is
    not cached (it may have been the machine's fault). ``record_sites``: the kernel call
    sites whose arguments the run records for the differential check (``kernel_check``).
    """
    # the reference runs CUDA code: a target's device names are not its business
    seen = asdict(replace(limits, names=None))
    parts = [tree_digest(root), argv, seen, *site_paths, sandbox_digest()]
    parts += [interpreter_versions(), list(record_sites)]
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]
    path = cache / f"{key}.json" if cache is not None else None
    if path is not None and path.is_file():
        try:
            return {**json.loads(path.read_text()), "cached": True}
        except (OSError, ValueError):
            pass
    result = run_program(
        root,
        argv,
        "reference",
        limits,
        progress=progress,
        site_paths=site_paths,
        record_sites=record_sites,
    )
    if path is not None and result.get("status") == "ok":
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(result, default=str))
    return result
