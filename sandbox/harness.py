"""Run a program in a scratch copy, isolated, with a step budget, and return what it did.

The parent side of a run: copy the program, start ``torchport.sandbox.launch``
inside the strongest isolation available (see ``sandbox.isolation``) with an
allowlisted environment, enforce the wall-clock and memory limits, and collect what
the run's processes sent on the results channel (``sandbox.channel``) as they ran.
A run that was killed (timeout, memory) sent no end report; that is reported as what
it is.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import matmul_precision, rendezvous, tpu_launch
from .channel import Collector, ProcessRecord
from .commandline import Rewrite, refused, rewrite
from .cudacpu import pch as cudacpu_pch
from .isolation import BackendUnavailable, owner, run_isolated
from .limits import (
    DEFAULT_DEVICES,
    DEFAULT_ISOLATION,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    RUN_STEPS,
    check_limits,
)
from .modes import GENERIC, MODES, DeviceNames, names_problem
from .native import prepare_for_sandbox
from .program_options import entry_file, program_options
from .pythonpath import program_environment, readonly_paths

TAIL = 4000
IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".venv", "venv", "torchport-report")

# Where a run's time goes: each phase lies between two marks on the wall clock. The harness
# sets "begun", "spawned" and "returned"; the launcher, inside the sandbox, the others (its
# result's "clock"). A phase with a mark missing (a run killed before its result) is left out.
PHASES = (
    ("prepare", "begun", "spawned"),  # the program copied, its command fitted
    ("sandbox", "spawned", "process"),  # the watchdog and the isolation backend started
    ("interpreter", "process", "entered"),  # Python started, the launcher imported
    ("activation", "entered", "activated"),  # torch, the device or shim, seeds, data, budget
    ("program", "activated", "finished"),  # the user's program, to the end or the budget
    ("teardown", "finished", "returned"),  # the result written, Python's exit, the sandbox gone
)


def phases(marks: dict[str, Any]) -> dict[str, float]:
    """Each phase's seconds from the marks (rounded to ms; never negative: the kernel's
    record of a process's start is in 10 ms steps)."""
    timed = {}
    for name, start, end in PHASES:
        if isinstance(marks.get(start), float) and isinstance(marks.get(end), float):
            timed[name] = round(max(0.0, marks[end] - marks[start]), 3)
    return timed


# A run that failed before the program started: torchport's own failure, never the program's.
SANDBOX_ERROR = "SandboxError"


class RunError(ValueError):
    """The run could not be started (bad command, bad mode)."""


@dataclass(frozen=True)
class RunSpec:
    root: Path
    command: list[str]  # ["python", "train.py", ...] or ["python", "-m", "pkg", ...]
    mode: str = "plain"
    steps: int | None = RUN_STEPS
    forwards: int | None = RUN_STEPS
    seed: int = 0
    devices: int = DEFAULT_DEVICES  # what device_count() answers, on both sides
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    isolation: str = DEFAULT_ISOLATION
    # Modules the launcher imports after activating the mode, before the program: a
    # runtime patch under evaluation (e.g. a CUDA-to-device "transfer" baseline).
    preload: tuple[str, ...] = ()
    # Called from a watcher thread with each optimizer step ({"step", "loss"}) while the
    # program runs, so a long verification can show where it is.
    progress: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False)
    # Called from reader threads with ("stdout" | "stderr", bytes) as the program writes
    # them (``torchport run`` streams them to the terminal); the result keeps its tail anyway.
    output: Callable[[str, bytes], None] | None = field(default=None, compare=False)
    # Folders of installed dependencies (see tools.depinstall): read only in the sandbox,
    # importable after torchport's own site-packages in every process of the run.
    site_paths: tuple[Path, ...] = ()
    # Reference mode: kernel call sites (``path:function``) whose calls' arguments the run
    # records (``sandbox.site_calls``), for the verifier's differential check.
    record_sites: tuple[str, ...] = ()
    # tpu, torchrun: TorchTPU's launch step runs in torchrun's parent first, as a port's
    # ``eval "$(python -m torch.tpu.distributed ...)" && torchrun ...`` line does
    # (``sandbox.launch_step``); without it the ranks fail at their first device use.
    launch_step: bool = False
    # The emulated device's float32 matmul precision pinned for the whole run (every
    # process), whatever the program sets: None is TorchTPU's own behaviour (bf16 passes
    # unless the program asks for more), "highest" exact float32 (the verifier's tight
    # check); see sandbox.matmul_precision. Emulated modes only.
    matmul_precision: str | None = None
    # Size and time arguments lowered for a short run (sandbox.commandline); False runs the
    # command as given (--keep-args).
    lower_args: bool = True
    # sandbox.module_trace's settings ({"step": k, "send_weights": bool, "weights": file}),
    # for the verifier's search for where a port first diverges; None: no trace
    trace: Mapping[str, object] | None = None  # agents.trace_records.TraceSpec
    # The generic emulated mode's device under a target's own names (its profile's device
    # string and backends); None: the mode's own. sandbox.modes.DeviceNames.
    names: DeviceNames | None = None

    def __post_init__(self) -> None:
        """Limits that do not bound (zero steps, a NaN timeout, ...) are refused before the
        program is copied; ``steps``/``forwards`` may be None (that budget not used); an
        unknown ``matmul_precision`` is refused naming the choices."""
        matmul_precision.check(self.matmul_precision, RunError)
        counts = {"steps": self.steps, "forwards": self.forwards}
        check_limits(
            RunError,
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            devices=self.devices,
            seed=self.seed,
            **{name: value for name, value in counts.items() if value is not None},
        )
        if self.launch_step:
            _check_launch_step(self)
        if self.names is not None:
            if self.mode != GENERIC:
                raise RunError(
                    f"a device of a target's own runs in mode {GENERIC}, not {self.mode!r}"
                )
            if problem := names_problem(self.names):
                raise RunError(f"the emulated device cannot be named so: {problem}")


def _check_launch_step(spec: RunSpec) -> None:
    """The launch step is TorchTPU's, before torchrun, on a host whose chips it can lay out."""
    if spec.mode != "tpu":
        raise RunError(f"the launch step is TorchTPU's: it runs in mode tpu, not {spec.mode!r}")
    if torchrun_parts(spec.command) is None:
        raise RunError("the launch step runs in torchrun's parent: the command is not torchrun")
    try:
        tpu_launch.topology(spec.devices)
    except tpu_launch.LaunchError as exc:
        raise RunError(f"TorchTPU's launch step fails on a host of {spec.devices}: {exc}") from None


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
    synthetic_data: list[dict[str, Any]] = field(default_factory=list)
    # modules torchport's synthetic finder served for an absent library (torchvision, ...)
    standin_modules: list[str] = field(default_factory=list)
    # addresses the program reached for (sandbox.network_log): the sandbox has no network
    network: list[str] = field(default_factory=list)
    reference_standins: list[str] = field(default_factory=list)  # reference mode: APIs stood in
    # reference mode: kernels that ran in an interpreter (Triton's), per interpreter
    reference_interpreters: list[dict[str, Any]] = field(default_factory=list)
    # reference mode: CUDA extensions run by torchport's CPU runner (sandbox.cudacpu)
    cuda_kernel_runner: list[dict[str, Any]] = field(default_factory=list)
    # several processes trained (torchrun, mp.spawn, children): each one's outcome and losses
    ranks: list[dict[str, Any]] = field(default_factory=list)
    # arguments of the command changed for the run (sandbox.commandline): both runs get these
    command_rewrites: list[dict[str, str]] = field(default_factory=list)
    # lowerings not made: outside the option's choices, or refused by the program (the run
    # was repeated without it); each with the value it would have had and why not
    command_kept: list[dict[str, str]] = field(default_factory=list)
    # seconds spent in each of PHASES (the start-up, the program, the teardown)
    phases: dict[str, float] = field(default_factory=dict)
    # reference mode: the arguments the kernel call sites asked for were called with
    kernel_site_calls: list[dict[str, Any]] = field(default_factory=list)
    # a kernel site check's run (sandbox.site_check): each case's outputs and gradients
    site_check: dict[str, Any] = field(default_factory=dict)
    # a traced run (sandbox.module_trace): every module's output at one step
    module_trace: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


TORCHRUN_MODULES = ("torch.distributed.run",)
# torchrun options that already say where the ranks meet.
_RENDEZVOUS = ("--standalone", "--rdzv", "--master")
# ``--standalone`` spelled out with 127.0.0.1: no name lookup at all (the process backend uses
# the host's resolver, which may not map localhost).
STANDALONE = [
    "--rdzv-backend=c10d",
    "--rdzv-endpoint=127.0.0.1:0",
    "--rdzv-id=torchport",
    "--nnodes=1",
    "--local-addr=127.0.0.1",
]


@dataclass(frozen=True)
class Distributed:
    """A torchrun command taken apart: its own options, the program, ranks expected."""

    options: list[str]
    program: list[str]  # as program_argv gives it: ["train.py", ...] or ["-m", "pkg", ...]
    nproc: int | None


def torchrun_parts(command: list[str]) -> Distributed | None:
    """``torchrun [opts] train.py ...`` or ``python -m torch.distributed.run [opts] ...``
    taken apart (None for any other command)."""
    if not command:
        return None
    head = Path(command[0]).name
    if head == "torchrun":
        rest = command[1:]
    elif head.startswith("python") and command[1:2] == ["-m"] and command[2:3] != []:
        if command[2] not in TORCHRUN_MODULES:
            return None
        rest = command[3:]
    else:
        return None
    from torch.distributed.run import get_args_parser

    try:
        parsed = get_args_parser().parse_args(rest)
    except SystemExit as exc:
        raise RunError(f"torchrun could not parse {rest!r}") from exc
    if parsed.no_python:
        raise RunError("torchrun --no-python runs a non-Python program; not supported")
    if not parsed.standalone:
        _check_torchrun_rendezvous(parsed.master_addr, parsed.rdzv_endpoint)
    options = rest[: len(rest) - len(parsed.training_script_args) - 1]
    options = [o for o in options if o not in ("-m", "--module", "--run-path", "--run_path")]
    if not any(o.split("=", 1)[0].replace("_", "-").startswith(_RENDEZVOUS) for o in options):
        options = [*STANDALONE, *options]
    script = parsed.training_script
    program = ["-m", script] if parsed.module else [script]
    nproc = int(parsed.nproc_per_node) if str(parsed.nproc_per_node).isdigit() else None
    return Distributed(options, [*program, *parsed.training_script_args], nproc)


def _check_torchrun_rendezvous(master_addr: str, rdzv_endpoint: str) -> None:
    """torchrun waits out its rendezvous timeout on an address the sandbox cannot reach:
    refuse it before torchrun starts, as the launcher does for init_process_group."""
    for option, address in (("--master-addr", master_addr), ("--rdzv-endpoint", rdzv_endpoint)):
        host = urlsplit(f"//{address}").hostname if address else None
        why = rendezvous.refusal(host, resolve=False) if host else None
        if why is not None:
            raise RunError(rendezvous.unreachable_message(address, f"torchrun {option}", why))


def program_argv(command: list[str]) -> list[str]:
    """``python train.py --x 1`` -> ``train.py --x 1``; ``python -m pkg`` -> ``-m pkg``.

    ``python explore.ipynb`` runs a notebook's code cells in order (see ``launch``).
    """
    if not command:
        raise RunError("empty command")
    head = Path(command[0]).name
    if head.startswith("python"):
        rest = command[1:]
    elif command[0].endswith((".py", ".ipynb")):
        rest = command
    else:
        raise RunError(f"only python programs can be run for now, not {command[0]!r}")
    if not rest:
        raise RunError("no script or module to run")
    return rest


def split_program_args(command: list[str]) -> tuple[list[str], list[str]]:
    """(everything up to and including the script or module, the program's own arguments)."""
    dist = torchrun_parts(command)
    program = dist.program if dist is not None else program_argv(command)
    own = len(program) - (2 if program[0] == "-m" else 1)
    cut = len(command) - own
    return command[:cut], command[cut:]


# -P -s, and the program's folders out of PYTHONPATH: the launcher imports torchport before
# they are on its path, so a repository's own torchport/ package cannot stand in for it
# (sandbox.launch says why not -I).
SAFE_PATH = ("-P", "-s")
LAUNCHER = [sys.executable, *SAFE_PATH, "-m", "torchport.sandbox.launch"]
LAUNCH_STEP = [sys.executable, *SAFE_PATH, "-m", "torchport.sandbox.launch_step"]


def launcher_argv(spec: RunSpec, results: Path, program_dir: Path) -> list[str]:
    """The launcher's command line; under torchrun, torchrun's, running the launcher
    (with ``--per-rank``) once per rank, with the same flags (``--no-python``)."""
    dist = torchrun_parts(spec.command)
    head = list(LAUNCHER)
    if dist is not None:
        head = [sys.executable, *SAFE_PATH, "-m", TORCHRUN_MODULES[0], *dist.options]
        head += ["--no-python"]
        head += [*LAUNCHER, "--per-rank"]
        if spec.launch_step:
            head = [*LAUNCH_STEP, "--devices", str(spec.devices), "--", *head]
    argv = [
        *head,
        "--mode",
        spec.mode,
        "--seed",
        str(spec.seed),
        "--devices",
        str(spec.devices),
        "--results",
        str(results),
        "--chdir",
        str(program_dir),
    ]
    if spec.steps is not None:
        argv += ["--steps", str(spec.steps)]
    if spec.forwards is not None:
        argv += ["--forwards", str(spec.forwards)]
    for module in spec.preload:
        argv += ["--preload", module]
    for site in spec.record_sites:
        argv += ["--record-site", site]
    if spec.matmul_precision is not None:
        argv += ["--matmul-precision", spec.matmul_precision]
    if spec.trace is not None:
        argv += ["--trace", json.dumps(spec.trace)]
    if spec.names is not None:
        argv += ["--names", json.dumps(spec.names.to_json())]
    program = dist.program if dist is not None else program_argv(spec.command)
    return [*argv, "--", *program]


# torchport's own code must be readable inside the sandbox for the launcher to import.
OWN_SOURCE = Path(__file__).resolve().parents[1]


def _execute(
    argv: list[str], scratch: Path, spec: RunSpec
) -> tuple[int | None, str, str, str, str]:
    """(returncode, stdout, stderr, isolation used, killed reason or "")."""
    # The native emulator is built (once, cached) here, by torchport, never in the run;
    # the run sees the library read-only and is told where it is (or why there is none).
    emulator_paths, emulator_env = prepare_for_sandbox(spec.mode)
    # A reference run that builds CUDA extensions reads the CPU runner's precompiled
    # prelude, built here (once, cached) rather than in the run.
    kernel_paths, kernel_env = cudacpu_pch.for_sandbox(spec.mode, scratch / "program")
    try:
        outcome = run_isolated(
            argv,
            scratch=scratch,
            readonly=[OWN_SOURCE, *readonly_paths(spec.site_paths), *emulator_paths, *kernel_paths],
            env={
                **program_environment(scratch / "program", spec.site_paths),
                **emulator_env,
                **kernel_env,
            },
            timeout_s=spec.timeout_s,
            memory_mb=spec.memory_mb,
            backend=spec.isolation,
            owned=scratch,  # the watchdog deletes this copy if torchport dies mid-run
            echo=spec.output,
        )
    except (BackendUnavailable, ValueError) as exc:
        raise RunError(str(exc)) from exc
    reason = "timeout" if outcome.timed_out else (outcome.killed or "")
    return outcome.returncode, outcome.stdout, outcome.stderr, outcome.backend, reason


def run(spec: RunSpec) -> RunResult:
    """Run ``spec``; a program whose parser refused a lowered argument (argparse's exit 2
    naming it) is run again with that argument as given, and the result says so."""
    if spec.mode not in MODES:
        raise RunError(f"unknown mode {spec.mode!r}; choose one of {', '.join(MODES)}")
    if not spec.root.is_dir():
        raise RunError(f"not a directory: {spec.root}")
    withdrawn: dict[str, str] = {}
    while True:
        result, lowered = _run_once(spec, withdrawn)
        more = refused(result.exit_code, result.stderr_tail, lowered)
        if not more or more.keys() <= withdrawn.keys():
            return result
        withdrawn.update(more)


def _run_once(spec: RunSpec, withdrawn: dict[str, str]) -> tuple[RunResult, list[Rewrite]]:
    """One run of ``spec``, with the lowerings in ``withdrawn`` not made; the result and
    the lowerings that were made."""
    started = time.perf_counter()
    marks: dict[str, Any] = {"begun": time.time()}
    # Named with this process's pid and start time: if torchport is killed before the
    # watchdog can delete it, the next torchport's sweep knows it is stale.
    with owner.temp_dir() as tmp:
        scratch = Path(tmp) / "program"
        shutil.copytree(spec.root, scratch, symlinks=True, ignore=IGNORE)
        head, args = split_program_args(spec.command)
        program = head[-2:] if head[-2:-1] == ["-m"] else head[-1:]
        entry = entry_file(scratch, program)
        options = program_options(scratch, entry)
        fitted = rewrite(
            args, scratch, spec.devices, options, spec.lower_args, withdrawn, script=entry
        )
        spec = replace(spec, command=[*head, *fitted.args])
        argv = launcher_argv(spec, Path(tmp), scratch)
        dist = torchrun_parts(spec.command)
        # listening before the sandbox starts: the launcher's is the first connection
        collector = Collector(Path(tmp), spec.progress)
        try:
            marks["spawned"] = time.time()
            code, out, err, isolation, killed = _execute(argv, Path(tmp), spec)
        finally:
            records = collector.close()  # every process of the run is gone by now
        data = collect_results(records, dist is None, dist.nproc if dist is not None else None)
    marks["returned"] = time.time()  # the results read, the program's copy removed
    result = RunResult(status="failed", exit_code=code, isolation=isolation, mode=spec.mode)
    if killed and _unfinished(data):
        data = None  # stopped from outside before it could report its end: the stop says why
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
            "synthetic_data",
            "standin_modules",
            "network",
            "reference_standins",
            "reference_interpreters",
            "cuda_kernel_runner",
            "ranks",
            "kernel_site_calls",
            "site_check",
            "module_trace",
        ):
            if key in data:
                setattr(result, key, data[key])
    elif killed:
        result.status = "timeout" if killed == "timeout" else "killed"
        result.error = {"type": killed, "message": f"the run was stopped: {killed}", "frame": None}
    else:
        # The launcher connects before the program's first line: with nothing on the channel,
        # the program never ran, and what failed is torchport's sandbox, not the program.
        last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "no output")
        result.error = {
            "type": SANDBOX_ERROR,
            "message": (
                f"torchport's launcher never reported, so the program did not run (exit code "
                f"{code}): torchport's sandbox failed, not the program: {last[:300]}"
            ),
            "frame": None,
        }
    result.synthetic_data = [*fitted.standins, *result.synthetic_data]
    result.command_rewrites = fitted.rewrites_json()
    result.command_kept = fitted.kept_json()
    result.stdout_tail, result.stderr_tail = out[-TAIL:], err[-TAIL:]
    result.phases = phases({**((data or {}).get("clock") or {}), **marks})
    result.elapsed_s = round(time.perf_counter() - started, 3)
    return result, fitted.lowered


def _unfinished(data: dict[str, Any] | None) -> bool:
    return data is None or (data.get("error") or {}).get("type") == "NoResult"


def collect_results(
    records: list[ProcessRecord], launcher: bool, expected_ranks: int | None
) -> dict[str, Any] | None:
    """The run's result from what its processes sent: the launcher's (the first
    connection, when ``launcher``), torchrun's ranks (``expected_ranks`` of them), and each
    child process that did any work. A second process claiming to be the launcher is a
    process of the program's: the run fails, naming it."""
    if not records:
        return None
    main = records[0].result() if launcher and records[0].role == "launcher" else None
    others = records[1:] if main is not None else records
    impostors = [r for r in others if r.role == "launcher"]
    for record in impostors:
        record.problems.append("claimed to be torchport's launcher, which had already reported")
    ranks = [r.result() for r in others if r.role == "rank" or r in impostors]
    # a connection that sent something malformed before saying who it was fails the run
    children = [r.result() for r in others if r.role == "child" or (not r.role and r.problems)]
    if main is None and not ranks and not children:
        return None
    if not ranks and not children:
        return main
    return merge_processes(main, [*ranks, *children], expected_ranks if ranks else None)


def _did_work(data: dict[str, Any]) -> bool:
    return bool(data.get("steps") or data.get("forwards") or data.get("losses"))


def _rank_order(data: dict[str, Any]) -> tuple[bool, int, float]:
    rank = data.get("rank")
    return (rank is None, rank if isinstance(rank, int) else 0, data.get("ended_at", 0.0))


def merge_processes(
    main: dict[str, Any] | None, parts: list[dict[str, Any]], expected: int | None
) -> dict[str, Any]:
    """One result from several processes' (torchrun ranks, spawned ranks, children).

    The numbers are the launcher's process's when it trained itself, else the lowest
    rank's; every process's losses stay in ``ranks``. The run failed if any process
    failed (with the error of the one that failed first: the others mostly lost their
    peer, or were killed without a result) or if an expected rank wrote nothing."""
    parts = sorted(parts, key=_rank_order)
    primary = main if main is not None and _did_work(main) else parts[0]
    merged = dict(primary)
    if main is not None and primary is not main:
        for key in ("status", "exit_code", "error", "program", "elapsed_s", "clock"):
            if key in main:
                merged[key] = main[key]
            else:
                merged.pop(key, None)
    merged["ranks"] = [
        {
            "rank": d.get("rank"),
            "status": d.get("status"),
            "exit_code": d.get("exit_code"),
            "steps": d.get("steps", 0),
            "losses": d.get("losses", []),
            "error": d.get("error"),
        }
        for d in parts
    ]
    everyone = [*parts, *([main] if main is not None else [])]
    # the first to fail is the cause; one that left no result of its own (NoResult: torchrun
    # killed it once a peer had failed) comes after every process that reported its error
    failed = sorted(
        (d for d in everyone if d.get("status") != "ok"),
        key=lambda d: (_unfinished(d), d.get("ended_at", 0.0)),
    )
    present = {d.get("rank") for d in parts}
    missing = sorted(set(range(expected or 0)) - present)
    if failed:
        bad = failed[0]
        merged.update(status="failed", exit_code=bad.get("exit_code") or 1)
        merged["error"] = {**(bad.get("error") or {}), "rank": bad.get("rank")}
    elif missing:
        merged.update(status="failed", exit_code=merged.get("exit_code") or 1)
        merged["error"] = {
            "type": "NoResult",
            "message": f"rank(s) {missing} ended without a result",
            "frame": None,
            "rank": missing[0],
        }
    return merged
