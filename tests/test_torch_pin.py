"""An original that fails on torchport's torch while its repository pins another torch
release is not simply "the original fails here too": the verdict names both releases."""

from __future__ import annotations

import torch
from torchport.agents import torch_pin, verifier
from torchport.agents.verdicts import Reason

HERE = torch.__version__.split("+")[0]
FAILED = "the original fails here too: train.py:9: AttributeError: 'FSDP' has no '_streams'"


def _skipped(*requirements: str) -> dict:
    reason = "torch is torchport's own; never installed"
    return {
        "skipped": [
            {"name": "torch", "requirement": r, "source": "requirements.txt:2", "reason": reason}
            for r in requirements
        ]
    }


def test_a_pin_of_another_torch_release_is_named_beside_the_originals_failure():
    v = verifier.Verification("not-runnable", FAILED, code=Reason.BOTH_FAIL)
    v = torch_pin.with_torch_pin(v, _skipped("pytorch::pytorch-cuda=11.7.0", "torch==2.0.0"))
    assert v.reason.startswith(
        f"the original fails on this torch ({HERE}; requirements.txt:2 asks for torch==2.0.0): "
        "train.py:9: AttributeError"
    ), v.reason
    assert "the original fails here too" not in v.reason
    assert f"updated for torch {HERE}" in v.reason


def test_no_pin_or_this_release_leaves_the_reason_alone():
    major_minor = ".".join(HERE.split(".")[:2])
    for environment in ({}, _skipped(f"torch=={major_minor}.0"), _skipped("torch>=2.0")):
        same = verifier.Verification("not-runnable", FAILED, code=Reason.BOTH_FAIL)
        assert torch_pin.with_torch_pin(same, environment).reason == FAILED
    # the reason's words alone do not make it the original's failure: its code does
    worded = verifier.Verification("not-runnable", FAILED, code=Reason.TORCHPORT_CAUSED)
    assert torch_pin.with_torch_pin(worded, _skipped("torch==2.0.0")).reason == FAILED
    other = verifier.Verification("failed", "the port fails: x")  # the original ran
    assert torch_pin.with_torch_pin(other, _skipped("torch==2.0.0")).reason == "the port fails: x"
