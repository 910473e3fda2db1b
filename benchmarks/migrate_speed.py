"""How fast `torchport migrate --no-verify --dry-run` is, against libcst in the same run.

The baseline is what any libcst codemod must at least pay: ``parse_module`` on every
``.py`` file of the tree, then a ``MetadataWrapper`` resolving the metadata the engine
asks for (positions and parents). Measured in the same process and the same minute as
the migration, the ratio stays meaningful on a shared, noisy machine where absolute
lines per second do not.

Trees (each measured on its own):
  - a real repository: a snapshot of a bare git directory under $TORCHPORT_MIRRORS
    (``git archive HEAD``, extracted to a temporary folder; nothing is kept), by default
    facebookresearch+detr (about 4.4k lines of Python);
  - the eval suite: every ``evals/suite/*/repo`` side by side in one tree;
  - any folder given with ``--tree``.

Figures: lines/s of the baseline, of the migration in-process (the CLI's ``main`` called
with the same arguments, imports already paid) and of the ``torchport`` command (start-up
included); best of ``--repeat``, by wall clock and by CPU time (the process's own, or the
command's user+system time): on a machine other work shares, CPU time is the steadier
figure. Not a test: prints figures.

Usage: ``python benchmarks/migrate_speed.py [--mirror DIR] [--tree DIR ...] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

ROOT = Path(__file__).resolve().parents[1]
# detr's snapshot under $TORCHPORT_MIRRORS (benchmarks/realworld.py), when that is set
MIRROR = (
    Path(os.environ["TORCHPORT_MIRRORS"]) / "facebookresearch+detr"
    if os.environ.get("TORCHPORT_MIRRORS")
    else None
)
TORCHPORT = [sys.executable, "-m", "torchport.cli"]
TEXT_SUFFIXES = (".py", ".ipynb", ".sh", ".txt", ".md", ".yaml", ".yml", ".toml", ".cfg")


def python_files(tree: Path) -> list[Path]:
    return sorted(p for p in tree.rglob("*.py") if p.is_file())


def lines_of(tree: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in python_files(tree))


def parse_with_metadata(tree: Path) -> None:
    """The baseline: what a libcst codemod pays before it changes anything."""
    for path in python_files(tree):
        try:
            module = cst.parse_module(path.read_text(encoding="utf-8"))
        except (cst.ParserSyntaxError, UnicodeDecodeError):
            continue
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        wrapper.resolve_many([PositionProvider, ParentNodeProvider])


def migrate_args(tree: Path, target: str) -> list[str]:
    return ["migrate", str(tree), "-t", target, "--no-verify", "--dry-run", "-q", "--llm", "none"]


def migrate_in_process(tree: Path, target: str) -> None:
    from torchport.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()):
        status = main(migrate_args(tree, target))
    if status not in (0, 1):
        raise SystemExit(f"torchport migrate failed on {tree} ({status})")


def migrate_command(tree: Path, target: str) -> float:
    """Runs the command; returns its CPU time (user + system)."""
    proc = subprocess.Popen(
        [*TORCHPORT, *migrate_args(tree, target)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        assert proc.stderr is not None
        raise SystemExit(f"torchport migrate failed on {tree}: {proc.stderr.read()[-800:]!r}")
    return usage.ru_utime + usage.ru_stime


def best_of(repeat: int, run: Callable[[], float | None]) -> tuple[float, float]:
    """The best wall time and the best CPU time of ``repeat`` runs (a run that returns a
    number reports its own CPU time: a child process's)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        child_cpu = run()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, child_cpu if child_cpu is not None else time.process_time() - start_cpu)
    return wall, cpu


def snapshot(bare: Path, into: Path) -> Path:
    """A bare repository's HEAD as plain files (the mirror keeps only git objects, and not
    always its large binary ones: then the text files the scanner reads are taken alone)."""
    git = ["git", "--git-dir", str(bare / "repo" if (bare / "repo").is_dir() else bare)]
    into.mkdir(parents=True)
    archive = subprocess.run([*git, "archive", "HEAD"], capture_output=True, check=False)
    if archive.returncode != 0:
        names = subprocess.run(
            [*git, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True
        ).stdout.split("\n")
        wanted = [n for n in names if n.endswith(TEXT_SUFFIXES)]
        archive = subprocess.run(
            [*git, "archive", "HEAD", "--", *wanted], capture_output=True, check=True
        )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def suite_tree(into: Path) -> Path:
    """Every eval task's source repository, side by side."""
    into.mkdir(parents=True)
    for repo in sorted((ROOT / "evals" / "suite").glob("*/repo")):
        shutil.copytree(repo, into / repo.parent.name)
    return into


def measure(name: str, tree: Path, target: str, repeat: int) -> None:
    lines = lines_of(tree)
    files = len(python_files(tree))
    print(f"{name}: {files} .py files, {lines} lines (target {target})")
    migrate_in_process(tree, target)  # warm: imports, the catalogue, caches of the process
    base = best_of(repeat, lambda: parse_with_metadata(tree))
    rows = [
        ("libcst parse + metadata", base),
        ("migrate, in-process", best_of(repeat, lambda: migrate_in_process(tree, target))),
        ("torchport migrate", best_of(repeat, lambda: migrate_command(tree, target))),
    ]
    for label, (wall, cpu) in rows:
        print(
            f"  {label:24} wall {wall:6.2f} s {lines / wall:7,.0f} lines/s "
            f"({base[0] / wall:4.2f}x) | cpu {cpu:6.2f} s {lines / cpu:7,.0f} lines/s "
            f"({base[1] / cpu:4.2f}x the baseline)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mirror", type=Path, default=MIRROR, help="a bare git repository")
    ap.add_argument("--tree", type=Path, action="append", default=[], help="a folder to migrate")
    ap.add_argument("--target", default="tpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-suite", action="store_true", help="skip the eval suite's sources")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["TORCHPORT_HOME"] = str(tmp / "home")  # checkpoints go to the scratch
        trees: list[tuple[str, Path]] = []
        if args.mirror is not None and args.mirror.exists():
            trees.append((args.mirror.name, snapshot(args.mirror, tmp / "mirror")))
        else:
            print(f"(no mirror at {args.mirror or '$TORCHPORT_MIRRORS'}: skipped)")
        if not args.no_suite:
            trees.append(("eval suite sources", suite_tree(tmp / "suite")))
        trees += [(str(t), t.resolve()) for t in args.tree]
        for name, tree in trees:
            measure(name, tree, args.target, args.repeat)


if __name__ == "__main__":
    main()
