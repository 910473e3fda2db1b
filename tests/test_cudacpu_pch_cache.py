"""The CPU runner's precompiled preludes (about 800 MB each, one per torchport install and
version) are evicted but the most recently used, so a machine does not fill its disk with
them; one another process is building stays."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from torchport.sandbox.cudacpu import pch


def _prelude(root: Path, key: str, used: float) -> Path:
    folder = root / key
    (folder / "cudacpu").mkdir(parents=True)
    (folder / pch.GCH).write_bytes(b"gch")
    lock = root / f"{key}.lock"
    lock.touch()
    os.utime(lock, (used, used))
    return folder


def test_all_but_the_most_recently_used_preludes_go(tmp_path: Path) -> None:
    old = [_prelude(tmp_path, f"k{i}", used=1_000_000 + i) for i in range(5)]
    new = _prelude(tmp_path, "new", used=500)  # just built: never its own victim
    gone = pch.evict(new, keep=2)
    assert sorted(gone) == old[:3]
    assert not any(p.exists() or (tmp_path / f"{p.name}.lock").exists() for p in old[:3])
    assert all((p / pch.GCH).is_file() for p in (*old[3:], new))


def test_a_prelude_being_built_stays(tmp_path: Path) -> None:
    building = _prelude(tmp_path, "building", used=1)
    other = _prelude(tmp_path, "other", used=2)
    new = _prelude(tmp_path, "new", used=3)
    with open(tmp_path / "building.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        gone = pch.evict(new, keep=0)
    assert gone == [other] and (building / pch.GCH).is_file()
