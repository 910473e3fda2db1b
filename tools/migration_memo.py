"""The codemods' result of an agent run, computed once and read again by the report;
and the scan the plan made, read again by the migration.

An agent run needs the same migration three times: the rewrite node's first overlay,
the deliver node's report, and the front door's summary. Each used to run the scan and
every codemod again. Here the first computation is kept, keyed by the run, the options
that shape it and a fingerprint of the source tree's scannable files, so a later read
gets the same result unless the tree changed under it. A resumed run in a new process
finds nothing here and computes it again, as before.

The plan node scans the tree, and the migration it leads to scanned it again (a quarter
of a rules-only run on small projects): ``remembered_scan`` keeps the plan's scan under
the same kind of key: the run, the options and the tree's fingerprint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path

from ..sandbox.safepath import digest_regular
from .findings import ScanResult, Skipped
from .migration_result import FileChange, MigrateOptions, MigrationResult
from .repowalk import walk_repo
from .scanner import ScanOptions, scan

KEEP = 8  # results held at once: a batch runs jobs in one process, one at a time

_results: OrderedDict[Hashable, MigrationResult] = OrderedDict()
_scans: OrderedDict[Hashable, ScanResult] = OrderedDict()
_lock = threading.Lock()


def tree_fingerprint(root: Path) -> str:
    """A digest of every file the scan reads (name and bytes) and of what it skipped."""
    digest = hashlib.blake2b(digest_size=20)
    skipped: list[Skipped] = []
    for file in walk_repo(root, skipped):
        digest.update(file.rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            digest_regular(file.path, digest)  # streamed: a file of any size, not held whole
        except OSError as exc:
            digest.update(f"unreadable: {exc.strerror}".encode())
        digest.update(b"\0")
    for skip in skipped:
        digest.update(repr(skip).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def key_of(root: Path, options: MigrateOptions, run: str | None) -> Hashable:
    """What a migration's result depends on; the output options (where, how) do not count."""
    return (
        run,
        str(root),
        options.target,
        options.select,
        options.skip,
        options.exclude,
        options.annotate,
        options.safe_only,
        tree_fingerprint(root),
    )


def remembered(key: Hashable, compute: Callable[[], MigrationResult]) -> MigrationResult:
    """A copy of the result kept under ``key``, computing (and keeping) it the first time.

    Callers change what they get (the deliver node puts the final overlay in ``changes``,
    the writer records where it wrote): each gets its own lists, the kept one stays whole.
    """
    with _lock:
        kept = _results.get(key)
        if kept is not None:
            _results.move_to_end(key)
    if kept is None:
        kept = compute()
        with _lock:
            _results[key] = kept
            while len(_results) > KEEP:
                _results.popitem(last=False)
    return _copy(kept)


def remembered_scan(root: Path, options: ScanOptions, run: str) -> ScanResult:
    """``scan(root, options)``, or a copy of the same scan of the same tree made earlier in
    this process for the same ``run`` (the plan's, when the migration asks)."""
    root = root.resolve()
    key = (run, str(root), options, tree_fingerprint(root))
    with _lock:
        kept = _scans.get(key)
        if kept is not None:
            _scans.move_to_end(key)
    if kept is None:
        kept = scan(root, options)
        with _lock:
            _scans[key] = kept
            while len(_scans) > KEEP:
                _scans.popitem(last=False)
    return dataclasses.replace(
        kept,
        findings=list(kept.findings),
        entrypoints=list(kept.entrypoints),
        dependencies=list(kept.dependencies),
        skipped=list(kept.skipped),
    )


def forget() -> None:
    """Drop every kept result (tests, and a long-lived process that wants its memory back)."""
    with _lock:
        _results.clear()
        _scans.clear()


def _copy(result: MigrationResult) -> MigrationResult:
    return dataclasses.replace(
        result,
        changes=[FileChange(c.path, c.before, c.after) for c in result.changes],
        edits=list(result.edits),
        unapplied=list(result.unapplied),
    )
