"""Limits that hold after torchport is SIGKILLed (issue 12, part 3), on real backends.

A driver process (torchport, or a few lines calling ``run_isolated``) starts a
program that spreads out: a child, a child that calls setsid(), a double-forked
daemon, each writing a heartbeat file into scratch every 0.1 s. Once every
heartbeat is there, only the driver is SIGKILLed (not its session: the run must
die because torchport did), and within a bounded time nothing of the run may be
left: no process carrying the run's marker in its command line or environment,
no heartbeat still beating, no cgroup or container named for the driver, and no
scratch folder (the watchdog deletes it, or the next start's sweep does).
Backends this machine lacks are skipped with the reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_isolation
from cli_process import migrate_process
from torchport.sandbox.isolation import docker, owner
from torchport.sandbox.isolation.cgroup import make_cgroup, torchport_cgroups
from torchport.sandbox.isolation.sweep import sweep

backend = test_isolation.backend  # each backend, skipped with the reason where absent
KINDS = ("main", "child", "setsid", "daemon")
# Spreads out, then beats until killed; every process keeps the marker (argv[1]) in its cmdline.
PROGRAM = textwrap.dedent(
    """
    import os, time

    def beat(kind):
        name = f"hb-{kind}-{os.getpid()}"
        while True:
            with open(name, "w") as fh:
                fh.write(str(time.time()))
            time.sleep(0.1)

    if os.fork() == 0:
        os.setsid()
        beat("setsid")
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                beat("daemon")
            os._exit(0)
        os._exit(0)
    if os.fork() == 0:
        beat("child")
    beat("main")
    """
)
# torchport's side: a scratch folder named for itself, the program run in it, no cleanup.
DRIVER = textwrap.dedent(
    """
    import sys, warnings
    from pathlib import Path
    from torchport.sandbox.isolation import owner, run_isolated

    warnings.simplefilter("ignore")
    backend, marker, program = sys.argv[1:]
    with owner.temp_dir() as tmp:
        print(tmp, flush=True)
        run_isolated([sys.executable, "-c", program, marker], scratch=Path(tmp),
                     timeout_s=300, memory_mb=512, backend=backend)
    """
)
HEARTBEATS_S = 120  # the program starting and spreading out on a loaded machine
CLEANUP_S = 30  # SIGKILL to nothing left: the watchdog's kills, docker kill and rm


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` every 0.1 s until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout} s")
        time.sleep(0.1)


def processes_with(marker: str) -> list[int]:
    """Live processes (other than this one) with ``marker`` in their cmdline or environment."""
    needle, found = marker.encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                if needle in Path(f"/proc/{entry}/{part}").read_bytes():
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def heartbeats(folder: Path) -> dict[str, int]:
    """Heartbeat file name to its last write (ns); empty when the folder is gone."""
    beats = {}
    for path in folder.glob("hb-*"):
        try:
            beats[path.name] = path.stat().st_mtime_ns
        except FileNotFoundError:
            continue
    return beats


def beating(folder: Path) -> bool:
    kinds = {name.split("-")[1] for name in heartbeats(folder)}
    return kinds == set(KINDS)


def cgroups_of(tag: str) -> list[str]:
    return [name for name in torchport_cgroups() if name.startswith(f"torchport-{tag}-")]


def containers_of(tag: str) -> list[str]:
    if docker.unavailable() is not None:
        return []
    return [name for name, owner_tag in docker.labelled().items() if owner_tag == tag]


def cgroups_writable() -> bool:
    """Whether runs get a cgroup here (root, a writable cgroup filesystem)."""
    group = make_cgroup(owner=owner.tag(), memory_mb=64, pids=8, cpus=1)
    if group is not None:
        group.remove()
    return group is not None


def kill_and_check(driver: subprocess.Popen, marker: str, tag: str, backend: str) -> None:
    """SIGKILL only the driver; then nothing of its run may be left."""
    assert processes_with(marker), "the run's processes carry the marker"
    if backend == "docker":
        assert containers_of(tag), "the run's container is labelled with its owner"
    elif cgroups_writable():
        assert cgroups_of(tag), "the run's cgroup is named for its owner"
        # A watchdog stays outside it, so that a cgroup kill or OOM cannot take it first
        # (one per run: a verification runs the original and the migration together).
        watchdogs = [p for p in processes_with(marker) if b"watchdog.py" in cmdline(p)]
        assert watchdogs, "every run has a watchdog"
        for watchdog in watchdogs:
            assert "torchport-" not in Path(f"/proc/{watchdog}/cgroup").read_text()
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=CLEANUP_S)
    until(lambda: not processes_with(marker), CLEANUP_S, "processes of the run still alive")
    until(lambda: not cgroups_of(tag), CLEANUP_S, "a cgroup of the run is left")
    until(lambda: not containers_of(tag), CLEANUP_S, "a container of the run is left")


def test_killing_torchport_kills_the_run_on_every_backend(backend: str, tmp_path: Path) -> None:
    marker = f"torchport-kill-test-{uuid.uuid4().hex}"
    temp = tmp_path / "temp"
    temp.mkdir()
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, backend, marker, PROGRAM],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},
        start_new_session=True,
    )
    try:
        tag = owner.tag(driver.pid)
        scratch = Path(driver.stdout.readline().strip())
        assert scratch.parent == temp, driver.stderr.read()
        assert scratch.name.startswith(f"torchport-run-{tag}-")
        until(lambda: beating(scratch) or driver.poll() is not None, HEARTBEATS_S, "heartbeats")
        assert driver.poll() is None, driver.stderr.read()
        kill_and_check(driver, marker, tag, backend)
        before = heartbeats(scratch)
        time.sleep(0.5)  # every writer is gone: nothing may beat in this half second
        assert heartbeats(scratch) == before
        # The driver made this folder itself, so no watchdog removes it: the next sweep does.
        assert scratch.is_dir()
        assert str(scratch) in sweep(temp).folders
        assert not scratch.exists()
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()


TRAIN = "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n" + PROGRAM


@pytest.mark.slow
def test_killing_migrate_mid_verification_leaves_nothing(backend: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TORCHPORT_HOME": str(tmp_path / "home"), "TMPDIR": str(temp)}
    migrate = migrate_process(
        str(src), "--out", str(tmp_path / "out"), "-t", "tpu", "--llm", "none",
        "--isolation", backend, "--timeout", "300", "--entry", "python train.py", env=env,
    )  # fmt: skip
    try:
        tag = owner.tag(migrate.pid)
        # The harness's scratch copy, named for torchport; the program runs in program/.
        copies = f"torchport-run-{tag}-*/program"
        until(
            lambda: any(beating(p) for p in temp.glob(copies)) or migrate.poll() is not None,
            HEARTBEATS_S,
            "heartbeats",
        )
        assert migrate.poll() is None, migrate.stderr.read()
        kill_and_check(migrate, f"torchport-run-{tag}-", tag, backend)
        # The watchdog deleted the run's copy of the repository: no sweep needed.
        until(lambda: not list(temp.glob("torchport-run-*")), CLEANUP_S, "scratch copy left")
        assert not (tmp_path / "out").exists()
        # The killed run keeps its own scratch (runs/RUN_ID) for --resume.
        assert list((tmp_path / "home" / "runs").iterdir())
    finally:
        if migrate.poll() is None:
            migrate.kill()
        migrate.wait()


def test_the_sweep_removes_only_dead_owners_leftovers(tmp_path: Path) -> None:
    gone = subprocess.Popen(["sleep", "60"])
    dead = owner.tag(gone.pid)
    gone.kill()
    gone.wait()
    mine = owner.tag()
    pid, start, ns = mine.split("-")
    reused = f"{pid}-{int(start) + 1}-{ns}"  # this pid, another start time: a reused pid
    other_ns = f"{gone.pid}-{start}-{int(ns) + 1}"  # cannot be judged from here
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    temp = tmp_path / "temp"
    temp.mkdir()

    def folder(name: str) -> Path:
        path = temp / name
        (path / "program" / "locked").mkdir(parents=True)
        (path / "program" / "locked" / "f.txt").write_text("x")
        (path / "program" / "locked").chmod(0)  # as a program may leave it
        return path

    stale = [folder(f"torchport-run-{dead}-ab12cd"), folder(f"torchport-run-{reused}-x_9")]
    kept = [
        folder(f"torchport-run-{mine}-live01"),
        folder(f"torchport-run-{other_ns}-ns0001"),
        folder("torchport-run-abcdef12"),  # unnamed (older torchport): not ours to judge
        folder(f"torchport-{dead}-zz"),
    ]
    (temp / f"torchport-run-{dead}-link").symlink_to(outside)
    (temp / f"torchport-run-{dead}-file").write_text("not a folder")
    groups = [make_cgroup(owner=t, memory_mb=64, pids=8, cpus=1) for t in (dead, mine)]
    inside = None
    if groups[0] is not None:  # a process in the stale cgroup is killed with it
        inside = subprocess.Popen(["sleep", "60"], preexec_fn=groups[0].join)
    labelled = []
    if docker.unavailable() is None:
        docker.ensure_image()
        for t in (dead, mine):
            name = f"torchport-sweep-test-{uuid.uuid4().hex[:8]}"
            subprocess.run(
                ["docker", "create", "--name", name, "--label", f"{docker.LABEL}=1",
                 "--label", f"{docker.OWNER_LABEL}={t}", docker.IMAGE, "/none"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            labelled.append(name)
    try:
        swept = sweep(temp)
        assert sorted(swept.folders) == sorted(str(p) for p in stale)
        assert not any(p.exists() for p in stale)
        assert all(p.is_dir() for p in kept)
        assert (temp / f"torchport-run-{dead}-link").is_symlink()
        assert (outside / "keep.txt").read_text() == "x"
        assert (temp / f"torchport-run-{dead}-file").is_file()
        # Cgroups and containers are the machine's, not this folder's: any torchport's first
        # sandboxed run sweeps them (a CLI another test starts on another worker), and one
        # took the dead owner's cgroup before this sweep once (a fresh clone's make test).
        # So: the dead owner's are gone, whoever swept them, and this sweep took none of ours.
        if groups[0] is not None:
            assert groups[1].dirs[0].name not in swept.cgroups
            assert not any(d.exists() for d in groups[0].dirs)
            assert all(d.exists() for d in groups[1].dirs)
            assert inside.wait(timeout=CLEANUP_S) == -signal.SIGKILL
        if labelled:
            assert labelled[1] not in swept.containers
            assert containers_of(dead) == [] and containers_of(mine) == [labelled[1]]
    finally:
        for path in kept:
            (path / "program" / "locked").chmod(0o700)
        for group in groups:
            if group is not None:
                group.remove()
        if inside is not None and inside.poll() is None:
            inside.kill()
        for name in labelled:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def test_a_finished_run_removes_its_scratch_and_chat_folders_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchport.agents import graph, runs

    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path / "home"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    run_id = runs.new_run_id()
    (runs.run_dir(run_id) / "work").mkdir()  # as the verify node leaves it
    (runs.run_dir(run_id) / "work" / "train.py").write_text("copy")
    backups = runs.run_dir("chat-20260101-000000-abcdef") / "backups"
    backups.mkdir()
    settings = {"source": str(src), "target": "tpu", "out": str(tmp_path / "out")}
    final = graph.start(
        {**settings, "llm": "none", "verify": False}, graph.Runtime(run_id), tmp_path / "ck.db"
    )
    assert final["outcome"] == "not verified"
    assert (tmp_path / "out" / "train.py").is_file()
    assert not (tmp_path / "home" / "runs" / run_id).exists()
    assert backups.is_dir()
    for not_scratch in ("chat-20260101-000000-abcdef", "..", "a/../..", ""):
        with pytest.raises(ValueError, match="not a migrate run's scratch folder"):
            runs.remove_run_dir(not_scratch)
    assert backups.is_dir()
