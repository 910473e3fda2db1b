"""TorchTPU's launch step (issue 30): a multi-process tpu program started without it fails
the way TorchTPU does, and with it, as a port's launch line takes it, gets past.

The facts are the wheel's (``sandbox/data/torch_tpu.toml``): a worker whose ``WORLD_SIZE`` is
an integer reads its distributed worker configuration at the device's first use
(``GetDistributedWorkerConfiguration`` in the glue library) and names the variables it
lacks; ``set_tpu_launch_env`` / ``python -m torch.tpu.distributed`` decide them in the
parent (``torch_tpu/_internal/distributed/distributed.py``).
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
import test_emulator
from test_emulator import run_snippet
from torchport.agents.deliver import verification_markdown
from torchport.agents.port_launch import port_command, stepped_command
from torchport.sandbox import torchtpu_facts, tpu_launch
from torchport.sandbox.harness import RunError, RunSpec, launcher_argv, run
from torchport.sandbox.launch_step import exported
from torchport.tools.migrate import MigrateOptions, migrate

backend = test_emulator.backend
FACTS = torchtpu_facts.section("distributed")
TORCHRUN = ["torchrun", "--nproc_per_node", "2", "main.py"]
# TPN010's shell form of the step (tools/codemods/tpu_launch.py, shell_step)
STEP = "eval \"$(python -m torch.tpu.distributed | sed 's/^/export /')\" && "


def _missing(*names: str) -> str:
    return FACTS["worker_missing_error"].format(missing=", ".join(names))


LAUNCH_VARIABLES = ("TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY")

# -- the worker's side: the device's first use ----------------------------------------------


def test_the_wheel_requires_these_variables_of_a_distributed_worker():
    assert FACTS["worker_gate"] == "WORLD_SIZE"
    assert FACTS["worker_requires"][-2:] == list(LAUNCH_VARIABLES)
    torchrun_sets = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "x"}
    env = {**torchrun_sets, "MASTER_PORT": "1"}
    assert tpu_launch.worker_error(env) == _missing(*LAUNCH_VARIABLES)
    assert tpu_launch.worker_error({**env, "TORCH_TPU_TOPOLOGY": ""}) == _missing(
        "TORCH_TPU_SLICEBUILDER_ADDRESSES"  # set to "" counts as set (GetEnvOnce)
    )
    # in TorchTPU's order, each one named
    assert tpu_launch.worker_error({"WORLD_SIZE": "1"}) == _missing(
        *(n for n in FACTS["worker_requires"] if n != "WORLD_SIZE")
    )
    # no integer WORLD_SIZE: one process, nothing read
    assert tpu_launch.worker_error({}) == ""
    assert tpu_launch.worker_error({"WORLD_SIZE": "two"}) == ""


FIRST_USE = """
def outcome(fn):
    try:
        fn()
        return "ok"
    except Exception as e:
        return [type(e).__name__, str(e)]
import torch.distributed as dist
group = dict(init_method=INIT, rank=0, world_size=1)
result["group"] = outcome(lambda: dist.init_process_group("tpu", **group))
result["tensor"] = [outcome(lambda: torch.ones(2, device="tpu")) for _ in range(2)]
"""


def test_a_worker_without_the_launch_step_fails_at_its_first_device_use(backend, tmp_path):
    env = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = "29500"
    code = f"INIT = {'file://' + str(tmp_path / 'store')!r}\n" + FIRST_USE
    r = run_snippet(code, env=env, backend=backend)
    refused = ["RuntimeError", _missing(*LAUNCH_VARIABLES)]
    assert r["group"] == refused  # the tpu group starts the device
    assert r["tensor"] == [refused, refused]  # read once: the same error every time
    env.update(TORCH_TPU_SLICEBUILDER_ADDRESSES="localhost:1", TORCH_TPU_TOPOLOGY="1,1,1")
    assert run_snippet(code, env=env, backend=backend) == {"group": "ok", "tensor": ["ok", "ok"]}


# -- the parent's side: set_tpu_launch_env -------------------------------------------------


def test_set_tpu_launch_env_never_overwrites_and_is_idempotent():
    env: dict[str, str] = {"TORCH_TPU_TOPOLOGY": "pinned"}
    tpu_launch.set_launch_env(4, environ=env)
    assert env["TORCH_TPU_TOPOLOGY"] == "pinned"
    addresses = env["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")
    assert len(addresses) == 4 and len(set(addresses)) == 4
    assert all(re.fullmatch(r"localhost:\d+", a) for a in addresses)
    first = dict(env)
    tpu_launch.set_launch_env(4, environ=env)
    assert env == first
    two: dict[str, str] = {}
    tpu_launch.set_launch_env(8, nproc_per_node=2, environ=two)
    assert two["TORCH_TPU_TOPOLOGY"] == "1,2,1"  # hardware.py's table for 2 chips
    assert len(two["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")) == 2


def test_set_tpu_launch_env_refuses_what_the_wheel_refuses():
    with pytest.raises(RuntimeError, match=r"^No TPU topology found for count: 3$"):
        tpu_launch.set_launch_env(3, environ={"TORCH_TPU_TOPOLOGY": "pinned"})
    with pytest.raises(RuntimeError, match="several hosts are not emulated"):
        tpu_launch.set_launch_env(4, nnodes=2, environ={})
    with pytest.raises(ValueError, match="expected nnodes to match"):
        tpu_launch.set_launch_env(4, nnodes=3, environ={"TPU_WORKER_HOSTNAMES": "a,b"})


MODULE = """
import torch.tpu.distributed as d
result["same"] = d is torch.tpu.distributed
result["names"] = dir(d)
os.environ["TORCH_TPU_TOPOLOGY"] = "pinned"
d.set_tpu_launch_env()
result["env"] = {k: v for k, v in os.environ.items() if k.startswith("TORCH_TPU_")}
result["spmd_safe"] = d.spmd_safe(lambda x: x + 1)(1)
try:
    d.window_num_stripes = 8
except NotImplementedError as e:
    result["window"] = str(e)
"""


def test_the_emulated_torch_tpu_distributed_has_the_wheels_names(backend):
    r = run_snippet(MODULE, devices=4, backend=backend)
    assert r["same"] and r["names"] == sorted(torchtpu_facts.public_names("torch.tpu.distributed"))
    assert r["env"]["TORCH_TPU_TOPOLOGY"] == "pinned"
    assert len(r["env"]["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")) == 4
    assert set(r["env"]) == set(FACTS["launch_sets_single_host"])
    assert r["spmd_safe"] == 2
    assert r["window"].startswith("torch.tpu.distributed.window_num_stripes is not emulated")


@pytest.mark.slow
def test_python_m_torch_tpu_distributed_prints_the_assignments(tmp_path):
    command = ["python", "-m", "torch.tpu.distributed"]
    result = run(RunSpec(root=tmp_path, command=command, mode="tpu", devices=4))
    assert result.status == "ok", (result.error, result.stderr_tail)
    lines = result.stdout_tail.splitlines()
    assert [line.split("=", 1)[0] for line in lines] == FACTS["launch_prints"]
    values = dict(line.split("=", 1) for line in lines)
    assert values["TORCH_TPU_TOPOLOGY"] == '"2,2,1"'  # hardware.py's table for 4 chips
    addresses = values["TORCH_TPU_SLICEBUILDER_ADDRESSES"].strip('"').split(",")
    assert len(set(addresses)) == 4 and all(re.fullmatch(r"localhost:\d+", a) for a in addresses)
    assert re.fullmatch(r'"\d+"', values["TORCH_TPU_XPROF_SESSION_ID"])
    assert values["WORLD_SIZE"] == "4" and values["NODE_RANK"] == '"0"'


# -- the harness: torchrun's parent takes the step ------------------------------------------

DDP = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("tpu")
x = torch.ones(2, device="tpu") * (dist.get_rank() + 1)
dist.all_reduce(x)
# one write per rank: both ranks share torchrun's unbuffered stdout, and print("RANK", r, ...)
# writes piece by piece, so two ranks' pieces interleave ("RANKRANK 1 ... 0 ...")
print(f"RANK {dist.get_rank()} {x.cpu().tolist()} {os.environ['TORCH_TPU_TOPOLOGY']}\\n", end="")
dist.destroy_process_group()
"""


def _program(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "prog"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


@pytest.mark.slow
def test_a_torchrun_tpu_program_without_the_launch_step_fails_as_on_torchtpu(tmp_path):
    root = _program(tmp_path, {"main.py": DDP})
    result = run(RunSpec(root=root, command=TORCHRUN, mode="tpu", timeout_s=180))
    assert result.status == "failed"
    assert result.error["type"] == "RuntimeError"
    assert result.error["message"] == _missing(*LAUNCH_VARIABLES)
    assert result.error["frame"]["line"] == 5  # init_process_group("tpu") starts the device


@pytest.mark.slow
def test_with_the_launch_step_the_torchrun_tpu_program_gets_past(tmp_path):
    root = _program(tmp_path, {"main.py": DDP})
    spec = RunSpec(root=root, command=TORCHRUN, mode="tpu", timeout_s=180, launch_step=True)
    result = run(spec)
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert sorted(re.findall(r"RANK (\d) \[3\.0, 3\.0\] 1,2,1", result.stdout_tail)) == ["0", "1"]


def test_the_launch_step_runs_in_torchruns_parent_and_only_there(tmp_path):
    spec = RunSpec(root=tmp_path, command=TORCHRUN, mode="tpu", launch_step=True)
    argv = launcher_argv(spec, tmp_path, tmp_path)
    step = [sys.executable, "-P", "-s", "-m", "torchport.sandbox.launch_step", "--devices"]
    assert argv[:6] == step
    assert argv[argv.index("--") + 1 :][3:5] == ["-m", "torch.distributed.run"]
    plain = launcher_argv(RunSpec(tmp_path, TORCHRUN, "tpu"), tmp_path, tmp_path)
    assert "torchport.sandbox.launch_step" not in plain
    with pytest.raises(RunError, match="runs in mode tpu, not 'neuron'"):
        RunSpec(root=tmp_path, command=TORCHRUN, mode="neuron", launch_step=True)
    with pytest.raises(RunError, match="the command is not torchrun"):
        RunSpec(root=tmp_path, command=["python", "main.py"], mode="tpu", launch_step=True)
    with pytest.raises(RunError, match="host of 3: No TPU topology found for count: 3"):
        RunSpec(root=tmp_path, command=TORCHRUN, mode="tpu", launch_step=True, devices=3)


def test_the_printed_assignments_are_exported_as_eval_does():
    env: dict[str, str] = {}
    exported(['TORCH_TPU_TOPOLOGY="2,2,1"', "WORLD_SIZE=4", 'NODE_RANK="0"'], env)
    assert env == {"TORCH_TPU_TOPOLOGY": "2,2,1", "WORLD_SIZE": "4", "NODE_RANK": "0"}


SPAWN = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size, port):
    # TorchTPU reads the worker configuration from the environment
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    x = torch.ones(2, device="tpu")
    print("WORKER", rank, x.sum().item(), flush=True)


if __name__ == "__main__":
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    STEP
    mp.spawn(worker, args=(2, port), nprocs=2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("step", [True, False])
def test_an_mp_spawn_program_needs_set_tpu_launch_env_in_its_parent(tmp_path, step):
    line = "torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=2)" if step else "pass"
    root = _program(tmp_path, {"main.py": SPAWN.replace("STEP", line)})
    result = run(RunSpec(root=root, command=["python", "main.py"], mode="tpu", timeout_s=180))
    if step:
        assert result.status == "ok", (result.error, result.stderr_tail)
        assert sorted(re.findall(r"WORKER (\d) 2\.0", result.stdout_tail)) == ["0", "1"]
    else:
        assert result.status == "failed"
        assert _missing(*LAUNCH_VARIABLES) in json.dumps(result.error) + result.stderr_tail


# -- the verifier: the port's launch line decides --------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (STEP + "torchrun --nproc_per_node 2 main.py --lr 1", True),  # shell
        ("\t@" + STEP.replace("$(", "$$(") + "torchrun --nproc_per_node 2 main.py", True),  # make
        ("    run: " + STEP + "torchrun --nproc_per_node 2 main.py", True),  # YAML
        ("torchrun --nproc_per_node 2 main.py", False),  # no step
        (STEP + "torchrun --nproc_per_node 4 main.py", False),  # another command
        ("python -m torch.tpu.distributed > env.txt; torchrun --nproc_per_node 2 main.py", False),
    ],
)
def test_a_port_launch_line_carries_the_step(line, expected):
    found = stepped_command(line, TORCHRUN)
    assert (found is not None) == expected
    if expected:
        assert found.startswith("eval ") and found.endswith("main.py" + line.split("main.py")[1])


def test_the_port_command_is_found_in_the_ports_launch_files(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.sh").write_text("#!/bin/sh\n" + STEP + " ".join(TORCHRUN) + "\n")
    (tmp_path / "README.md").write_text(STEP + " ".join(TORCHRUN) + "\n")  # no launch file
    assert port_command(tmp_path, TORCHRUN) == STEP + " ".join(TORCHRUN)
    assert port_command(tmp_path, ["torchrun", "other.py"]) is None
    (tmp_path / "scripts" / "train.sh").write_text(" ".join(TORCHRUN) + "\n")
    assert port_command(tmp_path, TORCHRUN) is None


def test_verification_md_shows_the_ports_command_with_the_step():
    record = {
        "verdict": "verified",
        "target": "tpu",
        "run_id": "r1",
        "iterations": 1,
        "elapsed_s": 1.0,
        "agent_edits": [],
        "decisions": [],
        "plan": {"entry": TORCHRUN, "entry_reason": "launched in train.sh"},
        "verification": {"verdict": "verified", "reason": "ok", "launch": STEP + "torchrun x"},
    }
    text = verification_markdown(record)
    assert "- port's command: `" + STEP + "torchrun x`" in text
    record["verification"]["launch"] = ""
    assert "port's command" not in verification_markdown(record)


def test_a_tpu_torchrun_entry_gains_the_step_as_the_ports_command(tmp_path):
    """No launch file of the port names the entry command: the command itself is the port's
    launch line, with the step in TPN010's form; other targets and plain Python get none."""
    from torchport.agents.verifier import _stepped_launch

    (tmp_path / "train.py").write_text("print('hi')\n")
    assert _stepped_launch(tmp_path, TORCHRUN, "tpu") == STEP + " ".join(TORCHRUN)
    assert _stepped_launch(tmp_path, TORCHRUN, "neuron") == ""
    assert _stepped_launch(tmp_path, ["python", "train.py"], "tpu") == ""


# -- a rank that launches itself (MPI-style: the program writes RANK and WORLD_SIZE) --------

SELF_LAUNCHED = """\
import os

import torch
import torch.distributed as dist


def setup():
    # the ranks' launcher (mpiexec here) says who this rank is; the program writes the rest
    rank, size = int(os.environ.get("PMI_RANK", "0")), int(os.environ.get("PMI_SIZE", "1"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "gloo":
        host = "127.0.0.1"
    else:
        host = "127.0.0.1"  # the ranks' launcher may say otherwise
    os.environ["MASTER_ADDR"] = host
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(size)
    os.environ["MASTER_PORT"] = os.environ.get("PMI_PORT", "29512")
    dist.init_process_group(backend=backend, init_method="env://")


setup()
x = torch.ones(2).cuda() * (dist.get_rank() + 1)
dist.all_reduce(x)
os.write(1, f"RANK {dist.get_rank()} {x.sum().item()}\\n".encode())  # one write a rank
"""
# What mpiexec does for the program: start SIZE ranks with their PMI variables; STEP is
# where a launch line takes TorchTPU's step (the parent of the ranks), or does not.
MPIEXEC = """\
import os, socket, subprocess, sys

import torch

STEP
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
size = int(sys.argv[1])
ranks = [
    subprocess.Popen(
        [sys.executable, "main.py"],
        env={**os.environ, "PMI_RANK": str(r), "PMI_SIZE": str(size), "PMI_PORT": port},
    )
    for r in range(size)
]
sys.exit(max(p.wait() for p in ranks))
"""


def _self_launched_port(tmp_path: Path, step: str = "pass") -> Path:
    original, port = tmp_path / "original", tmp_path / "port"
    original.mkdir()
    (original / "main.py").write_text(SELF_LAUNCHED)
    migrate(original, MigrateOptions(target="tpu", out=port))
    (port / "mpiexec.py").write_text(MPIEXEC.replace("STEP", step))
    return port


def test_a_self_launched_rank_gets_local_rank_and_its_own_step_for_one_rank(tmp_path):
    ported = (_self_launched_port(tmp_path) / "main.py").read_text()
    expected = (
        '    os.environ["MASTER_PORT"] = os.environ.get("PMI_PORT", "29512")\n'
        '    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])\n'
        '    if int(os.environ["WORLD_SIZE"]) == 1:\n'
        f"        {FACTS['launch_function']}(nproc_per_node=1)\n"
        '    dist.init_process_group(backend=backend, init_method="env://")\n'
    )
    assert expected in ported, ported
    again = tmp_path / "again"
    migrate(tmp_path / "port", MigrateOptions(target="tpu", out=again))
    assert (again / "main.py").read_text() == ported  # a second migration adds nothing


@pytest.mark.slow
def test_a_self_launched_port_runs_one_rank_on_its_own(tmp_path):
    port = _self_launched_port(tmp_path)
    result = run(RunSpec(root=port, command=["python", "main.py"], mode="tpu", timeout_s=180))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "RANK 0 2.0" in result.stdout_tail


@pytest.mark.slow
@pytest.mark.parametrize("step", [True, False])
def test_two_self_launched_ranks_need_the_step_in_their_launchers_parent(tmp_path, step):
    line = f"{FACTS['launch_function']}(nproc_per_node=2)" if step else "pass"
    port = _self_launched_port(tmp_path, line)
    command = ["python", "mpiexec.py", "2"]
    result = run(RunSpec(root=port, command=command, mode="tpu", timeout_s=240))
    if step:
        assert result.status == "ok", (result.error, result.stderr_tail)
        ranks = re.findall(r"RANK (\d) 6\.0", result.stdout_tail)
        assert sorted(ranks) == ["0", "1"], (result.stdout_tail, result.stderr_tail)
    else:  # each rank alone cannot decide addresses the other agrees on: TorchTPU says so
        assert result.status == "failed"
        output = json.dumps(result.error) + result.stderr_tail
        assert _missing(*LAUNCH_VARIABLES) in output, output


def test_a_slice_assignment_above_the_self_launch_does_not_break_its_step(tmp_path):
    """``_environ_of`` reads the subscripts written above ``init_process_group``: a slice
    (``ports[0:1] = ...``) has no ``.value``, and the codemod crashed on it."""
    original, port = tmp_path / "original", tmp_path / "port"
    original.mkdir()
    sliced = SELF_LAUNCHED.replace(
        '    os.environ["MASTER_ADDR"] = host\n',
        '    os.environ["MASTER_ADDR"] = host\n    ports = [0]\n    ports[0:1] = [29512]\n',
    )
    assert sliced != SELF_LAUNCHED
    (original / "main.py").write_text(sliced)
    migrate(original, MigrateOptions(target="tpu", out=port))
    ported = (port / "main.py").read_text()
    assert '    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])\n' in ported, ported
