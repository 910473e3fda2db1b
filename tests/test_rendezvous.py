"""A rendezvous the sandbox cannot reach fails at once, named and classified.

The unreachable address (10.255.255.1) is only ever given to programs inside an
isolating backend, where no route leaves the sandbox: even a guard that failed
would send nothing off the machine. No test here connects anywhere but loopback.
"""

from __future__ import annotations

import datetime
import socket
import textwrap
import warnings
from pathlib import Path

import pytest
import torch.distributed as dist
from torchport.agents.diagnose import diagnose
from torchport.sandbox import rendezvous
from torchport.sandbox.harness import RunError, RunSpec, run, torchrun_parts
from torchport.sandbox.isolation import IsolationWarning, choose_backend
from torchport.sandbox.rendezvous import refusal, rendezvous_host


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.1.1", "::1", "[::1]", "0.0.0.0", "localhost", "torchport-sandbox"]
)
def test_loopback_addresses_and_the_sandboxs_names_are_accepted(host: str) -> None:
    assert refusal(host, resolve=False) is None


def test_other_addresses_and_unknown_names_are_refused_with_the_reason() -> None:
    assert refusal("10.255.255.1") == "10.255.255.1 is not a loopback address"
    assert refusal("node-17.cluster", resolve=False) == (
        "the name does not resolve inside the sandbox"
    )


def test_the_rendezvous_host_is_read_from_init_method_or_the_environment() -> None:
    env = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}
    assert rendezvous_host("tcp://[::1]:23456?rank=0", {}) == ("::1", "[::1]:23456", "init_method")
    assert rendezvous_host("env://", env) == ("10.0.0.5", "10.0.0.5:29500", "MASTER_ADDR")
    assert rendezvous_host(None, env) == ("10.0.0.5", "10.0.0.5:29500", "MASTER_ADDR")
    assert rendezvous_host(None, {}) is None  # torch itself says MASTER_ADDR is missing
    assert rendezvous_host("file:///tmp/rdzv", env) is None


def test_the_guard_bounds_the_timeout_and_lets_loopback_through() -> None:
    # In this process only loopback is ever named; refusals are run inside the sandbox below.
    original = dist.init_process_group
    rendezvous.install()
    try:
        assert dist.init_process_group is not original
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        hours = datetime.timedelta(hours=2)  # positionally, longer than the bound
        dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", hours, rank=0, world_size=1)
        try:
            store = dist.distributed_c10d._get_default_store()
            assert store.timeout == datetime.timedelta(seconds=rendezvous.TIMEOUT_S)
        finally:
            dist.destroy_process_group()
    finally:
        rendezvous.uninstall()
    assert dist.init_process_group is original
    assert rendezvous.bounded_timeout(datetime.timedelta(seconds=5)).total_seconds() == 5
    assert rendezvous.bounded_timeout(None).total_seconds() == rendezvous.TIMEOUT_S


def test_torchrun_options_naming_another_host_are_refused_before_it_starts() -> None:
    with pytest.raises(RunError, match=r"10\.1\.2\.3:29400 \(torchrun --rdzv-endpoint\)"):
        torchrun_parts(["torchrun", "--nnodes=2", "--rdzv-endpoint=10.1.2.3:29400", "t.py"])
    with pytest.raises(RunError, match=r"head-node \(torchrun --master-addr\).*does not resolve"):
        torchrun_parts(["torchrun", "--master-addr", "head-node", "t.py"])
    assert torchrun_parts(["torchrun", "--master-addr=localhost", "t.py"]) is not None
    assert torchrun_parts(["torchrun", "--standalone", "--nproc-per-node=2", "t.py"]) is not None


_PROGRAM = """
import os, torch.distributed as dist
{setup}
dist.init_process_group({backend!r}, {init}rank=0, world_size=2)
print("connected")
"""


@pytest.mark.parametrize(
    ("mode", "backend", "setup", "init", "address", "why"),
    [
        ("reference", "nccl", "", 'init_method="tcp://10.255.255.1:29500", ',
         "10.255.255.1:29500 (init_method)", "10.255.255.1 is not a loopback address"),
        ("tpu", "tpu", 'os.environ.update(MASTER_ADDR="node-17.cluster", MASTER_PORT="29500")',
         "", "node-17.cluster:29500 (MASTER_ADDR)", "the name does not resolve inside the sandbox"),
    ],
)  # fmt: skip
def test_an_unreachable_rendezvous_fails_in_seconds_classified(
    tmp_path: Path, mode: str, backend: str, setup: str, init: str, address: str, why: str
) -> None:
    if choose_backend("auto") == "process":
        pytest.skip("needs an isolating backend: the process backend has the host's network")
    root = tmp_path / "prog"
    root.mkdir()
    source = _PROGRAM.format(setup=setup, backend=backend, init=init)
    (root / "train.py").write_text(textwrap.dedent(source))
    with warnings.catch_warnings():
        warnings.simplefilter("error", IsolationWarning)
        spec = RunSpec(root=root, command=["python", "train.py"], mode=mode, timeout_s=120)
        result = run(spec).to_json()
    assert result["status"] == "failed", result
    assert result["error"]["type"] == "RendezvousUnreachable"
    assert (
        f"the rendezvous address {address} cannot be reached: {why}" in result["error"]["message"]
    )
    assert "connected" not in result["stdout_tail"]
    # The whole run, torch import included, not torch's rendezvous timeout (30 minutes).
    assert result["elapsed_s"] < 60, result["elapsed_s"]
    d = diagnose(result, "tpu")
    assert (d.signature, d.action, d.limitation) == ("rendezvous-unreachable", "human", True)
    assert (d.file, d.line) == ("train.py", 4)
    assert address in d.cause and "limitation of torchport's sandbox" in d.cause
