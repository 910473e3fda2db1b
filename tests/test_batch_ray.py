"""`torchport batch --executor ray`: the same jobs on a local Ray instance give the same
summary as local processes; nothing contacts the network, nothing is mocked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from test_batch import CORPUS, FAST, journal, raising_repo, without_times

pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[cluster]'")


def run_batch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torchport.cli", "batch", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.mark.slow
def test_ray_gives_the_summary_the_local_executor_gives(tmp_path):
    for name in ("mnist_basic", "inference_only"):
        shutil.copytree(CORPUS / name, tmp_path / "repos" / name)
    raising_repo(tmp_path / "repos" / "raises")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local instance
    env.update(TORCHPORT_HOME=str(tmp_path / "home"), RAY_DISABLE_USAGE_STATS="1")
    common = [str(tmp_path / "repos"), "-t", "tpu", "--jobs", "2", *FAST]

    on_ray = run_batch(*common, "--out", str(tmp_path / "ray"), "--executor", "ray", env=env)
    assert on_ray.returncode == 1, on_ray.stderr  # raises: failed
    assert "3 to migrate (2 at a time, ray)" in on_ray.stderr
    # the Ray workers got the batch's settings: its TORCHPORT_HOME holds their references
    assert any((tmp_path / "home" / "references").glob("*.json"))
    local = run_batch(*common, "--out", str(tmp_path / "local"), env=env)
    assert local.returncode == 1, local.stderr

    assert without_times(tmp_path / "ray") == without_times(tmp_path / "local")
    data, _, _ = without_times(tmp_path / "ray")
    assert [(r["name"], r["verdict"]) for r in data["repos"]] == [
        ("inference_only", "verified"),
        ("mnist_basic", "verified"),
        ("raises", "not-runnable"),  # the original raises too
    ]
    finished = [e["name"] for e in journal(tmp_path / "ray") if e["event"] == "finished"]
    assert sorted(finished) == ["inference_only", "mnist_basic", "raises"]
    assert "verdict: verified" in (tmp_path / "ray" / "logs" / "mnist_basic.log").read_text()


@pytest.mark.slow
def test_an_unreachable_cluster_is_a_clear_error_in_seconds(tmp_path):
    import socket
    import time

    shutil.copytree(CORPUS / "mnist_basic", tmp_path / "repos" / "mnist_basic")
    with socket.socket() as s:  # a loopback port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    done = run_batch(
        str(tmp_path / "repos"),
        *("-t", "tpu", "--out", str(tmp_path / "out"), "--executor", "ray"),
        *("--ray-address", f"127.0.0.1:{port}"),
        env={**os.environ, "TORCHPORT_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 2, done.stderr
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in done.stderr
    assert time.monotonic() - started < 60
    assert not (tmp_path / "out" / "results" / "mnist_basic.json").exists()
