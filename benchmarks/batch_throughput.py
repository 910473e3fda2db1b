"""How `torchport batch` scales with --jobs, and what memory it holds while it runs.

The same repositories (the eval suite's first N projects) are migrated and verified
three ways in one run: --jobs 1 (the baseline), --jobs J on local processes, and
--jobs J on a local Ray instance when Ray is installed. For each: wall time, the
speed-up over the baseline, and the peak resident memory of the whole process tree
(the batch, its jobs, their sandboxed programs), sampled from /proc every 0.2 s.
Rules only (--llm none), so the figures are about the batch machinery and the
verification runs, not a model.

Not a test: prints figures. Usage: `make bench`, or
`python benchmarks/batch_throughput.py [--repos 12] [--jobs 2] [--steps 2]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "evals" / "suite"


def tree_rss_mb(root_pid: int) -> float:
    """Resident memory of ``root_pid`` and all its descendants, in MiB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            statm = (entry / "statm").read_text().split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(statm[1]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / 2**20


def run_batch(sources: Path, out: Path, args: list[str], home: Path) -> tuple[float, float, dict]:
    """Wall seconds, peak tree RSS (MiB) and the summary's totals of one batch."""
    env = {**os.environ, "TORCHPORT_HOME": str(home), "RAY_DISABLE_USAGE_STATS": "1"}
    command = [sys.executable, "-m", "torchport.cli", "batch", str(sources)]
    command += ["--target", "tpu", "--out", str(out), "--llm", "none", "--quiet", *args]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            peak = max(peak, tree_rss_mb(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if process.returncode not in (0, 1):
        raise SystemExit(f"batch failed ({process.returncode}): {err[-2000:]}")
    totals = json.loads((out / "summary.json").read_text())["totals"]
    return wall, peak, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=int, default=12, help="how many suite projects")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel jobs")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per run")
    options = parser.parse_args()
    tasks = sorted(p.parent for p in SUITE.glob("*/repo"))[: options.repos]
    with tempfile.TemporaryDirectory(prefix="torchport-bench-batch-") as tmp:
        work = Path(tmp)
        sources = work / "repos.txt"
        sources.write_text("".join(f"{t / 'repo'} - {t.name}\n" for t in tasks))
        home = work / "home"
        # the originals' reference runs are cached by content: warm the cache once, so
        # that every measured batch pays the same (only the migrations' runs)
        run_batch(
            sources,
            work / "warm",
            ["--jobs", str(options.jobs), "--steps", str(options.steps)],
            home,
        )
        configs = [("local, --jobs 1", ["--jobs", "1"])]
        configs.append((f"local, --jobs {options.jobs}", ["--jobs", str(options.jobs)]))
        if importlib.util.find_spec("ray") is not None:
            configs.append(
                (f"ray, --jobs {options.jobs}", ["--jobs", str(options.jobs), "--executor", "ray"])
            )
        print(f"{len(tasks)} repositories (eval suite), tpu, {options.steps} steps, rules only")
        print(f"{'configuration':<22} {'wall s':>8} {'speed-up':>9} {'peak MiB':>9}  verdicts")
        baseline = None
        for number, (name, extra) in enumerate(configs):
            out = work / f"out{number}"
            wall, peak, totals = run_batch(
                sources, out, [*extra, "--steps", str(options.steps)], home
            )
            baseline = baseline or wall
            verdicts = ", ".join(f"{n} {v}" for v, n in totals["verdicts"].items())
            print(f"{name:<22} {wall:>8.1f} {baseline / wall:>8.2f}x {peak:>9.0f}  {verdicts}")


if __name__ == "__main__":
    main()
