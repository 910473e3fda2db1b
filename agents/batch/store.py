"""A batch's memory on disk: finished records, the journal, and what the batch was asked.

``results/NAME.json`` is written atomically (temporary file, then rename) only
once a repository's job has returned, so after a kill a record is either whole
or absent: present means done, and a resumed batch does not redo it. The
journal (``journal.jsonl``, one JSON object per line, appended by the driver
alone) tells how each repository got there: when it was started, by which batch
process, how many times, and when it finished.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torchport.tools.atomicfile import atomic_write

from .job import JobRecord
from .sources import Source

# What a finished record depends on: change one and the old records mean something else.
IDENTITY = ("target", "verify", "steps", "llm")


class StoreError(RuntimeError):
    """DIR cannot be used for this batch (another batch's, or one running now)."""


class Store:
    def __init__(self, out_dir: Path) -> None:
        self.root = out_dir
        self.results = out_dir / "results"
        self.journal_path = out_dir / "journal.jsonl"
        self.identity_path = out_dir / "batch.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold DIR for this batch; a second ``torchport batch`` on it stops at once."""
        self.results.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise StoreError(f"another torchport batch is running on {self.root}") from exc
                # a file system without locks (some network mounts): carry on unguarded
            yield

    def check_fresh(self) -> None:
        """Refuse a DIR that holds something else: a batch writes only into its own folder."""
        if not self.root.is_dir() or self.identity_path.exists():
            return
        if any(p.name not in (".lock", "results") for p in self.root.iterdir()):
            raise StoreError(f"{self.root} exists and is not a torchport batch folder")

    def check_identity(self, settings: dict[str, Any]) -> None:
        """Refuse a DIR whose records were made for another target or budget."""
        wanted = {k: settings.get(k) for k in IDENTITY}
        if self.identity_path.is_file():
            had = json.loads(self.identity_path.read_text())
            changed = [k for k in IDENTITY if had.get(k) != wanted[k]]
            if changed:
                was = ", ".join(f"{k}={had.get(k)!r}" for k in changed)
                raise StoreError(
                    f"{self.root} holds a batch made with {was}; use another --out, "
                    "the same options, or remove that folder"
                )
        else:
            _atomic_json(self.identity_path, wanted)

    def finished(self, sources: list[Source]) -> dict[str, JobRecord]:
        """Records already on disk for these sources (a record made for another source, ref
        or entry command is stale: that repository is migrated again)."""
        done: dict[str, JobRecord] = {}
        for source in sources:
            path = self.results / f"{source.name}.json"
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            made = (record.get("source"), record.get("ref"), record.get("entry"))
            if made == (source.location, source.ref, source.entry):
                done[source.name] = record
        return done

    def save(self, record: JobRecord) -> None:
        _atomic_json(self.results / f"{record['name']}.json", record)

    def journal(self) -> list[dict[str, Any]]:
        if not self.journal_path.is_file():
            return []
        lines = self.journal_path.read_text(encoding="utf-8").splitlines()
        out = []
        for line in lines:
            with contextlib.suppress(ValueError):  # a line cut short by a kill
                out.append(json.loads(line))
        return out

    def log(self, event: str, name: str, **extra: Any) -> None:
        entry = {
            "event": event,
            "name": name,
            **extra,
            "batch_pid": os.getpid(),
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        line = json.dumps(entry) + "\n"
        fd = os.open(self.journal_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size and not _ends_with_newline(fd):
                line = "\n" + line  # the previous batch was killed mid-line
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def reconcile(self, done: dict[str, JobRecord]) -> None:
        """Journal a finish the last batch saved but was killed before journaling."""
        logged = {e["name"] for e in self.journal() if e.get("event") == "finished"}
        for name in sorted(set(done) - logged):
            self.log("finished", name, verdict=done[name].get("verdict"), recovered=True)


def _ends_with_newline(fd: int) -> bool:
    return os.pread(fd, 1, os.fstat(fd).st_size - 1) == b"\n"


def _atomic_json(path: Path, data: Mapping[str, object]) -> None:
    """A record a resumed batch trusts: its rename is made durable too."""
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n", sync_folder=True)
