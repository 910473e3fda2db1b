"""Run a program in a scratch copy, isolated, with a step budget, and return what it did.

The parent side of a run: copy the program, start ``torchport.sandbox.launch``
inside the strongest isolation available (see ``sandbox.isolation``) with an
allowlisted environment, enforce the wall-clock and memory limits, and read back
the JSON result the launcher wrote. A run that was killed (timeout, memory) has
no result file; that is reported as what it is.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .launch import MODES

TAIL = 4000
IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".venv", "venv", "torchport-report")


class RunError(ValueError):
    """The run could not be started (bad command, bad mode)."""


@dataclass(frozen=True)
class RunSpec:
    root: Path
    command: list[str]  # ["python", "train.py", ...] or ["python", "-m", "pkg", ...]
    mode: str = "plain"
    steps: int | None = 20
    forwards: int | None = 20
    seed: int = 0
    devices: int = 1
    timeout_s: float = 300.0
    memory_mb: int = 4096
    isolation: str = "auto"


@dataclass
class RunResult:
    status: str  # ok | failed | timeout | killed
    exit_code: int | None
    losses: list[float] = field(default_factory=list)
    steps: int = 0
    forwards: int = 0
    outputs: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    stopped: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    elapsed_s: float = 0.0
    isolation: str = ""
    mode: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def program_argv(command: list[str]) -> list[str]:
    """``python train.py --x 1`` -> ``train.py --x 1``; ``python -m pkg`` -> ``-m pkg``."""
    if not command:
        raise RunError("empty command")
    head = Path(command[0]).name
    if head.startswith("python"):
        rest = command[1:]
    elif command[0].endswith(".py"):
        rest = command
    else:
        raise RunError(f"only python programs can be run for now, not {command[0]!r}")
    if not rest:
        raise RunError("no script or module to run")
    return rest


def launcher_argv(spec: RunSpec, result_file: Path, program_dir: Path) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "torchport.sandbox.launch",
        "--mode",
        spec.mode,
        "--seed",
        str(spec.seed),
        "--devices",
        str(spec.devices),
        "--result",
        str(result_file),
        "--chdir",
        str(program_dir),
    ]
    if spec.steps is not None:
        argv += ["--steps", str(spec.steps)]
    if spec.forwards is not None:
        argv += ["--forwards", str(spec.forwards)]
    return [*argv, "--", *program_argv(spec.command)]


# torchport's own code must be readable inside the sandbox for the launcher to import.
OWN_SOURCE = Path(__file__).resolve().parents[1]


def _execute(
    argv: list[str], scratch: Path, spec: RunSpec
) -> tuple[int | None, str, str, str, str]:
    """(returncode, stdout, stderr, isolation used, killed reason or "")."""
    try:
        from .isolation import run_isolated
    except ImportError:
        run_isolated = None
    if run_isolated is not None:
        outcome = run_isolated(
            argv,
            scratch=scratch,
            readonly=[OWN_SOURCE],
            timeout_s=spec.timeout_s,
            memory_mb=spec.memory_mb,
            backend=spec.isolation,
        )
        reason = "timeout" if outcome.timed_out else (outcome.killed or "")
        return outcome.returncode, outcome.stdout, outcome.stderr, outcome.backend, reason
    try:
        proc = subprocess.run(
            argv, cwd=scratch, capture_output=True, text=True, timeout=spec.timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        return None, str(exc.stdout or ""), str(exc.stderr or ""), "none", "timeout"
    return proc.returncode, proc.stdout, proc.stderr, "none", ""


def run(spec: RunSpec) -> RunResult:
    if spec.mode not in MODES:
        raise RunError(f"unknown mode {spec.mode!r}; choose one of {', '.join(MODES)}")
    if not spec.root.is_dir():
        raise RunError(f"not a directory: {spec.root}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchport-run-") as tmp:
        scratch = Path(tmp) / "program"
        shutil.copytree(spec.root, scratch, symlinks=True, ignore=IGNORE)
        result_file = Path(tmp) / "result.json"
        argv = launcher_argv(spec, result_file, scratch)
        code, out, err, isolation, killed = _execute(argv, Path(tmp), spec)
        data = json.loads(result_file.read_text()) if result_file.is_file() else None
    result = RunResult(status="failed", exit_code=code, isolation=isolation, mode=spec.mode)
    if data is not None:
        for key in (
            "status",
            "exit_code",
            "losses",
            "steps",
            "forwards",
            "outputs",
            "counters",
            "error",
            "stopped",
        ):
            if key in data:
                setattr(result, key, data[key])
    elif killed:
        result.status = "timeout" if killed == "timeout" else "killed"
        result.error = {"type": killed, "message": f"the run was stopped: {killed}", "frame": None}
    else:
        result.error = {
            "type": "NoResult",
            "message": f"the program ended without a result (exit code {code})",
            "frame": None,
        }
    result.stdout_tail, result.stderr_tail = out[-TAIL:], err[-TAIL:]
    result.elapsed_s = round(time.perf_counter() - started, 3)
    return result


def describe(spec: RunSpec) -> str:
    return " ".join(shlex.quote(a) for a in spec.command)
