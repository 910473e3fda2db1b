"""tools.atomicfile: a reader sees the old file or the new one, never half, and a failed
write leaves nothing of itself behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from torchport.tools.atomicfile import TEMP_SUFFIX, atomic_write

# A child whose files may not grow past 4 KiB: the kernel fails the write itself (EFBIG),
# as a full disk would, halfway through the new contents.
FAIL_MID_WRITE = """
import resource, signal, sys
from pathlib import Path
from torchport.tools.atomicfile import atomic_write
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    atomic_write(Path(sys.argv[1]), b"new" * 100_000)
except OSError as exc:
    print(exc.errno)
"""


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old contents\n")
    child = subprocess.run(
        [sys.executable, "-c", FAIL_MID_WRITE, str(target)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip(), f"the write did not fail: {child.stderr}"
    assert target.read_text() == "old contents\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_the_new_contents_replace_the_old_and_keep_its_permissions(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("old")
    target.chmod(0o600)
    atomic_write(target, "new \udcff", sync_folder=True)  # a byte read with surrogateescape
    assert target.read_bytes() == b"new \xff"
    assert target.stat().st_mode & 0o777 == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(TEMP_SUFFIX)]


def test_an_explicit_mode_wins_and_a_new_file_gets_the_usual_permissions(tmp_path):
    fresh = tmp_path / "fresh.txt"
    atomic_write(fresh, b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    atomic_write(fresh, b"y", mode=0o640)
    assert fresh.stat().st_mode & 0o777 == 0o640


def test_a_symlink_at_the_name_is_replaced_never_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not ours")
    link = tmp_path / "out" / "summary.md"
    link.parent.mkdir()
    link.symlink_to(elsewhere)
    atomic_write(link, "summary")
    assert not link.is_symlink() and link.read_text() == "summary"
    assert elsewhere.read_text() == "not ours"


def test_a_missing_folder_is_an_error_not_a_new_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "absent" / "x.json", "{}")
    assert list(tmp_path.iterdir()) == []
