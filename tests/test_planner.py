"""The planner picks a command the verifier can run without a human, or says why none."""

from __future__ import annotations

import json
from pathlib import Path

from torchport.agents.planner import make_plan, required_arguments
from torchport.tools.scanner import ScanOptions, scan

TRAIN = """\
import argparse
import torch

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    {extra}
    args = p.parse_args()
    model = torch.nn.Linear(2, 1).cuda()
    loss = model(torch.ones(1, 2).cuda()).sum()
    loss.backward()

if __name__ == "__main__":
    main()
"""


def repo(tmp_path: Path, extra: str = "", readme: str | None = None) -> Path:
    (tmp_path / "train.py").write_text(TRAIN.format(extra=extra))
    if readme is not None:
        (tmp_path / "README.md").write_text(readme)
    return tmp_path


def plan_for(root: Path, entry: str | None = None):
    return make_plan(root, scan(root, ScanOptions(target="tpu")), "tpu", entry)


def test_required_arguments_are_those_without_defaults():
    source = TRAIN.format(
        extra='p.add_argument("--data", required=True)\n    p.add_argument("out")\n'
        '    p.add_argument("--opt", required=True, default="x")\n'
        '    p.add_argument("maybe", nargs="?")'
    )
    assert required_arguments(source) == ["--data", "out"]
    assert required_arguments("def broken(:\n") == []


def test_a_script_without_required_arguments_runs_directly(tmp_path):
    plan = plan_for(repo(tmp_path))
    assert plan.entry == ["python", "train.py"] and plan.not_runnable is None
    assert "train.py" in plan.entry_reason and plan.auto == 2  # the two .cuda() calls


def test_the_readme_launch_line_supplies_required_arguments(tmp_path):
    root = repo(
        tmp_path,
        extra='p.add_argument("--data", required=True)',
        readme="Run it:\n\n    python train.py --data samples --lr 0.01\n",
    )
    plan = plan_for(root)
    assert plan.entry == ["python", "train.py", "--data", "samples", "--lr", "0.01"]


def test_placeholders_and_missing_arguments_make_it_not_runnable(tmp_path):
    root = repo(
        tmp_path,
        extra='p.add_argument("--data", required=True)',
        readme="    python train.py --data $DATA_DIR --resume <ckpt>\n",
    )
    plan = plan_for(root)
    assert plan.entry is None
    assert "placeholder" in plan.not_runnable and "--data" in plan.not_runnable
    assert "--entry" in plan.not_runnable


def test_a_data_placeholder_is_kept_for_the_sandbox_to_stand_in(tmp_path):
    root = repo(
        tmp_path,
        extra='p.add_argument("--data", required=True)',
        readme="    python train.py --data $DATA_DIR --epochs 90\n",
    )
    assert plan_for(root).entry == ["python", "train.py", "--data", "$DATA_DIR", "--epochs", "90"]


def test_entry_overrides_and_no_entry_point_says_so(tmp_path):
    root = repo(tmp_path, extra='p.add_argument("--data", required=True)')
    plan = plan_for(root, entry="python train.py --data 'a b'")
    assert plan.entry == ["python", "train.py", "--data", "a b"]
    assert plan.entry_reason == "given with --entry"
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "model.py").write_text("import torch\nnet = torch.nn.Linear(2, 2).cuda()\n")
    plan = plan_for(lib)
    assert plan.entry is None and "no entry point found" in plan.not_runnable


def test_a_training_module_without_a_main_guard_is_not_the_entry(tmp_path):
    (tmp_path / "trainer.py").write_text(
        "import torch\nclass Trainer:\n    def step(self, loss):\n        loss.backward()\n"
    )
    (tmp_path / "run.py").write_text(
        "from trainer import Trainer\nif __name__ == '__main__':\n    Trainer()\n"
    )
    plan = plan_for(tmp_path)
    assert plan.entry == ["python", "run.py"]
    assert plan.rejected[0]["path"] == "trainer.py" and "__main__" in plan.rejected[0]["why"]
    # a plain script (top-level loop, no guard) is runnable
    (tmp_path / "trainer.py").write_text(
        "import torch\nw = torch.ones(2, requires_grad=True)\nfor _ in range(3):\n"
        "    (w * 2).sum().backward()\n"
    )
    assert plan_for(tmp_path).entry == ["python", "trainer.py"]


def test_a_notebook_is_run_when_no_script_is(tmp_path):
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    nb = {
        "cells": [{**cell, "source": ["import torch\n", "x = torch.ones(2).cuda()\n"]}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "explore.ipynb").write_text(json.dumps(nb))
    plan = plan_for(tmp_path)
    assert plan.entry == ["python", "explore.ipynb"] and "notebook" in plan.entry_reason


def test_findings_are_sorted_into_auto_llm_and_manual(tmp_path):
    (tmp_path / "k.py").write_text(
        "import torch\nfrom flash_attn import flash_attn_func\n"
        "props = torch.cuda.get_device_properties(0)\nx = torch.ones(2).cuda()\n"
    )
    plan = plan_for(tmp_path)
    assert plan.auto == 1
    assert any(item["path"] == "k.py" for item in plan.llm + plan.manual)
    assert all("hint" in item for item in plan.llm + plan.manual)
