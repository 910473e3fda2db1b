"""The codemods' result of an agent run, computed once and read again by the report;
and the scan the plan made, read again by the migration.

An agent run needs the same migration three times: the rewrite node's first overlay,
the deliver node's report, and the front door's summary. Each used to run the scan and
every codemod again. Here the first computation is kept, keyed by the run, the options
that shape it and a fingerprint of the source tree's scannable files, so a later read
gets the same result unless the tree changed under it. A resumed run in a new process
finds nothing here and computes it again, as before.

The plan node scans the tree, and the migration it leads to scanned it again (a quarter
of a rules-only run on small projects): ``save_scan`` keeps the plan's scan in the run's
own folder, which the graph's state names, with the options and the tree's fingerprint
it was made with; ``load_scan`` gives it to the migration while both still hold.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path

from ..sandbox.safepath import digest_regular
from .atomicfile import atomic_write
from .findings import ScanResult, Skipped
from .migration_result import FileChange, MigrateOptions, MigrationResult
from .repowalk import walk_repo
from .scanner import ScanOptions

KEEP = 8  # results held at once: a batch runs jobs in one process, one at a time

_results: OrderedDict[Hashable, MigrationResult] = OrderedDict()
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


def save_scan(path: Path, root: Path, options: ScanOptions, scanned: ScanResult) -> Path:
    """Keep a plan's scan at ``path`` (the run's own folder, which the graph's state names),
    with what it depends on: the migration of the same tree with the same options reads it
    (``load_scan``) instead of scanning again, in this process or a resumed one."""
    record = {
        "root": str(root.resolve()),
        "options": _options_record(options),
        "fingerprint": tree_fingerprint(root.resolve()),
        "scan": scanned.to_json(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(record))
    return path


def load_scan(path: str | Path | None, root: Path, options: ScanOptions) -> ScanResult | None:
    """The scan kept at ``path`` when it is of ``root`` as it is now, with ``options``;
    None otherwise (no file, another tree or options, or the tree changed since)."""
    if not path:
        return None
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    root = root.resolve()
    if record.get("root") != str(root) or record.get("options") != _options_record(options):
        return None
    if record.get("fingerprint") != tree_fingerprint(root):
        return None
    return ScanResult.from_json(record["scan"])


def _options_record(options: ScanOptions) -> dict[str, object]:
    return json.loads(json.dumps(dataclasses.asdict(options)))


def _copy(result: MigrationResult) -> MigrationResult:
    return dataclasses.replace(
        result,
        changes=[FileChange(c.path, c.before, c.after, c.ships, c.written) for c in result.changes],
        edits=list(result.edits),
        unapplied=list(result.unapplied),
    )
