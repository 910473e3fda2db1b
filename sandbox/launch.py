"""The process a sandboxed run starts: activate the emulated device (or the CUDA
reference shim), fix seeds, watch the program with a step budget, run it as
``python`` would, and report what it did on the results channel however it ends.

    python -P -s -m torchport.sandbox.launch --mode tpu --steps 20 --results DIR -- train.py
    python -P -s -m torchport.sandbox.launch --mode reference --results DIR -- -m mypkg.train

``-P``, and the program's folders given in ``TORCHPORT_PROGRAM_PATH`` rather than
``PYTHONPATH``: nothing of the program is on the path while torchport's own modules are
imported (a repository's ``torchport/`` package cannot stand in for them). The launcher
connects to the results channel (``sandbox.channel``, a socket in DIR that torchport
listens on) before anything of the program runs, and adds the program's folders to the
path only then. (Not ``-I``: its ``-E`` would pass to ``mp.spawn``'s children, which
need ``PYTHONPATH`` for torchport's bootstrap.)

Under torchrun each rank runs this launcher (``--per-rank``: each reports as a rank),
and datasets asked of torchvision, torchaudio or HF ``datasets`` are synthetic
unless ``--real-data`` (see ``sandbox.synthetic``). In ``reference`` mode, flash-attn,
xformers and apex are pure-PyTorch stand-ins when not installed (see
``sandbox.shim.standins``; the result lists those used as ``reference_standins``).

Modes: ``plain`` (nothing activated), ``reference`` (CUDA code on CPU through the
shim), ``tpu`` / ``neuron`` (the emulated device).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

from torchport.sandbox.pythonpath import pin_own_package, place_site_paths, program_folders

from . import matmul_precision, terminal
from .channel import Reporter
from .limits import DEFAULT_DEVICES
from .modes import GENERIC, MODES
from .session import OWN_CODE, RunConfig, error_of, export, start, user_frame

__all__ = ["MODES", "OWN_CODE", "main", "notebook_cells", "user_frame"]
# The launcher's exit status when it cannot report at all (the program was not started).
CANNOT_REPORT = 3


def own_rank() -> int | None:
    """torchrun's RANK for this process, when it has one."""
    rank = os.environ.get("RANK", "")
    return int(rank) if rank.isdigit() else None


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: python -m torchport.sandbox.launch [options] -- PROGRAM [ARGS]")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="torchport.sandbox.launch")
    parser.add_argument("--mode", choices=MODES, default="plain")
    parser.add_argument("--devices", type=int, default=DEFAULT_DEVICES)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--forwards", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--results", required=True, help="the run's folder, holding the results channel's socket"
    )
    parser.add_argument("--chdir", help="the program's folder (its working directory)")
    parser.add_argument(
        "--per-rank", action="store_true", help="report as one rank of several (torchrun)"
    )
    parser.add_argument(
        "--preload",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE after activating the mode, before the program (a runtime patch)",
    )
    parser.add_argument(
        "--record-site",
        action="append",
        default=[],
        metavar="PATH:FUNCTION",
        help="reference mode: record the arguments of this kernel call site's first calls",
    )
    parser.add_argument(
        "--matmul-precision",
        choices=matmul_precision.choices(),
        default=None,
        help="pin the emulated device's float32 matmul precision for every process of the run",
    )
    parser.add_argument(
        "--trace",
        default=None,
        metavar="JSON",
        help="note every module's output at one step (sandbox.module_trace's settings)",
    )
    parser.add_argument(
        "--names",
        default=None,
        metavar="JSON",
        help=f"mode {GENERIC}: the device under a target's own names "
        '({"device": ..., "dist_backend": ..., "compile_backend": ...})',
    )
    parser.add_argument(
        "--real-data",
        action="store_true",
        help="do not substitute synthetic data for torchvision/torchaudio/HF datasets",
    )
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def notebook_cells(path: Path) -> list[tuple[int, str]]:
    """A notebook's code cells as (1-based cell number, Python source).

    Shell escapes and magics (``!cmd``, ``%magic``, ``%%cell``) are IPython, not
    Python, and mean nothing in a sandbox with no shell or network; each such line
    becomes ``pass`` so line numbers stay those of the cell.
    """
    cells = []
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for number, cell in enumerate(notebook.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        if text.lstrip().startswith("%%"):
            continue  # a cell magic: the whole cell is not Python
        lines = [
            (line[: len(line) - len(line.lstrip())] + "pass")
            if line.lstrip().startswith(("!", "%"))
            else line
            for line in text.splitlines()
        ]
        cells.append((number, "\n".join(lines) + "\n"))
    return cells


def _run_notebook(path: Path) -> None:
    """Run the code cells in order in one namespace, as "Run all" does."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": str(path)}
    sys.path.insert(0, str(path.resolve().parent))
    for number, code in notebook_cells(path):
        exec(compile(code, f"{path}#cell{number}", "exec"), namespace)


def _run_program(program: list[str]) -> None:
    if program[:1] and program[0].endswith(".ipynb"):
        sys.argv = list(program)
        _run_notebook(Path(program[0]))
    elif program[:1] == ["-m"]:
        module, args = program[1], program[2:]
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = program[0], program[1:]
        sys.argv = [script, *args]
        sys.path.insert(0, str(Path(script).resolve().parent))
        runpy.run_path(script, run_name="__main__")


def process_started() -> float | None:
    """When this process began, on the wall clock (the kernel's record in /proc, in 10 ms
    steps), or None where /proc does not say: the harness tells the sandbox's start-up
    (before) from Python's own (after) by it."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - age


def main(argv: list[str] | None = None) -> int:
    # wall-clock marks between the phases of the run (harness.PHASES), set as it passes them
    clock = {"process": process_started(), "entered": time.time()}
    pin_own_package()  # before any folder of the program's is on the path
    options, program = _parse(list(sys.argv[1:] if argv is None else argv))
    # First of all, before anything of the program can run: the channel the numbers go on.
    reporter = Reporter(options.results, "rank" if options.per_rank else "launcher", own_rank)
    try:
        reporter.connect()
    except OSError as exc:
        print(f"torchport: the results channel cannot be reached: {exc}", file=sys.stderr)
        return CANNOT_REPORT
    result: dict[str, Any] = {"mode": options.mode, "program": program, "status": "failed"}
    result["clock"] = clock
    if options.per_rank:
        result["rank"] = own_rank()
    started = time.perf_counter()
    session = None
    if options.chdir:
        os.chdir(options.chdir)
    terminal.answer()  # what a terminal would say: stty size, COLUMNS, LINES
    config = RunConfig(
        mode=options.mode,
        results=str(Path(options.results).resolve()),
        devices=options.devices,
        steps=options.steps,
        forwards=options.forwards,
        seed=options.seed,
        preload=tuple(options.preload),
        real_data=options.real_data,
        record_sites=tuple(options.record_site),
        matmul_precision=options.matmul_precision,
        trace=options.trace,
        names=json.loads(options.names) if options.names else None,
    )
    place_site_paths()  # after site-packages: torchport's own and torch's always win
    try:
        session = start(config, reporter)
        export(config)  # every Python process the program starts runs the same session
        from torchport.sandbox.budget import StepBudgetReached

        sys.path[:0] = program_folders()  # as PYTHONPATH would have, now torchport is loaded
        clock["activated"] = time.time()

        try:
            _run_program(program)
            result.update(status="ok", exit_code=0)
        except StepBudgetReached as stop:
            result.update(status="ok", exit_code=0, stopped=f"budget reached: {stop}")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            result.update(status="ok" if code == 0 else "failed", exit_code=code)
            if code:
                result["error"] = {"type": "SystemExit", "message": str(exc.code), "frame": None}
    except BaseException as exc:
        result.update(status="failed", exit_code=1, error=error_of(exc))
        traceback.print_exc()
    finally:
        clock["finished"] = time.time()
        result["elapsed_s"] = round(time.perf_counter() - started, 3)
        result["ended_at"] = time.time()  # across ranks, the first to fail is the cause
        if session is not None:
            result.update(session.report())
        reporter.end(result)
    return 0 if result["status"] == "ok" else 1


def leave(code: int) -> NoReturn:
    """End the launcher's process as ``sys.exit(code)`` would, less Python's finalisation.

    With torch loaded, freeing every module's objects at exit took 2.9 s of a 23 s run
    (the bundled example, 2 busy cores; ``benchmarks/verify_phases.py``) and decides
    nothing: the result is written. What a normal exit does that a program may rely on
    still happens, in its order: non-daemon threads joined, atexit handlers run
    (``multiprocessing`` joins or ends its children there, a child writes its result),
    the standard streams flushed."""
    # What the interpreter itself does first at exit: the hooks registered with
    # threading (a ThreadPoolExecutor's, which tells its idle workers to stop), then a join
    # of every non-daemon thread. Joining alone waited forever on an executor's idle
    # worker (bitsandbytes' reference run sat 250 s in teardown until its time ran out).
    threading._shutdown()  # type: ignore[attr-defined]  # CPython's own exit step, not in typeshed
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: nothing to flush
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
