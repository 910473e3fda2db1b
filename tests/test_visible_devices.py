"""TPD024: ``CUDA_VISIBLE_DEVICES`` becomes the target's device selection, in every kind of
file it is set in. On tpu that is the variable TorchTPU reads (the wheel's facts,
``[environment] visible_devices``), never one TorchTPU writes for each process itself
(``TPU_VISIBLE_CHIPS`` and the ``*_BOUNDS``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.sandbox import torchtpu_facts
from torchport.tools.codemods.visible_devices import visible_devices_line
from torchport.tools.migrate import MigrateOptions, migrate

TPU = torchtpu_facts.section("environment")["visible_devices"]
WRITTEN_BY_TORCHTPU = torchtpu_facts.section("environment")["written_by_torchtpu"]


@pytest.mark.parametrize(
    ("path", "line", "expected"),
    [
        ("run.sh", "CUDA_VISIBLE_DEVICES=0 python train.py\n", f"{TPU}=0 python train.py\n"),
        ("run.sh", "export CUDA_VISIBLE_DEVICES=0,1,2,3\n", f"export {TPU}=0,1,2,3\n"),
        ("run.sh", "export CUDA_VISIBLE_DEVICES=$GPU\n", f"export {TPU}=$GPU\n"),
        ("Dockerfile", "ENV CUDA_VISIBLE_DEVICES=0\n", f"ENV {TPU}=0\n"),
        ("Makefile", "\tCUDA_VISIBLE_DEVICES=0,1 torchrun t.py\n", f"\t{TPU}=0,1 torchrun t.py\n"),
        ("ci.yaml", '  CUDA_VISIBLE_DEVICES: "0"\n', f'  {TPU}: "0"\n'),
        ("compose.yml", "      - CUDA_VISIBLE_DEVICES=0\n", f"      - {TPU}=0\n"),
        ("env.json", '    "CUDA_VISIBLE_DEVICES": "0,1"\n', f'    "{TPU}": "0,1"\n'),
    ],
)
def test_tpu_renames_to_the_variable_torchtpu_reads_and_keeps_the_value(path, line, expected):
    assert TPU == "TPU_VISIBLE_DEVICES"
    new = visible_devices_line(line, "tpu", path)
    assert new == expected
    assert not any(name in new for name in WRITTEN_BY_TORCHTPU)


def test_neuron_renames_and_keeps_the_value():
    line = "export CUDA_VISIBLE_DEVICES=0,1,2,3\n"
    assert (
        visible_devices_line(line, "neuron", "run.sh") == "export NEURON_RT_VISIBLE_CORES=0,1,2,3\n"
    )
    assert visible_devices_line(line, "accelerator", "run.sh") is None


def test_a_tpu_port_sets_and_reads_only_what_torchtpu_reads(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "run.sh").write_text(
        "#!/bin/sh\nexport CUDA_VISIBLE_DEVICES=0,1\ntorchrun --nproc_per_node=2 train.py\n"
    )
    (repo / "train.py").write_text(
        "import os\n\nimport torch\n\n"
        'os.environ["CUDA_VISIBLE_DEVICES"] = "0"\n'
        "os.environ.setdefault('CUDA_VISIBLE_DEVICES', str(torch.zeros(1).numel()))\n"
        'seen = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")\n'
    )
    result = migrate(repo, MigrateOptions(target="tpu", out=tmp_path / "out"))
    assert not [f for f, _ in result.unapplied if f.rule == "TPD024"]
    script = (tmp_path / "out" / "run.sh").read_text()
    program = (tmp_path / "out" / "train.py").read_text()
    assert f"export {TPU}=0,1\n" in script
    assert program.count(TPU) == 3, program
    for name in [*WRITTEN_BY_TORCHTPU, "CUDA_VISIBLE_DEVICES"]:
        assert name not in script + program, name
