"""Nothing outside the output is ever deleted or written (issue #12, item 1 and part of 4).

Real CLI runs (in process, and as a subprocess where a kill or the exit status
matters), real folders, real symlinks, real git; no mocks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from cli_process import migrate_process
from torchport.cli.main import main
from torchport.tools.migrate import (
    FileChange,
    MigrateError,
    MigrateOptions,
    check_options,
    migrate,
    write_result,
)
from torchport.tools.output.nofollow import SymlinkInPath, write_text

PROGRAM = "import torch\n\nx = torch.zeros(3).cuda()\nprint(x.sum().item())\n"
MIGRATED = 'x = torch.zeros(3).to("tpu")'
NO_VERIFY = ["-t", "tpu", "--no-verify", "-q", "--exit-zero"]


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every entry under root, byte for byte (links by their target), never following one."""
    found = {}
    for here, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(here, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = b"-> " + os.fsencode(os.readlink(path))
            elif path.is_file():
                found[rel] = path.read_bytes()
    return found


def _source(folder: Path, files: dict[str, str] | None = None) -> Path:
    for rel, text in (files or {"train.py": PROGRAM}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _committed(repo: Path) -> Path:
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


def _refused(capsys, *args: str) -> str:
    """Run migrate in process; it must exit 2 with one line of error. Returns the line."""
    assert main(["migrate", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchport: error: ") and "\n" not in err, err
    return err


# -- where the output may go -------------------------------------------------------


def test_out_above_the_source_is_refused_and_nothing_is_deleted(tmp_path):
    """The reported data loss: --out PARENT_OF_REPO --force used to delete the parent."""
    parent = tmp_path / "parent"
    repo = _source(parent / "repo")
    _source(parent / "sibling", {"notes.txt": "someone else's work\n"})
    before = _snapshot(tmp_path)
    env = {**os.environ}
    done = migrate_process(str(repo), *NO_VERIFY, "--out", str(parent), "--force", env=env)
    _, err = done.communicate(timeout=120)
    assert done.returncode == 2, err
    assert err.strip().splitlines() == [
        f"torchport: error: the output {parent} contains the source {repo}: replacing it "
        "would delete the source; choose another --out"
    ]
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "where",
    ["parent", "parent-forced", "source", "inside", "link-to-parent", "root"],
)
def test_out_that_is_the_source_inside_it_or_above_it_is_refused(tmp_path, capsys, where):
    parent = tmp_path / "parent"
    repo = _source(parent / "repo", {"train.py": PROGRAM, "sub/util.py": "x = 1\n"})
    (tmp_path / "link").symlink_to(parent)
    out = {
        "parent": parent,
        "parent-forced": parent,
        "source": repo,
        "inside": repo / "sub",
        "link-to-parent": tmp_path / "link",
        "root": Path("/"),
    }[where]
    before = _snapshot(tmp_path)
    force = ["--force"] if where == "parent-forced" else []
    err = _refused(capsys, str(repo), *NO_VERIFY, "--out", str(out), *force)
    assert re.search("is the source itself|contains the source|is inside the source", err)
    assert _snapshot(tmp_path) == before


def test_out_that_is_a_file_or_a_foreign_folder_is_refused_even_with_force(tmp_path, capsys):
    repo = _source(tmp_path / "repo")
    (tmp_path / "a-file").write_text("not a folder\n")
    foreign = _source(tmp_path / "foreign", {"precious.txt": "keep me\n"})
    (foreign / "torchport-report").mkdir()  # a report folder alone proves nothing
    before = _snapshot(tmp_path)
    err = _refused(capsys, str(repo), *NO_VERIFY, "--out", str(tmp_path / "a-file"), "--force")
    assert "exists and is not a folder" in err
    err = _refused(capsys, str(repo), *NO_VERIFY, "--out", str(foreign), "--force")
    assert "is not a torchport output" in err and "--force never replaces" in err
    assert _snapshot(tmp_path) == before and (foreign / "torchport-report").is_dir()


def test_an_empty_folder_is_a_fine_output(tmp_path):
    repo = _source(tmp_path / "repo")
    (tmp_path / "empty").mkdir()
    result = migrate(repo, MigrateOptions(target="tpu", out=tmp_path / "empty"))
    assert MIGRATED in (result.output / "train.py").read_text()


def test_an_earlier_output_is_replaced_deleting_only_what_torchport_wrote(tmp_path, capsys):
    repo = _source(tmp_path / "repo", {"train.py": PROGRAM, "old.py": "x = 1\n"})
    out = tmp_path / "out"
    migrate(repo, MigrateOptions(target="tpu", out=out))
    (repo / "old.py").unlink()  # gone from the source: the next output must not keep it
    migrate(repo, MigrateOptions(target="xla", out=out))
    assert "torch_xla" in (out / "train.py").read_text() and not (out / "old.py").exists()

    (out / "mine.txt").write_text("my notes\n")  # something torchport did not write
    err = _refused(capsys, str(repo), *NO_VERIFY, "--out", str(out), "--force")
    assert "1 file(s) torchport did not write: mine.txt" in err
    assert (out / "mine.txt").read_text() == "my notes\n"
    (out / "mine.txt").unlink()

    (out / "train.py").write_text("# hand-tuned\n")  # a file torchport wrote, edited since
    err = _refused(capsys, str(repo), *NO_VERIFY, "--out", str(out))
    assert "changed since torchport wrote them: train.py; pass --force" in err
    assert (out / "train.py").read_text() == "# hand-tuned\n"
    assert main(["migrate", str(repo), *NO_VERIFY, "--out", str(out), "--force"]) == 0
    assert MIGRATED in (out / "train.py").read_text()
    assert not [p.name for p in tmp_path.iterdir() if ".torchport-" in p.name]


def test_the_output_of_another_source_is_not_replaced(tmp_path, capsys):
    one, other = _source(tmp_path / "one"), _source(tmp_path / "other")
    out = tmp_path / "out"
    migrate(one, MigrateOptions(target="tpu", out=out))
    before = _snapshot(out)
    err = _refused(capsys, str(other), *NO_VERIFY, "--out", str(out), "--force")
    assert f"holds torchport's output of another source ({one})" in err
    assert _snapshot(out) == before


def test_leftovers_of_killed_writes_are_swept_and_nothing_else(tmp_path):
    repo = _source(tmp_path / "repo")
    out = tmp_path / "out"
    stale = tmp_path / ".out.torchport-staging-dead01"  # a killed writer's staging folder
    _source(stale, {"tree/train.py": "half\n"})
    (stale / ".torchport-staging.json").write_text(json.dumps({"destination": str(out)}))
    lookalike = _source(tmp_path / ".out.torchport-staging-user01", {"keep.txt": "mine\n"})
    migrate(repo, MigrateOptions(target="tpu", out=tmp_path / "earlier"))
    (tmp_path / "earlier").rename(tmp_path / ".out.torchport-old-dead02")  # killed mid-swap
    old_lookalike = _source(tmp_path / ".out.torchport-old-user02", {"keep.txt": "mine\n"})
    for name in ("staging-bare03", "old-bare04"):  # killed before a marker: no file in them
        (tmp_path / f".out.torchport-{name}" / "torchport-report").mkdir(parents=True)
    migrate(repo, MigrateOptions(target="tpu", out=out))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["repo", "out", lookalike.name, old_lookalike.name]
    )
    assert (lookalike / "keep.txt").read_text() == (old_lookalike / "keep.txt").read_text()


# -- a kill while writing, then --resume -------------------------------------------

VOLATILE = [
    (re.compile(rb"\d{8}-\d{6}-[0-9a-f]{6}"), b"RUN"),  # run ids
    (re.compile(rb'("elapsed_s": )[0-9.e-]+'), rb"\1T"),
    (re.compile(rb"; [0-9.]+ s\n"), b"; T s\n"),  # verification.md's time
    (re.compile(rb"\b[0-9.]+ s(?=</li>|,)"), b"T s"),  # index.html's times
    (re.compile(rb'("[^"]*torchport-report/[^"]*": )"[0-9a-f]{64}"'), rb'\1"H"'),  # marker
]


def _comparable(root: Path) -> dict[str, bytes]:
    """The tree with run ids, times and its own path (and the hashes they change) left out."""
    found = {}
    for rel, data in _snapshot(root).items():
        data = data.replace(os.fsencode(root), b"OUT")
        for pattern, replacement in VOLATILE:
            data = pattern.sub(replacement, data)
        found[rel] = data
    return found


def _many_files(folder: Path) -> Path:
    """A program and enough data files that copying them takes a moment."""
    _source(folder)
    data = folder / "data"
    data.mkdir()
    for i in range(1500):
        (data / f"shard{i:04}.bin").write_bytes(os.urandom(512))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["staging", "old"])
def test_a_kill_while_writing_leaves_old_or_new_and_resume_finishes(
    tmp_path, monkeypatch, capsys, moment
):
    """Killed once the new output is being built, or once the old one is moved aside (the
    kill may land later still: every state it can leave must be old or new, never half)."""
    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path / "home"))
    repo = _many_files(tmp_path / "repo")
    out, whole = tmp_path / "out", tmp_path / "whole"
    assert main(["migrate", str(repo), *NO_VERIFY, "-t", "xla", "--out", str(whole)]) == 0
    assert main(["migrate", str(repo), *NO_VERIFY, "--out", str(out)]) == 0  # the old (tpu)
    old, new = _comparable(out), _comparable(whole)
    assert old != new

    killed = migrate_process(
        str(repo), "-t", "xla", "--no-verify", "--out", str(out), env={**os.environ}
    )
    deadline = time.monotonic() + 120
    while killed.poll() is None and time.monotonic() < deadline:
        if any(f".out.torchport-{moment}-" in p.name for p in tmp_path.iterdir()):
            os.killpg(killed.pid, signal.SIGKILL)
            break
        time.sleep(0.002)
    _, err = killed.communicate(timeout=60)
    run_id = re.search(r"torchport: run (\S+)", err).group(1)
    left = _comparable(out) if out.exists() else None
    assert left in (None, old, new), "a kill left a partial output"

    capsys.readouterr()
    assert main(["migrate", "--resume", run_id, "-q", "--exit-zero"]) == 0, capsys.readouterr()
    assert _comparable(out) == new
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "out", "repo", "whole"]


# -- symlinks in the repository ----------------------------------------------------


def test_in_place_refuses_a_committed_report_symlink_before_any_work(tmp_path, capsys):
    outside = _source(tmp_path / "outside", {"changes.patch": "precious\n"})
    repo = _source(tmp_path / "repo")
    (repo / "torchport-report").symlink_to(outside)
    _committed(repo)
    before = _snapshot(tmp_path)
    err = _refused(capsys, str(repo), *NO_VERIFY, "--in-place")
    assert f"{repo}/torchport-report is a symlink: torchport never writes through one" in err
    _refused(capsys, str(repo), *NO_VERIFY, "--in-place", "--force")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("mode", ["in_place", "out"])
def test_a_change_through_a_symlink_is_not_written(tmp_path, mode):
    """Codemods never follow links; a change for such a path (an LLM's) is refused too."""
    outside = _source(tmp_path / "outside", {"pkg/model.py": PROGRAM, "solo.py": PROGRAM})
    repo = _source(tmp_path / "repo")
    (repo / "pkg").symlink_to(outside / "pkg")
    (repo / "solo.py").symlink_to(outside / "solo.py")
    before = _snapshot(outside)
    out = tmp_path / "out" if mode == "out" else None
    options = MigrateOptions(target="tpu", in_place=mode == "in_place", force=True, out=out)
    result = migrate(repo, MigrateOptions(target="tpu", dry_run=True))
    result.changes += [
        FileChange(rel, PROGRAM, "hijacked\n") for rel in ("pkg/model.py", "solo.py")
    ]
    said: list[str] = []
    write_result(result, options, said.append)
    assert _snapshot(outside) == before
    assert [c.path for c in result.changes] == ["train.py"]
    assert MIGRATED in (result.output / "train.py").read_text()
    assert "not written: pkg is a symlink: torchport does not write through symlinks" in said
    assert "not written: solo.py is a symlink: torchport does not write through symlinks" in said


def test_the_writer_refuses_every_symlink_below_its_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    base = tmp_path / "base"
    (base / "a").mkdir(parents=True)
    (base / "a" / "b").symlink_to(outside)
    (base / "f.txt").symlink_to(outside / "f.txt")
    for rel in ("a/b/x.txt", "a/b/c/x.txt", "f.txt"):
        with pytest.raises(SymlinkInPath):
            write_text(base, rel, "through a link\n")
    assert list(outside.iterdir()) == []


# -- --in-place backups --------------------------------------------------------------


def test_in_place_backs_up_an_untracked_file_with_its_bytes_and_mode(tmp_path, capsys):
    repo = _committed(_source(tmp_path / "repo", {"notes.txt": "tracked\n"}))
    untracked = repo / "extra.py"
    untracked.write_bytes(PROGRAM.replace("\n", "\r\n").encode())
    untracked.chmod(0o751)
    original = untracked.read_bytes()
    assert main(["migrate", str(repo), *NO_VERIFY, "--in-place"]) == 0
    printed = capsys.readouterr().out
    backup = Path(re.search(r"^backup: (.+)$", printed, re.MULTILINE).group(1))
    assert backup.parent == repo / "torchport-report" / "backup"
    assert (backup / "extra.py").read_bytes() == original
    assert stat.S_IMODE((backup / "extra.py").stat().st_mode) == 0o751
    assert MIGRATED.encode() in untracked.read_bytes()
    assert stat.S_IMODE(untracked.stat().st_mode) == 0o751
    record = json.loads((repo / "torchport-report" / "changes.json").read_text())
    assert record["backup"] == str(backup)


def test_force_on_a_non_git_tree_backs_up_inside_not_beside_it(tmp_path):
    repo = _source(tmp_path / "repo")
    with pytest.raises(MigrateError, match="not a git repository"):
        check_options(repo, MigrateOptions(target="tpu", in_place=True))
    result = migrate(repo, MigrateOptions(target="tpu", in_place=True, force=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]
    assert (result.backup / "train.py").read_text() == PROGRAM
    assert result.backup.parent == repo / "torchport-report" / "backup"
