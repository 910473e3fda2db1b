"""Migrate a repository to a target: scan it, apply every ``auto`` codemod, and
write the result where the user asked, never harming the original.

Output modes: a migrated copy (default ``PATH-<target>``), ``--in-place`` (only
from a clean git tree, or with ``--force`` after a named backup; every file is
replaced atomically), or ``--branch`` (a commit on a new branch made in a git
worktree). Every run writes ``torchport-report/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .catalogue import TARGETS
from .codemods import Edit, migrate_python
from .codemods.annotate import annotate_python
from .codemods.text import migrate_text
from .findings import Finding, ScanResult
from .notebooks import notebook_sources, replace_cell_sources
from .repowalk import SKIP_DIRS
from .scanner import ScanOptions, scan
from .sourcefile import read_exact


class MigrateError(Exception):
    """The migration cannot start (bad path, unsafe output, dirty tree); nothing was written."""


@dataclass(frozen=True)
class MigrateOptions:
    target: str
    select: tuple[str, ...] = ()
    out: Path | None = None
    in_place: bool = False
    branch: str | None = None
    dry_run: bool = False
    annotate: bool = False
    force: bool = False


@dataclass
class FileChange:
    path: str
    before: str
    after: str


@dataclass
class MigrationResult:
    root: Path
    target: str
    scan: ScanResult
    changes: list[FileChange] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    unapplied: list[tuple[Finding, str]] = field(default_factory=list)
    output: Path | None = None
    report_dir: Path | None = None
    backup: Path | None = None
    branch: str | None = None
    elapsed_s: float = 0.0

    @property
    def left_for_humans(self) -> list[tuple[Finding, str]]:
        """Findings this target cannot fix automatically, plus auto fixes that did not apply."""
        manual = [
            (f, f.fix[self.target]["hint"])
            for f in self.scan.findings
            if f.fix[self.target]["kind"] != "auto"
        ]
        return manual + self.unapplied


def migrate(
    path: str | os.PathLike,
    options: MigrateOptions,
    progress: Callable[[str], None] | None = None,
) -> MigrationResult:
    say = progress or (lambda message: None)
    started = time.perf_counter()
    root = Path(path).resolve()
    _check_options(root, options)
    say(f"scanning {root}")
    scanned = scan(root, ScanOptions(target=options.target, select=options.select))
    result = MigrationResult(root, options.target, scanned)
    say(f"rewriting {len({f.path for f in scanned.findings})} files with findings")
    _rewrite(result, options)
    if not options.dry_run:
        _write(result, options, say)
    result.elapsed_s = time.perf_counter() - started
    if result.report_dir is not None:
        from .report.migration import write_migration_report

        write_migration_report(result, result.report_dir)
    return result


def check_options(root: Path, options: MigrateOptions) -> None:
    """Refuse unsafe or contradictory options before anything runs (MigrateError)."""
    _check_options(root, options)


def write_result(
    result: MigrationResult, options: MigrateOptions, progress: Callable[[str], None] | None = None
) -> None:
    """Write a computed migration (``result.changes``) where the options say, then its report.

    For callers that compute or amend the changes themselves (the agent graph adds
    verified LLM edits to the codemods' output) and write only at the end.
    """
    _write(result, options, progress or (lambda message: None))
    if result.report_dir is not None:
        from .report.migration import write_migration_report

        write_migration_report(result, result.report_dir)


def _check_options(root: Path, options: MigrateOptions) -> None:
    if options.target not in TARGETS:
        raise MigrateError(f"unknown target {options.target!r}; choose one of {', '.join(TARGETS)}")
    if not root.is_dir():
        raise MigrateError(f"not a directory: {root}")
    modes = sum(bool(x) for x in (options.out, options.in_place, options.branch))
    if modes > 1:
        raise MigrateError("choose one of --out, --in-place and --branch")
    if options.in_place or options.branch:
        if not _is_git_repo(root):
            if options.branch or not options.force:
                raise MigrateError(
                    f"{root} is not a git repository: --in-place needs one (or --force, which "
                    "makes a backup first); --branch always does"
                )
        elif not options.force and not options.dry_run and _git_dirty(root):
            raise MigrateError(
                f"{root} has uncommitted changes; commit or stash them first "
                "(or pass --force, which makes a backup first)"
            )


def _rewrite(result: MigrationResult, options: MigrateOptions) -> None:
    """Compute every file's new text; nothing is written here."""
    target = options.target
    by_file: dict[str, list[Finding]] = {}
    for f in result.scan.findings:
        by_file.setdefault(f.path, []).append(f)
    for rel, findings in sorted(by_file.items()):
        auto = [f for f in findings if f.fix[target]["kind"] == "auto"]
        manual = [f for f in findings if f.fix[target]["kind"] != "auto"]
        if not auto and not (options.annotate and manual):
            continue
        source_path = result.root / rel
        try:
            before = read_exact(source_path)
        except UnicodeDecodeError:
            # e.g. a `# -*- coding: latin-1 -*-` file: scanned in its own encoding, but
            # rewritten it would come back as UTF-8 under a latin-1 declaration
            why = "the file is not UTF-8: not rewritten (convert it to UTF-8, then migrate)"
            result.unapplied += [(f, why) for f in auto]
            continue
        if rel.endswith(".ipynb"):
            after = _rewrite_notebook(result, rel, before, auto, manual, options)
        elif rel.endswith((".py", ".pyw")):
            after = _rewrite_python(result, rel, before, auto, manual, options)
        else:
            outcome = migrate_text(before, auto, target, rel)
            result.edits += outcome.edits
            result.unapplied += outcome.unapplied
            after = outcome.source
        if after != before:
            result.changes.append(FileChange(rel, before, after))


def _rewrite_python(result, rel, source, auto, manual, options, cell=None) -> str:
    outcome = migrate_python(source, auto, options.target, rel, cell)
    result.edits += outcome.edits
    result.unapplied += outcome.unapplied
    text = outcome.source
    if options.annotate:
        leftovers = manual + [f for f, _ in outcome.unapplied]
        if leftovers:
            # Lines moved; find the constructs again in the migrated text.
            rescanned = scan_source_findings(text, rel, options)
            keep = {f.rule for f in leftovers}
            text = annotate_python(text, [f for f in rescanned if f.rule in keep])
    return text


def scan_source_findings(text: str, rel: str, options: MigrateOptions) -> list[Finding]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(rel).name
        path.write_text(text, encoding="utf-8")
        found = scan(path, ScanOptions(target=options.target, select=options.select)).findings
    return [f for f in found if f.fix[options.target]["kind"] != "auto"]


def _rewrite_notebook(result, rel, text, auto, manual, options) -> str:
    sources = notebook_sources(text)
    new_sources = {}
    for number, source in sources.items():
        cell_auto = [f for f in auto if f.cell == number]
        cell_manual = [f for f in manual if f.cell == number]
        if cell_auto or (options.annotate and cell_manual):
            new_sources[number] = _rewrite_python(
                result, rel, source, cell_auto, cell_manual, options, cell=number
            )
    return replace_cell_sources(text, new_sources)


# -- writing -------------------------------------------------------------


def _write(result: MigrationResult, options: MigrateOptions, say: Callable[[str], None]) -> None:
    if options.in_place:
        if options.force:
            result.backup = _backup(result.root)
            say(f"backup written to {result.backup}")
        for change in result.changes:
            atomic_write(result.root / change.path, change.after)
        result.output = result.root
        result.report_dir = result.root / "torchport-report"
    elif options.branch:
        result.branch = options.branch
        result.output = _commit_on_branch(result, options.branch)
        result.report_dir = result.root.parent / f"{result.root.name}-{options.branch}-report"
    else:
        out = (options.out or result.root.parent / f"{result.root.name}-{options.target}").resolve()
        _copy_tree(result.root, out, options.force)
        for change in result.changes:
            atomic_write(out / change.path, change.after)
        result.output = out
        result.report_dir = out / "torchport-report"
    say(f"wrote {len(result.changes)} changed files to {result.output}")


def atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename: old or new, never half."""
    mode = path.stat().st_mode if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".torchport", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _copy_ignore(directory: str, names: list[str]) -> set[str]:
    ignored = {n for n in names if n in SKIP_DIRS and n != "build"}
    ignored |= {n for n in names if (Path(directory) / n / "pyvenv.cfg").exists()}
    return ignored


def _copy_tree(src: Path, out: Path, force: bool) -> None:
    if out == src or src in out.parents:
        raise MigrateError(f"the output {out} must not be inside the repository")
    if out.exists():
        previous = (out / "torchport-report").is_dir()
        if not previous and not force and any(out.iterdir()):
            raise MigrateError(
                f"{out} exists and is not an earlier torchport output; choose --out or --force"
            )
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copytree(src, staging / "tree", symlinks=True, ignore=_copy_ignore)
        os.replace(staging / "tree", out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _backup(root: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = root.parent / f"{root.name}.torchport-backup-{stamp}"
    shutil.copytree(root, backup, symlinks=True)
    return backup


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )


def _is_git_repo(root: Path) -> bool:
    return _git(root, "rev-parse", "--is-inside-work-tree").stdout.strip() == "true"


def _git_dirty(root: Path) -> bool:
    return bool(_git(root, "status", "--porcelain", "--untracked-files=no").stdout.strip())


def _commit_on_branch(result: MigrationResult, branch: str) -> Path:
    root = result.root
    if _git(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0:
        raise MigrateError(f"branch {branch!r} already exists")
    worktree = Path(tempfile.mkdtemp(prefix="torchport-worktree-"))
    shutil.rmtree(worktree)
    added = _git(root, "worktree", "add", "-b", branch, str(worktree))
    if added.returncode != 0:
        raise MigrateError(f"git worktree add failed: {added.stderr.strip()}")
    try:
        prefix = _git(root, "rev-parse", "--show-prefix").stdout.strip()
        for change in result.changes:
            atomic_write(worktree / prefix / change.path, change.after)
        _git(worktree, "add", "-A")
        message = f"torchport: migrate to {result.target} ({len(result.edits)} edits)"
        committed = subprocess.run(
            [
                "git",
                "-C",
                str(worktree),
                "-c",
                "user.name=torchport",
                "-c",
                "user.email=torchport@localhost",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                message,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if committed.returncode != 0:
            raise MigrateError(f"git commit failed: {committed.stderr.strip()}")
    finally:
        _git(root, "worktree", "remove", "--force", str(worktree))
    return root
