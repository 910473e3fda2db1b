"""TPD024: ``CUDA_VISIBLE_DEVICES`` becomes the target's device selection, in every kind of
file it is set in, and only where the meaning carries over (issue 14's mechanical fixes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.tools.codemods.visible_devices import visible_devices_line
from torchport.tools.migrate import MigrateOptions, migrate

TPU_ONE_CHIP = "TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1 TPU_PROCESS_BOUNDS=1,1,1 TPU_VISIBLE_CHIPS=0"


@pytest.mark.parametrize(
    ("path", "line", "expected"),
    [
        ("run.sh", "CUDA_VISIBLE_DEVICES=0 python train.py\n", f"{TPU_ONE_CHIP} python train.py\n"),
        ("run.sh", "export CUDA_VISIBLE_DEVICES=0\n", f"export {TPU_ONE_CHIP}\n"),
        ("Dockerfile", "ENV CUDA_VISIBLE_DEVICES=0\n", f"ENV {TPU_ONE_CHIP}\n"),
        ("Makefile", '\tCUDA_VISIBLE_DEVICES="0" $(PY) x.py\n', f"\t{TPU_ONE_CHIP} $(PY) x.py\n"),
        (
            "config.yaml",
            '  CUDA_VISIBLE_DEVICES: "0"\n',
            '  TPU_CHIPS_PER_PROCESS_BOUNDS: "1,1,1"\n  TPU_PROCESS_BOUNDS: "1,1,1"\n'
            '  TPU_VISIBLE_CHIPS: "0"\n',
        ),
        (  # a list item opening a mapping: one item, three keys
            "compose.yml",
            "  - CUDA_VISIBLE_DEVICES: 0\n",
            '  - TPU_CHIPS_PER_PROCESS_BOUNDS: "1,1,1"\n    TPU_PROCESS_BOUNDS: "1,1,1"\n'
            '    TPU_VISIBLE_CHIPS: "0"\n',
        ),
        (  # docker-compose's list of KEY=VALUE strings: three items
            "compose.yml",
            "      - CUDA_VISIBLE_DEVICES=0\n",
            "      - TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1\n      - TPU_PROCESS_BOUNDS=1,1,1\n"
            "      - TPU_VISIBLE_CHIPS=0\n",
        ),
        (
            "env.json",
            '    "CUDA_VISIBLE_DEVICES": "0"\n',
            '    "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",\n    "TPU_PROCESS_BOUNDS": "1,1,1",\n'
            '    "TPU_VISIBLE_CHIPS": "0"\n',
        ),
        (
            "env.json",
            '  "CUDA_VISIBLE_DEVICES": "0",\n',
            '  "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",\n  "TPU_PROCESS_BOUNDS": "1,1,1",\n'
            '  "TPU_VISIBLE_CHIPS": "0",\n',
        ),
    ],
)
def test_one_chip_becomes_libtpus_three_settings(path: str, line: str, expected: str):
    assert visible_devices_line(line, "tpu", path) == expected


@pytest.mark.parametrize(
    "line",
    [
        "export CUDA_VISIBLE_DEVICES=0,1,2,3\n",  # every rank torchrun starts inherits it
        'export CUDA_VISIBLE_DEVICES=""\n',  # hides the GPUs: no TPU meaning
        "export CUDA_VISIBLE_DEVICES=$GPU\n",  # decided at run time
    ],
)
def test_lists_empty_and_computed_values_are_left_on_tpu(line: str):
    assert visible_devices_line(line, "tpu", "run.sh") is None


def test_neuron_renames_and_keeps_the_value():
    line = "export CUDA_VISIBLE_DEVICES=0,1,2,3\n"
    assert (
        visible_devices_line(line, "neuron", "run.sh") == "export NEURON_RT_VISIBLE_CORES=0,1,2,3\n"
    )
    assert visible_devices_line(line, "accelerator", "run.sh") is None


def test_a_list_left_on_tpu_is_reported_with_its_reason(tmp_path: Path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "run.sh").write_text(
        "#!/bin/sh\nexport CUDA_VISIBLE_DEVICES=0,1\ntorchrun --nproc_per_node=2 train.py\n"
    )
    (tmp_path / "repo" / "train.py").write_text("import torch\n")
    result = migrate(tmp_path / "repo", MigrateOptions(target="tpu", out=tmp_path / "out"))
    ((finding, why),) = [(f, w) for f, w in result.unapplied if f.rule == "TPD024"]
    assert finding.line == 2 and "each process" in why
    assert (tmp_path / "out" / "run.sh").read_text() == (tmp_path / "repo" / "run.sh").read_text()
