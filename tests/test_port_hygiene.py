"""Diffs a reviewer would reject (issue 31): a rewrite must not leave a statement that
repeats one a few lines above it in the same block, and the comment right above a statement
a codemod deletes goes with it instead of ending up above unrelated code."""

from __future__ import annotations

from pathlib import Path

import numpy
import pytest
from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan

SEEDS = """\
import random

import numpy as np
import torch


def seed_all(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    torch.cuda.manual_seed_all(seed)


def reseed(seed):
    torch.manual_seed(seed)
    noise = torch.rand(3)
    torch.cuda.manual_seed(seed)
    return noise
"""


def migrate(tmp_path: Path, source: str, target: str) -> str:
    path = tmp_path / "prog.py"
    path.write_text(source, encoding="utf-8")
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    return migrate_python(source, findings, target, path.name).source


def function(source: str, name: str) -> str:
    start = source.index(f"def {name}(")
    end = source.find("\ndef ", start + 1)
    return source[start : end if end != -1 else None]


@pytest.mark.parametrize("target", TARGETS)
def test_a_rewritten_seed_call_repeating_one_above_it_goes(tmp_path, target):
    out = migrate(tmp_path, SEEDS, target)
    seed_all = function(out, "seed_all")
    assert seed_all.count("torch.manual_seed(seed)") == 1, seed_all
    assert "np.random.seed(seed)" in seed_all and "random.seed(seed)" in seed_all
    assert migrate(tmp_path, out, target) == out


@pytest.mark.parametrize("target", TARGETS)
def test_a_reseed_after_a_draw_is_not_a_repeat(tmp_path, target):
    """A draw between the two calls: the second one resets the generator, so it stays."""
    reseed = function(migrate(tmp_path, SEEDS, target), "reseed")
    assert reseed.count("torch.manual_seed(seed)") == 2, reseed


COMMENTS = """\
import torch
import torch.backends.cudnn as cudnn


def setup(seed):
    # speed up
    cudnn.benchmark = True
    model = torch.nn.Linear(2, 2)

    # let cuDNN pick its kernels
    cudnn.benchmark = True
    # Data loading
    dataset = list(range(4))
    # Model
    cudnn.deterministic = False
    # the optimizer follows
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, dataset, optimizer


def header(model):
    # Optimizer
    torch.backends.cudnn.benchmark = True
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return optimizer
"""
SETUP_AFTER = """\
def setup(seed):
    model = torch.nn.Linear(2, 2)

    # Data loading
    dataset = list(range(4))
    # the optimizer follows
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, dataset, optimizer
"""


@pytest.mark.parametrize("target", ["tpu", "neuron", "xla"])
def test_the_comment_above_a_deleted_statement_goes_with_it(tmp_path, target):
    out = migrate(tmp_path, COMMENTS, target)
    assert "cudnn" not in out, out  # the statements went (TPB001 on these targets)
    assert function(out, "setup").rstrip() == SETUP_AFTER.rstrip()
    assert "# speed up" not in out and "# Model" not in out
    assert migrate(tmp_path, out, target) == out


@pytest.mark.parametrize("target", ["tpu", "neuron", "xla"])
def test_a_comment_that_heads_the_next_statement_stays(tmp_path, target):
    """``# Optimizer`` names the statement after the deleted one, not the deleted one."""
    header = function(migrate(tmp_path, COMMENTS, target), "header")
    assert "    # Optimizer\n    optimizer = torch.optim.SGD(" in header


LEGACY = """\
import torch


def build(mean, rows):
    return torch.cuda.FloatTensor(mean), torch.cuda.FloatTensor(rows)
"""


def test_a_legacy_constructor_of_data_keeps_the_data(tmp_path):
    """``torch.cuda.FloatTensor(self.mean)`` (dino's PCA whitening) holds the mean's values;
    rewritten as ``torch.empty(self.mean)`` it read the mean as a shape. The accelerator
    port runs here (it falls back to the CPU) and is compared value for value."""
    port = migrate(tmp_path, LEGACY, "accelerator")
    assert "torch.empty(mean" not in port, port
    namespace: dict = {}
    exec(compile(port, "prog.py", "exec"), namespace)
    data, sized = namespace["build"](numpy.array([0.5, 1.5, 2.5]), 4)
    assert data.tolist() == [0.5, 1.5, 2.5] and data.dtype.is_floating_point
    assert sized.shape == (4,)
