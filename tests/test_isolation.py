"""Isolation backends, run for real where the machine has them.

Each behavioural test runs once per backend; a backend that cannot run here is
skipped with the reason (and how to install it). The programs are written to
be harmless if isolation fails: the fork bomb is bounded, and the network is
judged from inside (interfaces, routes) and by a connect to the host's own
127.0.0.1: no test sends traffic anywhere but loopback.
"""

from __future__ import annotations

import json
import socket
import sys
import textwrap
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
from torchport.sandbox.isolation import (
    BACKENDS,
    IsolationResult,
    IsolationWarning,
    bwrap,
    choose_backend,
    docker,
    process,
    run_isolated,
    safe_env,
    unshare,
)

_MODULES = {"bwrap": bwrap, "docker": docker, "unshare": unshare, "process": process}
_NOT_ISOLATED = "the process backend does not isolate network or filesystem (it warns instead)"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend, skipped with its own reason where it cannot run."""
    reason = _MODULES[request.param].unavailable()
    if reason is not None:
        pytest.skip(f"{request.param}: {reason}")
    return request.param


def run(backend: str, source: str, scratch: Path, **limits) -> IsolationResult:
    """Run Python ``source`` in the sandbox; the process backend must warn."""
    limits = {"timeout_s": 20, "memory_mb": 512, **limits}
    argv = [sys.executable, "-c", textwrap.dedent(source)]
    if backend == "process":
        with pytest.warns(IsolationWarning, match="does NOT isolate"):
            return run_isolated(argv, scratch=scratch, backend=backend, **limits)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IsolationWarning)
        return run_isolated(argv, scratch=scratch, backend=backend, **limits)


def test_no_network_but_its_own_loopback(backend: str, tmp_path: Path) -> None:
    # Judged from inside (interfaces and routes), plus a connect to a listener on the
    # HOST's 127.0.0.1: the sandbox's loopback is its own, so it must not get there.
    # No traffic leaves the machine: the only address tried is loopback.
    if backend == "process":
        pytest.skip(_NOT_ISOLATED)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        res = run(
            backend,
            f"""
            import json, socket
            dev = open("/proc/net/dev").read().splitlines()[2:]
            routes = open("/proc/net/route").read().splitlines()[1:]
            try:
                socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), timeout=2)
                reached = True
            except OSError:
                reached = False
            print(json.dumps({{
                "interfaces": sorted(line.split(":")[0].strip() for line in dev),
                "default_route": any(r.split()[1] == "00000000" for r in routes if r.split()),
                "routes": len(routes),
                "reached_host": reached,
            }}))
            """,
            tmp_path / "scratch",
        )
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    assert seen == {
        "interfaces": ["lo"],
        "default_route": False,
        "routes": 0,
        "reached_host": False,
    }
    assert res.backend == backend


def test_writes_only_to_scratch(backend: str, tmp_path: Path) -> None:
    if backend == "process":
        pytest.skip(_NOT_ISOLATED)
    scratch = tmp_path / "scratch"
    targets = [tmp_path / "beside-scratch.txt", REPO / f"sandbox-escape-{uuid.uuid4().hex}.txt"]
    try:
        res = run(
            backend,
            f"""
            import sys
            for path in {[str(t) for t in targets]!r} + ["inside.txt"]:
                try:
                    with open(path, "w") as fh:
                        fh.write("x")
                    print("WROTE", path)
                except OSError as exc:
                    print("DENIED", path, exc.strerror)
            """,
            scratch,
        )
        assert res.returncode == 0, res.stderr
        assert not any(t.exists() for t in targets), res.stdout
        if not REPO.is_relative_to("/tmp"):  # a checkout under /tmp sits in the private /tmp
            assert f"DENIED {targets[1]}" in res.stdout
        assert (scratch / "inside.txt").read_text() == "x"
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


def test_fork_bomb_is_contained(backend: str, tmp_path: Path) -> None:
    # Bounded on purpose: at most 300 children, each gone after 3 s, and the
    # loop gives up after 5 s, so a broken limit cannot hurt the machine.
    res = run(
        backend,
        """
        import os, time
        forked, deadline = 0, time.monotonic() + 5
        while forked < 300 and time.monotonic() < deadline:
            try:
                pid = os.fork()
            except OSError as exc:
                print("CONTAINED after", forked, exc)
                break
            if pid == 0:
                time.sleep(3)
                os._exit(0)
            forked += 1
        else:
            print("NOT CONTAINED", forked)
        """,
        tmp_path / "scratch",
        pids=32,
    )
    assert "CONTAINED after" in res.stdout, (res.stdout, res.stderr)
    assert int(res.stdout.split("CONTAINED after")[1].split()[0]) < 32


def test_memory_hog_is_stopped(backend: str, tmp_path: Path) -> None:
    res = run(
        backend,
        """
        block = bytearray(2 << 30)
        print("ALLOCATED", len(block))
        """,
        tmp_path / "scratch",
        memory_mb=256,
    )
    assert "ALLOCATED" not in res.stdout
    assert res.killed in ("memory", "signal SIGKILL") or "MemoryError" in res.stderr, res


def test_timeout_kills_the_whole_tree(backend: str, tmp_path: Path) -> None:
    # A detached grandchild (its own session) would write a marker after 3 s;
    # the wall clock of 2 s must take it down with the program.
    scratch = tmp_path / "scratch"
    res = run(
        backend,
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(3)
            open("grandchild-survived", "w").close()
            os._exit(0)
        time.sleep(60)
        """,
        scratch,
        timeout_s=2,
    )
    assert res.timed_out and res.killed == "timeout"
    assert res.elapsed_s < 10
    import time

    time.sleep(1.5)
    assert not (scratch / "grandchild-survived").exists()


def test_parent_secrets_are_absent(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-real-either")
    scratch = tmp_path / "scratch"
    res = run(backend, "import json, os; print(json.dumps(dict(os.environ)))", scratch)
    assert res.returncode == 0, res.stderr
    env = json.loads(res.stdout)
    assert "OPENAI_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert "sk-test-not-real" not in res.stdout
    assert env["HOME"] == str(scratch.resolve())


def _python(source: str, scratch: Path) -> IsolationResult:
    """``python -c source`` in the strongest sandbox there is."""
    return run_isolated(
        [sys.executable, "-c", source], scratch=scratch, timeout_s=20, memory_mb=512
    )


def test_output_is_a_capped_tail(tmp_path: Path) -> None:
    res = _python("for i in range(200_000): print(i)", tmp_path)
    assert res.returncode == 0
    assert len(res.stdout) <= 64 * 1024
    assert res.stdout.endswith("199999\n")


def test_auto_picks_the_strongest_available() -> None:
    usable = [b for b in BACKENDS if _MODULES[b].unavailable() is None]
    assert choose_backend("auto") == usable[0]
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        choose_backend("chroot")


def test_safe_env_is_an_allowlist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-not-real")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = safe_env({"TORCHPORT_STEPS": "5", "TOKENIZERS_PARALLELISM": "false"}, home=tmp_path)
    assert "OPENAI_API_KEY" not in env and "GITHUB_TOKEN" not in env
    assert env["OMP_NUM_THREADS"] == "3" and env["TORCHPORT_STEPS"] == "5"
    assert env["HOME"] == str(tmp_path) and env["PYTHONHASHSEED"] == "0"
    for name in ("HF_TOKEN", "ANTHROPIC_API_KEY", "AWS_ACCESS_KEY_ID", "DB_PASSWORD"):
        with pytest.raises(ValueError, match="looks like a secret"):
            safe_env({name: "x"})


def test_output_a_slow_reader_has_not_read_when_the_run_ends_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the reader threads can be behind when the run ends: what the run
    wrote before its end is still read (a spawned worker's last line was lost so, when the
    readers had two seconds each)."""
    from torchport.sandbox.isolation import runner

    ended = threading.Event()
    drain, stop = runner._drain, runner._stop

    def late(stream, *args):  # a reader scheduled only 5 s after the run ended
        ended.wait(60)
        time.sleep(5)
        drain(stream, *args)

    def stopped(proc):
        stop(proc)
        ended.set()

    monkeypatch.setattr(runner, "_drain", late)
    monkeypatch.setattr(runner, "_stop", stopped)
    res = _python("print('the last line', flush=True)", tmp_path)
    assert res.returncode == 0
    assert res.stdout == "the last line\n"
