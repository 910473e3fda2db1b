"""What a reviewer's linter would say about torchport's ports of public CUDA repositories.

Each repository of ``benchmarks/realworld.py`` is extracted at its pinned commit, migrated
without verification (``--llm none --no-verify``), and every rewritten Python file is checked
with pyflakes against its original (as the migration read it: PyTorch 0.3's ``async=``
renamed where only that makes it parse): a finding the migration introduced (counted by kind
and name, never by line) is a bug or noise a reviewer would ask to remove. Also counted: the fixes
the semantic guard refused. Not part of ``make test``; a few seconds a repository.

    python benchmarks/review_checks.py                      # both tables, target tpu
    python benchmarks/review_checks.py --table 2            # the second table only
    python benchmarks/review_checks.py --only llm.c --target accelerator --json out.json
    python benchmarks/review_checks.py --torchport "OTHER/python -m torchport.cli"
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from realworld import MIRRORS, TABLES, Repo, extract, mirrors_of, prepare, selected
from torchport.tools.codemods.guard import REFUSED, introduced
from torchport.tools.legacy_keyword import repaired


@dataclass
class Row:
    repository: str
    files: int = 0  # Python files the migration rewrote
    new_findings: int = 0
    refused: int = 0
    wall_s: float = 0.0
    error: str = ""
    examples: list[str] = field(default_factory=list)  # path: kind name, the first few
    second_pass: int = -1  # files a migration of the migrated tree changes again (0: idempotent)
    counts_add_up: bool = False  # found = converted + left + advisory, in total and per file


def check_one(repo: Repo, mirrors: Path, work: Path, target: str, torchport: list[str]) -> Row:
    row = Row(repo.title)
    gitdir = mirrors / repo.name.replace("/", "+") / "repo"
    if not gitdir.is_dir():
        row.error = f"not fetched: no snapshot at {gitdir}"
        return row
    slug = repo.title.replace("/", "-").replace(" ", "-")
    root, out = work / "src" / slug, work / "out" / f"{slug}-{target}"
    for path in (root, out):
        shutil.rmtree(path, ignore_errors=True)
    extract(gitdir, repo.commit, root)
    folder = root / repo.folder
    for step in repo.prepare:  # a launcher the README has its user write is migrated too
        prepare(step, root, folder)
    started = time.perf_counter()
    command = [*torchport, "migrate", str(folder), "--target", target, "--out", str(out)]
    done = subprocess.run(
        [*command, "--llm", "none", "--no-verify", "-q"], capture_output=True, text=True
    )
    row.wall_s = round(time.perf_counter() - started, 1)
    changes = out / "torchport-report" / "changes.json"
    if not changes.is_file():  # "not verified" exits non-zero too: only a missing report fails
        row.error = (done.stderr or done.stdout).strip().replace("\n", " ")[-300:]
        return row
    for migrated in sorted(out.rglob("*.py")):
        rel = migrated.relative_to(out)
        original = folder / rel
        if "torchport-report" in rel.parts or not original.is_file():
            continue
        before = original.read_text(encoding="utf-8", errors="replace")
        after = migrated.read_text(encoding="utf-8", errors="replace")
        if before == after:
            continue
        row.files += 1
        new = introduced(_as_read(before), after, str(rel))
        row.new_findings += len(new)
        row.examples += [f"{rel}:{p.line}: {p.kind} {p.name}" for p in new]
    report = json.loads(changes.read_text())
    row.refused = sum(item["reason"].startswith(REFUSED) for item in report["left_for_humans"])
    row.counts_add_up = _counts_add_up(report["summary"])
    row.second_pass = _second_pass(out, work / "again" / out.name, target, torchport)
    return row


def _as_read(original: str) -> str:
    """The original as the migration read it: a file that parses only with PyTorch 0.3's
    ``async=`` renamed (``tools.legacy_keyword``) is compared renamed, else every finding of
    the port would count as new against an original pyflakes cannot read."""
    fixed = repaired(original)
    return fixed.text if fixed is not None else original


def _counts_add_up(summary: dict) -> bool:
    rows = [summary, *summary.get("per_file", {}).values()]
    keys = [("constructs_found", "converted", "left_for_humans", "advisories")]
    keys.append(("found", "converted", "left", "advisory"))
    return all(
        any(
            all(k in r for k in names) and r[names[0]] == sum(r[k] for k in names[1:])
            for names in keys
        )
        for r in rows
    )


def _second_pass(out: Path, again: Path, target: str, torchport: list[str]) -> int:
    """Migrate the migrated tree again: every file it changes is a codemod that is not
    idempotent (its output still matches a rule, or a fix rewrites its own result)."""
    shutil.rmtree(again, ignore_errors=True)
    command = [*torchport, "migrate", str(out), "--target", target, "--out", str(again)]
    subprocess.run([*command, "--llm", "none", "--no-verify", "-q"], capture_output=True)
    changes = again / "torchport-report" / "changes.json"
    if not changes.is_file():
        return -1
    changed = json.loads(changes.read_text()).get("files_changed", [])
    return len(changed) if isinstance(changed, list) else int(changed)


def table(rows: list[Row]) -> str:
    lines = [
        "| repository | files rewritten | new pyflakes findings | refused edits"
        " | changed by a 2nd pass | counts add up | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        findings = r.error or str(r.new_findings)
        again = "?" if r.second_pass < 0 else str(r.second_pass)
        lines.append(
            f"| {r.repository} | {r.files} | {findings} | {r.refused} | {again}"
            f" | {'yes' if r.counts_add_up else 'NO'} | {r.wall_s:g} |"
        )
    total = (sum(r.files for r in rows), sum(r.new_findings for r in rows))
    again = sum(max(r.second_pass, 0) for r in rows)
    lines.append(
        f"| total | {total[0]} | {total[1]} | {sum(r.refused for r in rows)} | {again} | | |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="tpu", choices=("tpu", "neuron", "xla", "accelerator"))
    parser.add_argument("--only", default="", help="comma-separated parts of repository names")
    parser.add_argument(
        "--table",
        default="all",
        choices=tuple(TABLES),
        help="which table of docs/benchmarks/realworld.md",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/torchport-review"))
    parser.add_argument("--mirrors", type=Path, default=MIRRORS)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--torchport",
        default=f"{shlex.quote(sys.executable)} -m torchport.cli",
        help="the command that runs torchport (another checkout's, to compare)",
    )
    options = parser.parse_args(argv)
    rows = []
    for repo in selected(options.table, options.only):
        row = check_one(
            repo,
            mirrors_of(options.mirrors),
            options.work,
            options.target,
            shlex.split(options.torchport),
        )
        print(f"{row.repository}: {row.new_findings} new, {row.refused} refused", file=sys.stderr)
        for example in row.examples[:8]:
            print(f"  {example}", file=sys.stderr)
        rows.append(row)
    print(table(rows))
    if options.json:
        options.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
