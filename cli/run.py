"""``torchport run``: one program in the sandbox, on an emulated device or the CUDA
reference shim, with a step budget; its losses, counters and error reported."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from torchport.agents.data_notes import data_notes
from torchport.sandbox.limits import MAX_SEED, RUN_STEPS
from torchport.sandbox.modes import EMULATED
from torchport.tools.safetext import terminal_line

from .options import EXIT_CLEAN, EXIT_FINDINGS, add_run_budget, fail, seed


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="run a program in the sandbox (emulated device or CUDA reference), with a budget",
        description="Run a Python program from a scratch copy of --root, isolated, stopping "
        "cleanly after --steps optimizer steps (or --steps forward calls for inference), and "
        "report its losses, counters and any error as text or JSON.",
        epilog="The program's own output is shown as it runs (escaped, a line at a time), "
        "then the run's summary; with -f json, standard output holds only the JSON and the "
        "program's output goes to standard error.\n\n"
        "examples:\n"
        "  torchport run --target tpu -- python train.py --lr 0.1\n"
        "  torchport run --reference --steps 5 -f json -- python -m mypkg.train\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument(
        "--target",
        "-t",
        choices=[*EMULATED, "accelerator"],
        help="run on the emulated device (accelerator: plain CPU torch)",
    )
    how.add_argument(
        "--reference",
        action="store_true",
        help="run unmodified CUDA code on the CPU through the reference shim",
    )
    parser.add_argument("--root", default=".", help="the program's folder (default: .)")
    add_run_budget(parser, default_steps=RUN_STEPS)
    parser.add_argument(
        "--tpu-launch-step",
        action="store_true",
        help="with --target tpu and a torchrun command: take TorchTPU's launch step in "
        "torchrun's parent first, as a port's launch line eval \"$(python -m "
        "torch.tpu.distributed | sed 's/^/export /')\" && torchrun ... does (without it "
        "every rank fails at its first device use, as on TorchTPU)",
    )
    parser.add_argument("--seed", type=seed, default=0, help=f"0 to {MAX_SEED} (default: 0)")
    parser.add_argument("--format", "-f", choices=["text", "json"], default="text")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python SCRIPT [ARGS]")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torchport.sandbox.harness import RunError, RunSpec, run

    from .echo import ProgramEcho

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    mode = "reference" if args.reference else (args.target if args.target in EMULATED else "plain")
    # the program's output as it runs; with JSON, standard output is the JSON alone
    out = sys.stderr if args.format == "json" else sys.stdout
    echo = ProgramEcho({"stdout": out, "stderr": sys.stderr})
    try:
        spec = RunSpec(
            root=Path(args.root).resolve(),
            command=command,
            mode=mode,
            steps=args.steps,
            forwards=args.steps,
            seed=args.seed,
            devices=args.devices,
            timeout_s=args.timeout,
            memory_mb=args.memory,
            isolation=args.isolation,
            output=echo,
            launch_step=args.tpu_launch_step,
            lower_args=not args.keep_args,
        )
        result = run(spec)
    except RunError as exc:
        return fail(str(exc))
    finally:
        echo.close()
    if args.format == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(
            f"{result.status} ({mode}, isolation: {result.isolation or 'none'}, "
            f"{result.elapsed_s:.1f}s): {result.steps} steps, {len(result.losses)} losses"
        )
        if result.losses:
            shown = ", ".join(f"{x:.6g}" for x in result.losses[:10])
            print(f"losses: {shown}{' ...' if len(result.losses) > 10 else ''}")
        for note in data_notes(result.to_json()):
            print(terminal_line(note))
        if result.error:  # the program's own words: one line, no escape sequences
            frame = result.error.get("frame") or {}
            where = f" at {frame.get('file')}:{frame.get('line')}" if frame else ""
            print(terminal_line(f"error: {result.error['type']}: {result.error['message']}{where}"))
    return EXIT_CLEAN if result.status == "ok" else EXIT_FINDINGS
