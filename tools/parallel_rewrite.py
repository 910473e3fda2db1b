"""Many files of a migration rewritten in worker processes, merged back in file order.

Rewriting one file never reads another, so a large repository's files can go to a
process pool (forked: the workers start with the catalogue and the codemods already
imported). Results come back in the order the files were given, and findings travel as
their index in the file's list, so the merged result is the one a single process makes:
the same edits, the same unapplied findings (the very objects of the scan), the same
changes. Few or small files are rewritten here: starting workers costs more than it saves.

``TORCHPORT_MIGRATE_JOBS``: how many processes. Off (1) unless set: on the 2-core machine
it was measured on (shared, loaded), two workers were no faster than one on the eval
suite's sources three times over (108 files, 26-29 s either way), so the pool is there
for a machine with cores to spare, not the default.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from .findings import Finding

MIN_FILES = 8  # below this many files, or
MIN_BYTES = 200_000  # this much source (about 5k lines), one process does it faster

Rewrite = Callable[[Path, str, list[Finding], Any], tuple[list, list[tuple[Finding, str]], Any]]
Outcome = tuple[list, list[tuple[Finding, str]], Any]

_JOB: tuple[Path, dict[str, list[Finding]], Any, Rewrite] | None = None  # what a fork inherits


def jobs() -> int:
    """Worker processes to use; 1 means none."""
    try:
        return max(1, int(os.environ.get("TORCHPORT_MIGRATE_JOBS", "1")))
    except ValueError:
        return 1


def rewrite_files(
    root: Path, work: dict[str, list[Finding]], options: Any, rewrite: Rewrite
) -> Iterator[Outcome]:
    """``rewrite(root, rel, findings, options)`` for every file of ``work``, in its order."""
    workers = min(jobs(), len(work))
    if workers <= 1 or not _worth_it(root, work) or "fork" not in _methods():
        for rel, findings in work.items():
            yield rewrite(root, rel, findings, options)
        return
    global _JOB
    _JOB = (root, work, options, rewrite)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            for rel, (edits, unapplied, change) in zip(
                work, pool.map(_in_worker, work, chunksize=1), strict=True
            ):
                mine = work[rel]
                yield edits, [(mine[i], why) for i, why in unapplied], change
    finally:
        _JOB = None


def _in_worker(rel: str) -> tuple[list, list[tuple[int, str]], Any]:
    assert _JOB is not None, "a worker forked without its job"
    root, work, options, rewrite = _JOB
    findings = work[rel]
    edits, unapplied, change = rewrite(root, rel, findings, options)
    index = {id(f): i for i, f in enumerate(findings)}
    return edits, [(index[id(f)], why) for f, why in unapplied], change


def _worth_it(root: Path, work: dict[str, list[Finding]]) -> bool:
    if len(work) < MIN_FILES:
        return False
    size = 0
    for rel in work:
        try:
            size += (root / rel).stat().st_size
        except OSError:
            continue
    return size >= MIN_BYTES


def _methods() -> list[str]:
    return multiprocessing.get_all_start_methods()
