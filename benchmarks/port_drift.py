"""How the ports of the real-world repositories change between two torchport versions:
migration only (``--no-verify --llm none``), every target, each repository's tree from its
snapshot at the pinned commit (benchmarks/realworld.py's list).

A refactor that claims "same behaviour for the four targets" is checked here on code other
people wrote: the migrated trees of both versions are compared file by file (the report's
timings aside), and every difference is written as a unified diff for a reviewer.

    python benchmarks/port_drift.py --old "/path/to/old/.venv/bin/python -m torchport.cli" \\
        --new "python -m torchport.cli" --mirrors /work/.mirror --diff drift.patch
"""

from __future__ import annotations

import argparse
import difflib
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realworld

TARGETS = ("tpu", "neuron", "xla", "accelerator")
REPORT_KEPT = ("changes.patch", "manual.md")  # the report files without timings or paths


def migrated(torchport: list[str], folder: Path, target: str, out: Path) -> int:
    command = [*torchport, "migrate", str(folder), "--target", target, "--out", str(out)]
    command += ["--no-verify", "--llm", "none", "--quiet", "--exit-zero"]
    return subprocess.run(command, capture_output=True, text=True, timeout=900).returncode


def texts(out: Path) -> dict[str, str]:
    """The migrated tree's files, and the report files that hold no timings."""
    found = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        report = rel.startswith("torchport-report/")
        if not path.is_file() or (report and path.name not in REPORT_KEPT):
            continue
        found[rel] = path.read_text(encoding="utf-8", errors="replace")
    return found


def drift(old: dict[str, str], new: dict[str, str], label: str) -> list[str]:
    lines: list[str] = []
    for rel in sorted(set(old) | set(new)):
        a, b = old.get(rel, ""), new.get(rel, "")
        if a != b:
            lines += difflib.unified_diff(
                a.splitlines(keepends=True),
                b.splitlines(keepends=True),
                f"old/{label}/{rel}",
                f"new/{label}/{rel}",
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="the command that runs the old torchport")
    p.add_argument("--new", required=True, help="the command that runs the new torchport")
    p.add_argument("--mirrors", type=Path, help="where fetch put the snapshots")
    p.add_argument("--table", default="all", choices=sorted(realworld.TABLES))
    p.add_argument("--only", default="", help="comma-separated parts of repository names")
    p.add_argument("--diff", type=Path, default=Path("port-drift.patch"))
    args = p.parse_args(argv)
    mirrors = realworld.mirrors_of(args.mirrors)
    patch: list[str] = []
    changed = total = 0
    with tempfile.TemporaryDirectory(prefix="torchport-drift-") as tmp:
        work = Path(tmp)
        seen: set[tuple[str, str]] = set()
        for repo in realworld.selected(args.table, args.only):
            if (repo.name, repo.folder) in seen:
                continue  # one repository, several entries: the same migration
            seen.add((repo.name, repo.folder))
            gitdir = mirrors / repo.name.replace("/", "+") / "repo"
            if not gitdir.is_dir():
                print(f"{repo.title}: not fetched", flush=True)
                continue
            root = work / "src"
            shutil.rmtree(root, ignore_errors=True)
            realworld.extract(gitdir, repo.commit, root, mirrors if repo.recursive else None)
            for target in TARGETS:
                outs = {}
                for side, command in (("old", args.old), ("new", args.new)):
                    out = work / side
                    shutil.rmtree(out, ignore_errors=True)
                    migrated(shlex.split(command), root / repo.folder, target, out)
                    outs[side] = texts(out) if out.is_dir() else {}
                lines = drift(outs["old"], outs["new"], f"{repo.title}-{target}")
                total += 1
                changed += bool(lines)
                files = sum(line.startswith("+++ ") for line in lines)
                print(f"{repo.title:40} {target:12} {files} files differ", flush=True)
                patch += lines
    args.diff.write_text("".join(patch), encoding="utf-8")
    print(f"{changed} of {total} ports differ; the diffs: {args.diff}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
