"""Migrate a repository to a target: scan it, apply every ``auto`` codemod, and
write the result where the user asked, never harming the original.

Output modes: a migrated copy (default ``PATH-<target>``, built beside it and
swapped in, see ``tools.output``), ``--in-place`` (only from a clean git tree, or
with ``--force``; every rewritten file is backed up in
``torchport-report/backup/`` first and replaced atomically), or ``--branch`` (a
commit on a new branch, made with git plumbing, no checkout). Every run writes
``torchport-report/``. No write follows a symlink; no git command runs the
repository's hooks or configured programs (``tools.gitsafe``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from . import kernel_runtime, legacy_keyword
from .catalogue import TARGETS
from .codemods import Edit, migrate_python
from .codemods.annotate import annotate_python
from .codemods.text import migrate_text
from .findings import Finding, ScanResult
from .fix_safety import withheld_unless_safe
from .gitsafe import Git, GitError
from .migration_memo import key_of, load_scan, remembered
from .migration_result import FileChange, MigrateOptions, MigrationResult
from .notebooks import notebook_sources, replace_cell_sources
from .output import nofollow
from .output.branch import check_branch, commit_on_branch
from .output.destination import Destination, OutputError, check_destination
from .output.in_place import REPORT, backup_folder, check_in_place, write_in_place
from .output.staged import write_staged
from .parallel_rewrite import rewrite_files
from .repowalk import SKIP_DIRS
from .scanner import ScanOptions, scan
from .sourcefile import read_exact

__all__ = [
    "FileChange",
    "MigrateError",
    "MigrateOptions",
    "MigrationResult",
    "computed_migration",
    "migrate",
]


class MigrateError(Exception):
    """The migration cannot start (bad path, unsafe output, dirty tree); nothing was written."""


def migrate(
    path: str | os.PathLike,
    options: MigrateOptions,
    progress: Callable[[str], None] | None = None,
    *,
    scanned: ScanResult | None = None,
) -> MigrationResult:
    """The migration of the tree at ``path``, from ``scanned`` when the caller has the scan
    of this tree with these options (an agent run's plan: ``migration_memo.load_scan``)."""
    say = progress or (lambda message: None)
    started = time.perf_counter()
    root = Path(path).resolve()
    _check_options(root, options)
    say(f"scanning {root}")
    scan_options = scan_options_of(options)
    scanned = scan(root, scan_options) if scanned is None else _own_copy(scanned)
    result = MigrationResult(root, options.target, scanned)
    say(f"rewriting {len({f.path for f in scanned.findings})} files with findings")
    _rewrite(result, options)
    result.elapsed_s = time.perf_counter() - started  # what the report, written next, says
    if not options.dry_run:
        _write(result, options, say)
    result.elapsed_s = time.perf_counter() - started
    return result


def computed_migration(
    path: str | os.PathLike,
    options: MigrateOptions,
    run: str | None = None,
    scan_file: str | Path | None = None,
) -> MigrationResult:
    """``migrate(path, options)`` as a dry run, computed once per ``run`` and source tree.

    The agent graph asks for the codemods' result in its rewrite node, again to write the
    report and again to print the summary; the codemods run only the first time
    (``tools.migration_memo``), from the plan's scan kept in ``scan_file`` while it is of
    this tree and these options. Nothing is written either way.
    """
    options = dataclasses.replace(options, dry_run=True)
    root = Path(path).resolve()

    def compute() -> MigrationResult:
        kept = load_scan(scan_file, root, scan_options_of(options))
        return migrate(root, options, scanned=kept)

    return remembered(key_of(root, options, run), compute)


def _own_copy(scanned: ScanResult) -> ScanResult:
    """The caller's scan with lists of the migration's own (it adds and drops findings)."""
    return dataclasses.replace(
        scanned,
        findings=list(scanned.findings),
        entrypoints=list(scanned.entrypoints),
        dependencies=list(scanned.dependencies),
        skipped=list(scanned.skipped),
    )


def scan_options_of(options: MigrateOptions) -> ScanOptions:
    """The scan a migration with ``options`` starts from: the same rules and files."""
    return ScanOptions(
        target=options.target, select=options.select, skip=options.skip, exclude=options.exclude
    )


def check_options(root: Path, options: MigrateOptions) -> None:
    """Refuse unsafe or contradictory options before anything runs (MigrateError)."""
    _check_options(root, options)


def write_result(
    result: MigrationResult,
    options: MigrateOptions,
    progress: Callable[[str], None] | None = None,
    extra_report_files: Mapping[str, str | bytes] | None = None,
) -> None:
    """Write a computed migration (``result.changes``) and its report where the options say.

    For callers that compute or amend the changes themselves (the agent graph adds
    verified LLM edits to the codemods' output) and write only at the end; their own
    report files (``extra_report_files``, name -> text) are written with the rest, so
    the output appears complete or not at all.
    """
    _write(result, options, progress or (lambda message: None), extra_report_files)


@contextmanager
def _refused() -> Iterator[None]:
    """An unsafe output or a git refusal, as the one-line MigrateError the CLI prints."""
    try:
        yield
    except (OutputError, GitError) as exc:
        raise MigrateError(str(exc)) from None


def destination_of(root: Path, options: MigrateOptions) -> Destination | None:
    """The folder written as a whole: the copy, or the report beside a --branch repository."""
    if options.in_place or options.dry_run:
        return None
    if options.branch:
        name = options.branch.replace("/", "-")
        return Destination((root.parent / f"{root.name}-{name}-report").resolve(), "")
    out = options.out or root.parent / f"{root.name}-{options.target}"
    return Destination(Path(out).resolve(), REPORT)


def _folder_written(root: Path, options: MigrateOptions) -> Destination:
    """destination_of a run that writes a folder: neither --in-place nor --dry-run."""
    dest = destination_of(root, options)
    if dest is None:
        raise MigrateError("an --in-place or --dry-run migration writes no folder")
    return dest


def _check_options(root: Path, options: MigrateOptions) -> None:
    if options.target not in TARGETS:
        raise MigrateError(f"unknown target {options.target!r}; choose one of {', '.join(TARGETS)}")
    if not root.is_dir():
        raise MigrateError(f"not a directory: {root}")
    modes = sum(bool(x) for x in (options.out, options.in_place, options.branch))
    if modes > 1:
        raise MigrateError("choose one of --out, --in-place and --branch")
    with _refused():
        if options.in_place or options.branch:
            _check_git(root, options)
        if options.dry_run:
            return
        if options.branch:
            check_branch(root, options.branch)
        if options.in_place:
            check_in_place(root)
        dest = destination_of(root, options)
        if dest is not None:
            check_destination(root, dest, options.force)


def _check_git(root: Path, options: MigrateOptions) -> None:
    git = Git(root)
    inside = git.run("rev-parse", "--is-inside-work-tree", check=False).stdout.strip() == b"true"
    if not inside:
        if options.branch or not options.force:
            raise MigrateError(
                f"{root} is not a git repository: --in-place needs one (or --force, which "
                "backs up every file it rewrites); --branch always does"
            )
    elif not options.force and not options.dry_run and _git_dirty(git):
        raise MigrateError(
            f"{root} has uncommitted changes; commit or stash them first "
            "(or pass --force; every file torchport rewrites is backed up first)"
        )


def _git_dirty(git: Git) -> bool:
    return bool(git.text("status", "--porcelain", "--untracked-files=no"))


def _rewrite(result: MigrationResult, options: MigrateOptions) -> None:
    """Compute every file's new text; nothing is written here. Files are independent: many
    of them are rewritten in worker processes (``tools.parallel_rewrite``), and the results
    merged in file order, so the outcome is the same either way."""
    target = options.target
    by_file: dict[str, list[Finding]] = {}
    for f in result.scan.findings:
        by_file.setdefault(f.path, []).append(f)
    work = {
        rel: findings
        for rel, findings in sorted(by_file.items())
        if any(f.fix[target]["kind"] == "auto" for f in findings) or (options.annotate and findings)
    }
    for edits, unapplied, change in rewrite_files(result.root, work, options, _rewrite_file):
        result.edits += edits
        result.unapplied += unapplied
        if change is not None:
            result.changes.append(change)
    result.changes += shipped_files(result.root, result.changes)


def shipped_files(root: Path, changes: list[FileChange]) -> list[FileChange]:
    """The files the changes' fixes ship (``FileChange.ships``) or generate
    (``FileChange.written``), each once per folder, as
    new files of the port. One the repository already has is left as it is: its own file
    of that name is what the port's import finds, as it was in the original."""
    added: dict[str, FileChange] = {}
    for change in changes:
        folder = Path(change.path).parent
        files = [*change.written, *((name, None) for name in change.ships)]
        for name, text in files:
            rel = (folder / name).as_posix()
            if rel not in added and not (root / rel).exists():
                after = kernel_runtime.shipped(name) if text is None else text
                added[rel] = FileChange(rel, "", after)
    return list(added.values())


@dataclasses.dataclass
class _FileOutcome:
    """What rewriting one file produced, gathered as its parts go (cells of a notebook)."""

    edits: list = dataclasses.field(default_factory=list)
    unapplied: list[tuple[Finding, str]] = dataclasses.field(default_factory=list)
    in_package: bool = False  # the file is a module of a package (FixContext.in_package)
    root: Path | None = None  # the repository's folder (FixContext.root)
    ships: tuple[str, ...] = ()  # what its fixes ship beside it (FileChange.ships)
    written: tuple[tuple[str, str], ...] = ()  # what they generate beside it (FileChange.written)


def in_package(root: Path, rel: str) -> bool:
    """Whether the file ``rel`` is a module of a package, so what its fixes import from
    beside it is imported relatively (``from . import x``): its folder has an ``__init__.py``
    and is below ``root``. A file in ``root`` itself runs as a script or imports as a
    top-level module (the program's commands run there, with ``root`` first on the path),
    even where ``root`` has an ``__init__.py`` (pytorch/extension-cpp's ``cuda/``), and a
    relative import fails there."""
    below_root = len(Path(rel).parts) > 1
    return below_root and (root / rel).parent.joinpath("__init__.py").is_file()


def _rewrite_file(
    root: Path, rel: str, findings: list[Finding], options: MigrateOptions
) -> tuple[list, list[tuple[Finding, str]], FileChange | None]:
    """One file's edits, unapplied fixes and change (None when its text stays)."""
    target = options.target
    auto = [f for f in findings if f.fix[target]["kind"] == "auto"]
    manual = [f for f in findings if f.fix[target]["kind"] != "auto"]
    outcome = _FileOutcome(in_package=in_package(root, rel), root=root)
    if options.safe_only:
        auto, outcome.unapplied = withheld_unless_safe(auto, target)
    try:
        before = read_exact(root / rel)
    except UnicodeDecodeError:
        # e.g. a `# -*- coding: latin-1 -*-` file: scanned in its own encoding, but
        # rewritten it would come back as UTF-8 under a latin-1 declaration
        why = "the file is not UTF-8: not rewritten (convert it to UTF-8, then migrate)"
        return [], [*outcome.unapplied, *((f, why) for f in auto)], None
    if rel.endswith(".ipynb"):
        after = _rewrite_notebook(outcome, rel, before, auto, manual, options)
    elif rel.endswith((".py", ".pyw")):
        # ``x.cuda(async=True)`` (PyTorch 0.3) parses nowhere since Python 3.7: renamed
        # non_blocking= first, as the scan read it, so the codemods can parse the file
        fixed = legacy_keyword.repaired(before)
        outcome.edits += _keyword_renames(rel, fixed)
        source = fixed.text if fixed is not None else before
        after = _rewrite_python(outcome, rel, source, auto, manual, options)
    else:
        text = migrate_text(before, auto, target, rel)
        outcome.edits += text.edits
        outcome.unapplied += text.unapplied
        after = text.source
    change = (
        FileChange(rel, before, after, outcome.ships, outcome.written) if after != before else None
    )
    return outcome.edits, outcome.unapplied, change


ASYNC_KEYWORD = "async-keyword"  # the rule the renames of ``async=`` are listed under


def _keyword_renames(rel: str, fixed: legacy_keyword.Repaired | None) -> list[Edit]:
    """Each ``async=`` renamed ``non_blocking=``, listed in the report as an edit."""
    if fixed is None:
        return []
    return [
        Edit(ASYNC_KEYWORD, rel, r.line, r.line, r.before, r.after, legacy_keyword.WHY)
        for r in fixed.renames
    ]


def _rewrite_python(
    result: _FileOutcome,
    rel: str,
    source: str,
    auto: list[Finding],
    manual: list[Finding],
    options: MigrateOptions,
    cell: int | None = None,
) -> str:
    outcome = migrate_python(
        source, auto, options.target, rel, cell, result.in_package, root=result.root
    )
    result.edits += outcome.edits
    result.unapplied += outcome.unapplied
    result.ships = tuple(sorted({*result.ships, *outcome.ships}))
    result.written = tuple(sorted({*result.written, *outcome.written}))
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
        found = scan(path, dataclasses.replace(scan_options_of(options), exclude=())).findings
    return [f for f in found if f.fix[options.target]["kind"] != "auto"]


def _rewrite_notebook(
    result: _FileOutcome,
    rel: str,
    text: str,
    auto: list[Finding],
    manual: list[Finding],
    options: MigrateOptions,
) -> str:
    sources = notebook_sources(text)
    new_sources = {}
    earlier: set[str] = set()  # ``import x`` lines of the cells above, which run first
    for number, source in sources.items():
        cell_auto = [f for f in auto if f.cell == number]
        cell_manual = [f for f in manual if f.cell == number]
        if cell_auto or (options.annotate and cell_manual):
            new = _rewrite_python(result, rel, source, cell_auto, cell_manual, options, number)
            new_sources[number] = _without_repeated_imports(new, source, earlier)
        earlier |= set(_IMPORT_LINE.findall(source))
    return replace_cell_sources(text, new_sources)


# ``import torch`` as the codemods add it: a whole line, one module, no alias
_IMPORT_LINE = re.compile(r"^import [\w.]+$", re.MULTILINE)


def _without_repeated_imports(new: str, old: str, earlier: set[str]) -> str:
    """A cell's rewrite less the ``import x`` lines it added that a cell above already has:
    cells are migrated one at a time, but run in one namespace, top to bottom."""
    had = set(_IMPORT_LINE.findall(old))
    lines = new.splitlines(keepends=True)
    kept: list[str] = []
    dropping = False
    for line in lines:
        bare = line.rstrip("\r\n")
        if bare in earlier and bare not in had and _IMPORT_LINE.fullmatch(bare):
            dropping = True  # and the blank line the import brought with it
            continue
        if dropping and not bare.strip() and (not kept or not kept[-1].strip()):
            continue
        dropping = False
        kept.append(line)
    return "".join(kept)


# -- writing -------------------------------------------------------------


def _write(
    result: MigrationResult,
    options: MigrateOptions,
    say: Callable[[str], None],
    extra_report_files: Mapping[str, str | bytes] | None = None,
) -> None:
    _leave_unwritable(result, say)
    extra = dict(extra_report_files or {})
    with _refused():
        if options.in_place:
            _write_in_place(result, say, extra)
        elif options.branch:
            _write_branch(result, options, options.branch, say, extra)
        else:
            _write_folder(result, options, say, extra, copy=True)
    say(f"wrote {len(result.changes)} changed files to {result.output}")


def _report_files(result: MigrationResult, extra: dict[str, str | bytes]) -> dict[str, str | bytes]:
    from .report.migration import migration_report_files

    return {**migration_report_files(result), **extra}


def _write_in_place(
    result: MigrationResult, say: Callable[[str], None], extra: dict[str, str | bytes]
) -> None:
    root = result.root
    check_in_place(root)
    backup = backup_folder(root)
    result.output = root
    result.report_dir = root / REPORT
    if any((root / c.path).is_file() for c in result.changes):
        result.backup = root / backup
    changes = {c.path: c.after for c in result.changes}
    if write_in_place(root, changes, _report_files(result, extra), backup):
        say(f"backup of every rewritten file: {result.backup}")


def _write_branch(
    result: MigrationResult,
    options: MigrateOptions,
    branch: str,
    say: Callable[[str], None],
    extra: dict[str, str | bytes],
) -> None:
    check_destination(result.root, _folder_written(result.root, options), options.force)
    result.branch = branch
    result.output = result.root
    message = f"torchport: migrate to {result.target} ({len(result.edits)} edits)"
    files = {c.path: c.after.encode("utf-8", "surrogateescape") for c in result.changes}
    commit_on_branch(result.root, branch, files, message)
    _write_folder(result, options, say, extra, copy=False)  # the report beside the repository


def _write_folder(
    result: MigrationResult,
    options: MigrateOptions,
    say: Callable[[str], None],
    extra: dict[str, str | bytes],
    copy: bool,
) -> None:
    """Stage the migrated copy (or, without ``copy``, the report alone) and swap it in."""
    dest = _folder_written(result.root, options)
    if copy:
        result.output = dest.folder
    result.report_dir = dest.report_dir
    texts = _report_files(result, extra)

    def fill(tree: Path) -> None:
        if copy:
            shutil.copytree(result.root, tree, symlinks=True, ignore=_copy_ignore)
            for change in result.changes:
                nofollow.write_text(tree, change.path, change.after)
        else:
            tree.mkdir()
        for name, text in texts.items():
            nofollow.write_text(tree, dest.in_report(name), text)

    write_staged(dest, result.root, result.target, fill, options.force, say)


def _copy_ignore(directory: str, names: list[str]) -> set[str]:
    ignored = {n for n in names if n in SKIP_DIRS and n != "build"}
    ignored |= {n for n in names if (Path(directory) / n / "pyvenv.cfg").exists()}
    return ignored


def _leave_unwritable(result: MigrationResult, say: Callable[[str], None]) -> None:
    """A change whose path crosses a symlink is not written: its fixes become unapplied."""
    for change in list(result.changes):
        why = nofollow.symlink_on_path(result.root, change.path)
        if why is None:
            continue
        say(f"not written: {why}")
        result.changes.remove(change)
        result.edits = [e for e in result.edits if e.path != change.path]
        already = {id(f) for f, _ in result.unapplied}
        result.unapplied += [
            (f, f"not written: {why}")
            for f in result.scan.findings
            if f.path == change.path
            and f.fix[result.target]["kind"] == "auto"
            and id(f) not in already
        ]
