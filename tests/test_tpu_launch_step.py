"""TPN010: a tpu port takes TorchTPU's launch step before it starts workers, in the forms the
torch-tpu wheel defines (``torch.tpu.distributed.set_tpu_launch_env()`` in Python,
``python -m torch.tpu.distributed`` in a shell), in Python, shell, Make and YAML launchers; the
shell form really exports what the module prints to the launcher it starts; other targets and
a second migration change nothing."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from torchport.sandbox import torchtpu_facts
from torchport.tools.codemods.tpu_launch import launch_step_line
from torchport.tools.migrate import MigrateOptions, migrate
from torchport.tools.scanner import ScanOptions, scan

DISTRIBUTED = torchtpu_facts.section("distributed")
PYTHON_STEP = DISTRIBUTED["launch_function"]  # torch.tpu.distributed.set_tpu_launch_env
SHELL_STEP = f"python -m {DISTRIBUTED['launch_module']}"

SPAWNER = """\
import torch
import torch.multiprocessing as mp


def train(rank, world_size):
    print(rank, world_size)


if __name__ == "__main__":
    world_size = 2
    mp.spawn(train, args=(world_size,), nprocs=world_size)
"""
RUN_SH = (
    "#!/bin/sh\nset -e\n# torchrun is the launcher\n"
    "torchrun --standalone --nproc_per_node=2 train.py\n"
)
MAKEFILE = "train:\n\t@torchrun --nproc_per_node=2 train.py\n"
WORKFLOW = "jobs:\n  t:\n    steps:\n      - run: torchrun --nproc_per_node=2 train.py\n"


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "launch.py").write_text(SPAWNER)
    (repo / "train.py").write_text("import torch\nprint(torch.ones(1))\n")
    (repo / "run.sh").write_text(RUN_SH)
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / "ci.yaml").write_text(WORKFLOW)
    return repo


def test_every_launcher_form_gets_the_launch_step_on_tpu_only(tmp_path: Path):
    repo = _repo(tmp_path)
    found = {(f.path, f.line) for f in scan(repo, ScanOptions(target="tpu")).findings
             if f.rule == "TPN010"}  # fmt: skip
    assert found == {("launch.py", 11), ("run.sh", 4), ("Makefile", 2), ("ci.yaml", 4)}
    for target in ("neuron", "xla", "accelerator"):
        assert not [f for f in scan(repo, ScanOptions(target=target)).findings
                    if f.rule == "TPN010"]  # fmt: skip
    assert not [f for f in scan(repo).findings if f.rule == "TPN010"]  # not a CUDA construct

    out = tmp_path / "out"
    result = migrate(repo, MigrateOptions(target="tpu", out=out))
    assert not [f for f, _ in result.unapplied if f.rule == "TPN010"]
    launch = (out / "launch.py").read_text()
    assert f"    {PYTHON_STEP}(nproc_per_node=world_size)\n    mp.spawn(" in launch
    assert launch.index(PYTHON_STEP) < launch.index("mp.spawn(")
    script = (out / "run.sh").read_text()
    assert f'eval "$({SHELL_STEP} | sed ' in script
    assert script.endswith("&& torchrun --standalone --nproc_per_node=2 train.py\n")
    assert "# torchrun is the launcher\n" in script  # a comment is not a launch
    assert f'\t@eval "$$({SHELL_STEP} | sed ' in (out / "Makefile").read_text()
    steps = yaml.safe_load((out / "ci.yaml").read_text())["jobs"]["t"]["steps"]
    assert steps[0]["run"].startswith(f'eval "$({SHELL_STEP} | sed ')

    again = migrate(out, MigrateOptions(target="tpu", out=tmp_path / "again"))
    assert not [e for e in again.edits if e.rule == "TPN010"]
    for name in ("launch.py", "run.sh", "Makefile", "ci.yaml"):
        assert (tmp_path / "again" / name).read_text() == (out / name).read_text(), name


def test_a_quoted_or_listed_command_is_left_for_a_human_with_the_step_to_add():
    assert launch_step_line('    run: "torchrun t.py"\n', "tpu", "ci.yml") is None
    assert launch_step_line('    command: ["torchrun", "t.py"]\n', "tpu", "ci.yml") is None
    assert launch_step_line("echo use torchrun\n", "tpu", "run.sh") is None
    assert launch_step_line("torchrun t.py\n", "neuron", "run.sh") is None


FAKE_MODULE = """\
#!/bin/sh
# python -m torch.tpu.distributed as the wheel's _print_launch_env prints it
if [ "$1 $2" = "-m torch.tpu.distributed" ]; then
  echo 'TORCH_TPU_TOPOLOGY="2,2,1"'
  echo 'TORCH_TPU_SLICEBUILDER_ADDRESSES="localhost:8471,localhost:8472"'
  echo 'TORCH_TPU_XPROF_SESSION_ID="17"'
  echo 'WORLD_SIZE=2'
  echo 'NODE_RANK="0"'
  exit 0
fi
exit 3
"""
FAKE_TORCHRUN = """\
#!/bin/sh
echo "topology=$TORCH_TPU_TOPOLOGY addresses=$TORCH_TPU_SLICEBUILDER_ADDRESSES world=$WORLD_SIZE"
"""


@pytest.mark.parametrize("kind", ["shell", "make"])
def test_the_shell_form_exports_what_the_module_prints_to_torchrun(tmp_path: Path, kind: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("python", FAKE_MODULE), ("torchrun", FAKE_TORCHRUN)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    if kind == "shell":
        line = launch_step_line("torchrun --nproc_per_node=2 train.py\n", "tpu", "run.sh")
        (tmp_path / "run.sh").write_text(line)
        command = ["sh", "run.sh"]
    else:
        line = launch_step_line("\ttorchrun --nproc_per_node=2 train.py\n", "tpu", "Makefile")
        (tmp_path / "Makefile").write_text("train:\n" + line)
        command = ["make", "-s", "train"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == textwrap.dedent("""\
        topology=2,2,1 addresses=localhost:8471,localhost:8472 world=2
    """)
