"""Scan a repository: walk it, analyse each file, gather findings, dependencies,
entry points and the files that could not be scanned.

Speed comes from two things: a byte-level prefilter (a file none of whose bytes
match any rule's trigger words is never parsed) and a process pool across files
for trees big enough to pay for it.
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..sandbox.safepath import read_regular
from . import legacy_keyword
from .catalogue import TARGETS, Rule, load_catalogue
from .depfiles import (
    CUDA_ONLY_RULES,
    dependencies_in_setup_py,
    dependencies_in_text,
    requirement_strings,
)
from .entrypoints import EntryPointFinder, may_be_entry_point
from .findings import SNIPPET_CHARS, Dependency, Finding, ScanResult, Skipped
from .notebooks import code_cells
from .pymatch import CompiledRules, analyze_module
from .repowalk import ExcludeError, RepoFile, exclude_spec, file_kind, is_excluded, walk_repo
from .sourcefile import DEFAULT_MAX_BYTES, Unscannable, parse_python, read_text
from .textscan import TextHit, TextRules, scan_lines

LAUNCH_KINDS = frozenset({"shell", "make", "markdown", "docker", "yaml"})
PARALLEL_MIN_FILES = 400  # below this, starting workers costs more than it saves


class ScanError(Exception):
    """The scan as a whole cannot run (bad path, bad options)."""


@dataclass(frozen=True)
class ScanOptions:
    target: str | None = None
    select: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()  # rule codes or prefixes never reported (after ``select``)
    exclude: tuple[str, ...] = ()  # gitignore-style patterns, relative to the root
    max_bytes: int = DEFAULT_MAX_BYTES
    jobs: int = 0  # 0: one per CPU
    prefilter: bool = True
    # With a target: still attach every target's fix to each finding (scan --all-targets);
    # which rules apply is the target's question either way.
    all_targets: bool = False


@dataclass
class FileResult:
    rel: str
    kind: str
    loc: int = 0
    findings: list[Finding] = field(default_factory=list)
    dependencies: list[Dependency] = field(default_factory=list)
    skipped: str | None = None
    launch_text: str | None = None
    python_text: str | None = None


class _Engine:
    """The compiled catalogue, built once per process."""

    def __init__(self, options: ScanOptions) -> None:
        catalogue = load_catalogue()
        rules = catalogue.select(list(options.select))
        skipped = {r.code for r in catalogue.select(list(options.skip))} if options.skip else ()
        rules = [r for r in rules if r.applies_to(options.target) and r.code not in skipped]
        self.options = options
        self.by_code: dict[str, Rule] = {r.code: r for r in rules}
        self.python = CompiledRules.build(rules, list(catalogue))
        self.prefilter = self.python.prefilter() if options.prefilter else None
        self.text = TextRules.build(rules)
        self.dependency_rules = [catalogue.by_code[c] for c in CUDA_ONLY_RULES]
        one = options.target if not options.all_targets else None
        self.targets = (one,) if one else TARGETS

    def finding(
        self,
        code: str,
        rel: str,
        span: tuple[int, int, int, int],
        snippet: str,
        cell: int | None = None,
        in_text: bool = False,
    ) -> Finding:
        return Finding.of(self.by_code[code], rel, span, snippet, cell, self.targets, in_text)

    def text_finding(
        self, hit: TextHit, rel: str, cell: int | None = None, col_offset: int = 0
    ) -> Finding:
        span = (hit.line, hit.col + col_offset, hit.line, hit.end_col + col_offset)
        return self.finding(hit.code, rel, span, hit.snippet, cell, in_text=True)

    # -- per file ---------------------------------------------------------
    def scan_file(self, f: RepoFile) -> FileResult:
        result = FileResult(f.rel, f.kind)
        try:
            if f.size > self.options.max_bytes:
                raise Unscannable(f"larger than {self.options.max_bytes} bytes ({f.size})")
            data = read_regular(f.path, self.options.max_bytes)  # no FIFO, device or link
            result.loc = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
            if f.kind == "python":
                self._python(f, data, result)
            elif f.kind == "notebook":
                self._notebook(f, data, result)
            else:
                self._text(f, data, result)
        except Unscannable as exc:
            result.skipped = str(exc)
            result.findings.clear()
        except OSError as exc:
            result.skipped = f"unreadable: {exc.strerror or exc}"
        return result

    def _python(self, f: RepoFile, data: bytes, result: FileResult) -> None:
        text = read_text(data, "python", self.options.max_bytes).text
        # Keep the text only where it can say how the repo is run (entry points).
        if may_be_entry_point(f.rel, text):
            result.python_text = text
        is_setup = f.rel.rsplit("/", 1)[-1] == "setup.py"
        if self.prefilter is not None and not is_setup and not self.prefilter.search(data):
            return
        try:
            tree = parse_python(text, f.rel)
        except Unscannable:
            # PyTorch 0.3's ``x.cuda(async=True)``: scanned as the migration rewrites it
            # (tools.legacy_keyword), so the findings' positions are the migrated text's
            fixed = legacy_keyword.repaired(text)
            if fixed is None:
                raise
            text, tree = fixed.text, parse_python(fixed.text, f.rel)
        lines = text.splitlines()
        for raw in analyze_module(tree, text, self.python):
            s = raw.span
            result.findings.append(
                self.finding(
                    raw.code, f.rel, (s.line, s.col, s.end_line, s.end_col), _snippet(lines, s.line)
                )
            )
        if is_setup:
            result.dependencies = dependencies_in_setup_py(tree, f.rel, self.dependency_rules)
            for text, node in requirement_strings(tree):
                for hit in scan_lines(text, "setup", self.text, line_offset=node.lineno - 1):
                    offset = node.col_offset + 1  # the quote; columns inside the string
                    result.findings.append(self.text_finding(hit, f.rel, col_offset=offset))

    def _notebook(self, f: RepoFile, data: bytes, result: FileResult) -> None:
        text = read_text(data, "notebook", self.options.max_bytes).text
        cells = code_cells(text)
        trees = []
        for cell in cells:
            try:
                trees.append(parse_python(cell.python, f"{f.rel}#cell{cell.number}"))
            except Unscannable as exc:
                raise Unscannable(f"code cell {cell.number}: {exc}") from exc
        # Cells share one namespace: an import in cell 1 binds names used in cell 4.
        scope = ast.Module(body=[n for t in trees for n in t.body], type_ignores=[])
        result.loc = sum(cell.python.count("\n") for cell in cells)
        for cell, tree in zip(cells, trees, strict=True):
            lines = cell.python.splitlines()
            for raw in analyze_module(tree, cell.python, self.python, scope):
                s = raw.span
                result.findings.append(
                    self.finding(
                        raw.code,
                        f.rel,
                        (s.line, s.col, s.end_line, s.end_col),
                        _snippet(lines, s.line),
                        cell.number,
                    )
                )
            for number, line in cell.shell_lines:
                for hit in scan_lines(line, "shell", self.text, line_offset=number - 1):
                    result.findings.append(self.text_finding(hit, f.rel, cell=cell.number))

    def _text(self, f: RepoFile, data: bytes, result: FileResult) -> None:
        text = read_text(data, f.kind, self.options.max_bytes).text
        for hit in scan_lines(text, f.kind, self.text):
            result.findings.append(self.text_finding(hit, f.rel))
        result.dependencies = dependencies_in_text(f.kind, text, f.rel, self.dependency_rules)
        if f.kind in LAUNCH_KINDS or f.kind == "pyproject":
            result.launch_text = text


def _snippet(lines: list[str], line: int) -> str:
    return lines[line - 1].strip()[:SNIPPET_CHARS] if 0 < line <= len(lines) else ""


_WORKER: _Engine | None = None


def _worker_init(options: ScanOptions) -> None:
    global _WORKER
    _WORKER = _Engine(options)


def _worker_scan(files: list[RepoFile]) -> list[FileResult]:
    assert _WORKER is not None
    return [_WORKER.scan_file(f) for f in files]


def _chunks(items: list[RepoFile], n: int) -> Iterable[list[RepoFile]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def scan(
    path: str | os.PathLike,
    options: ScanOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScanResult:
    """Scan a folder (its files as the repo walk finds them) or one file."""
    options = options or ScanOptions()
    root = _checked(path, options)
    skipped: list[Skipped] = []
    if root.is_file():
        if file_kind(root.name) is None:
            raise ScanError(f"{root}: not a file type torchport scans")
        real = root.resolve()
        return scan_files(real.parent, [real], options, progress)
    try:
        files = list(walk_repo(root, skipped, options.exclude))
    except ExcludeError as exc:
        raise ScanError(str(exc)) from None
    return _scan_list(root, files, skipped, options, progress)


def scan_files(
    root: str | os.PathLike,
    paths: Iterable[str | os.PathLike],
    options: ScanOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScanResult:
    """Scan the given files (a pre-commit hook's), named relative to ``root``, the
    repository's root: findings read as a scan of the whole repository would name them.
    Files of a kind the scanner does not read, and excluded ones, are left out silently;
    a symbolic link is not followed (its target is scanned where it lives)."""
    options = options or ScanOptions()
    root = _checked(root, options).resolve()
    try:
        spec = exclude_spec(options.exclude)
    except ExcludeError as exc:
        raise ScanError(str(exc)) from None
    files, skipped = [], []
    for given in paths:
        path = Path(given).absolute()
        if not path.exists() and not path.is_symlink():
            raise ScanError(f"no such file or directory: {given}")
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            raise ScanError(f"{given}: not inside {root}") from None
        kind = file_kind(rel)
        if kind is None or is_excluded(spec, rel) or path.is_dir():
            continue
        if path.is_symlink():
            skipped.append(Skipped(rel, "symlink (not followed)"))
            continue
        files.append(RepoFile(path, rel, kind, path.stat().st_size))
    return _scan_list(root, files, skipped, options, progress)


def _checked(path: str | os.PathLike, options: ScanOptions) -> Path:
    if options.target is not None and options.target not in TARGETS:
        raise ScanError(f"unknown target {options.target!r}; choose one of {', '.join(TARGETS)}")
    root = Path(path)
    if not root.exists():
        raise ScanError(f"no such file or directory: {root}")
    return root


def _scan_list(
    root: Path,
    files: list[RepoFile],
    skipped: list[Skipped],
    options: ScanOptions,
    progress: Callable[[int, int], None] | None,
) -> ScanResult:
    started = time.perf_counter()
    engine = _Engine(options)
    results = _run(engine, files, options, progress)
    scan_result = _assemble(root, options, results, files, skipped)
    scan_result.elapsed_s = time.perf_counter() - started
    return scan_result


def _run(
    engine: _Engine,
    files: list[RepoFile],
    options: ScanOptions,
    progress: Callable[[int, int], None] | None,
) -> list[FileResult]:
    jobs = options.jobs or os.cpu_count() or 1
    total = len(files)
    if jobs <= 1 or total < PARALLEL_MIN_FILES:
        results = []
        for i, f in enumerate(files, start=1):
            results.append(engine.scan_file(f))
            if progress and (i % 200 == 0 or i == total):
                progress(i, total)
        return results
    chunk = max(50, total // (jobs * 8))
    results = []
    with ProcessPoolExecutor(jobs, initializer=_worker_init, initargs=(options,)) as pool:
        for batch in pool.map(_worker_scan, list(_chunks(files, chunk))):
            results.extend(batch)
            if progress:
                progress(len(results), total)
    return results


def _assemble(
    root: Path,
    options: ScanOptions,
    results: list[FileResult],
    files: list[RepoFile],
    skipped: list[Skipped],
) -> ScanResult:
    out = ScanResult(root=str(root), target=options.target)
    known = {f.rel for f in files if f.kind == "python"}
    entry = EntryPointFinder()
    for r in results:
        if r.skipped:
            out.skipped.append(Skipped(r.rel, r.skipped))
            continue
        out.files_scanned += 1
        out.loc += r.loc
        out.findings.extend(r.findings)
        out.dependencies.extend(r.dependencies)
        if r.python_text:
            entry.python_file(r.rel, r.python_text)
        if r.launch_text:
            if r.kind == "pyproject":
                entry.console_scripts(r.rel, r.launch_text, known)
            else:
                entry.launch_lines(r.rel, r.launch_text, known)
    out.skipped.extend(skipped)
    out.skipped.sort(key=lambda s: s.path)
    out.findings.sort(key=Finding.sort_key)
    out.entrypoints = entry.ranked()
    return out
