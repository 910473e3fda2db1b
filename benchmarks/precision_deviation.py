"""Measure how far a tpu port's numbers move at each matmul precision: the evidence behind
the tolerance policies of agents/data/tolerance.toml.

Each program (the corpus's easy and medium programs, tests/fixtures/corpus, and
examples/cuda_mnist) is migrated to tpu with the rules only, then run three times with the
same seed, budget and synthetic data: the original on the CUDA reference shim, the port
on the emulated tpu device at ``highest`` (exact float32 matmuls: verification check (a))
and at TorchTPU's own arithmetic (``matmul_precision=None``: float32 matmuls as bf16
passes unless the program asks for more: check (b)). Printed per program, as ratios (max
relative deviation over the compared losses or output statistics): (a) against the
original, (b) against the original, (b) against (a); the fall in loss (b) keeps of (a)'s;
whether it autocasts (the bf16 policy). Not part of ``make test``: three sandboxed runs a
program.

    python benchmarks/precision_deviation.py                    # every program
    python benchmarks/precision_deviation.py --only mnist,amp --steps 5 --json rows.json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torchport.agents import precision_check
from torchport.agents.verifier import (
    Policy,
    RunLimits,
    choose_policy,
    compare_outputs,
    compare_ranks,
    reference_run,
    run_program,
)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
EXAMPLE = ROOT / "examples" / "cuda_mnist"
# Only to measure: every step compared, nothing held to a tolerance.
MEASURE = Policy("measure", rtol=math.inf, atol=math.inf, max_steps=10**6)


def programs() -> list[Path]:
    """The corpus's easy and medium programs (they run rules only) and the example."""
    labels = tomllib.loads((CORPUS / "expected.toml").read_text())["files"]
    wanted = {
        name.split("/")[0] for name, s in labels.items() if s["difficulty"] in ("easy", "medium")
    }
    return [*(CORPUS / name for name in sorted(wanted)), EXAMPLE]


@dataclass
class Row:
    program: str
    policy: str = ""  # the verifier's choice for the port: fp32 or bf16
    compared: str = ""
    steps: int = 0
    highest_vs_original: float | None = None  # max rel: check (a)
    default_vs_original: float | None = None
    default_vs_highest: float | None = None  # max rel: check (b)
    default_vs_highest_abs: float | None = None
    fall_kept: float | None = None  # (b)'s fall in loss over (a)'s
    nonfinite: bool = False
    matmul_ops: int = 0
    seconds: dict[str, float] | None = None
    note: str = ""


def migrate(source: Path, out: Path, torchport: list[str]) -> list[str]:
    """The rules-only port of ``source`` to tpu in ``out``; returns the entry command."""
    flags = ["--llm", "none", "--no-verify", "--format", "json", "--quiet", "--force"]
    done = subprocess.run(
        [*torchport, "migrate", str(source), "--target", "tpu", "--out", str(out), *flags],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"migrate exited {done.returncode}: {done.stderr.strip()[-300:]}")
    plan = (json.loads(done.stdout).get("verification") or {}).get("plan") or {}
    if not plan.get("entry"):
        raise RuntimeError(f"no entry: {plan.get('not_runnable') or plan}")
    return list(plan["entry"])


def deviation(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, int, float, float]:
    """What was compared, how many, max abs and max rel of ``b`` from ``a``."""
    if a.get("losses") and b.get("losses"):
        parity = compare_ranks(a, b, MEASURE)
    elif a.get("outputs") and b.get("outputs"):
        parity = compare_outputs(a["outputs"], b["outputs"], MEASURE)
    else:
        return "nothing", 0, math.nan, math.nan
    return parity.compared, parity.steps, parity.max_abs, parity.max_rel


def measure(source: Path, scratch: Path, budget: RunLimits, torchport: list[str]) -> Row:
    row = Row(source.name)
    port = scratch / f"{source.name}-tpu"
    try:
        entry = migrate(source, port, torchport)
    except RuntimeError as exc:
        row.note = str(exc)
        return row
    row.policy = choose_policy(p.read_text(errors="replace") for p in port.rglob("*.py")).name
    seconds = {}
    runs = {}
    for name, call in (
        ("original", lambda: reference_run(source, entry, budget, None)),
        ("highest", lambda: run_program(port, entry, "tpu", budget, matmul_precision="highest")),
        ("default", lambda: run_program(port, entry, "tpu", budget, matmul_precision=None)),
    ):
        started = time.perf_counter()
        runs[name] = call()
        seconds[name] = round(time.perf_counter() - started, 1)
    row.seconds = seconds
    failed = [
        f"{n}: {r.get('status')} {(r.get('error') or {}).get('type')}"
        for n, r in runs.items()
        if r.get("status") != "ok"
    ]
    if failed:
        row.note = "; ".join(failed)
    original, highest, default = runs["original"], runs["highest"], runs["default"]
    row.compared, row.steps, _, row.highest_vs_original = deviation(original, highest)
    row.default_vs_original = deviation(original, default)[3]
    _, _, row.default_vs_highest_abs, row.default_vs_highest = deviation(highest, default)
    check = precision_check.judge(highest, default, precision_check.default_policy())
    row.nonfinite, row.matmul_ops = check.nonfinite, check.matmul_ops
    a, b = highest.get("losses") or [], default.get("losses") or []
    if len(a) > 1 and len(b) > 1 and a[0] != a[-1]:
        row.fall_kept = (b[0] - b[-1]) / (a[0] - a[-1])
    return row


def table(rows: list[Row]) -> str:
    def ratio(x: float | None) -> str:
        return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"

    lines = [
        "| program | policy | compared | (a) highest vs original | default vs original "
        "| (b) default vs highest | abs | fall kept | matmul ops | note |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.program} | {r.policy} | {r.steps} {r.compared} | {ratio(r.highest_vs_original)} "
            f"| {ratio(r.default_vs_original)} | {ratio(r.default_vs_highest)} "
            f"| {ratio(r.default_vs_highest_abs)} | {ratio(r.fall_kept)} | {r.matmul_ops} "
            f"| {r.note[:120]} |"
        )
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    """The worst of each column, per policy: what the policies must admit."""
    lines = []
    for policy in ("fp32", "bf16"):
        mine = [r for r in rows if r.policy == policy and r.compared != "nothing"]
        if not mine:
            continue
        worst = {
            key: max((getattr(r, key) for r in mine if getattr(r, key) is not None), default=None)
            for key in ("highest_vs_original", "default_vs_highest", "default_vs_highest_abs")
        }
        kept = [r.fall_kept for r in mine if r.fall_kept is not None]
        lines.append(
            f"{policy} ({len(mine)} programs): worst (a) rel {worst['highest_vs_original']}, "
            f"worst (b) rel {worst['default_vs_highest']} abs {worst['default_vs_highest_abs']}, "
            f"least fall kept {min(kept) if kept else None}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated parts of program names")
    parser.add_argument("--steps", type=int, default=RunLimits.steps)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--torchport", default=f"{sys.executable} -m torchport.cli")
    options = parser.parse_args(argv)
    wanted = [w for w in options.only.split(",") if w]
    chosen = [p for p in programs() if not wanted or any(w in p.name for w in wanted)]
    budget = RunLimits(steps=options.steps, forwards=options.steps)
    rows = []
    with tempfile.TemporaryDirectory(prefix="torchport-precision-") as scratch:
        for source in chosen:
            print(f"{source.name}: ...", file=sys.stderr, flush=True)
            rows.append(measure(source, Path(scratch), budget, options.torchport.split()))
    print(table(rows))
    print()
    print(summary(rows))
    if options.json:
        options.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
