"""A repository that keeps a library in a git submodule, copied without ``--recursive``.

The submodule's folder is empty, the program's ``import`` of it fails in its own code, and
the verdict said "the original fails here too: ModuleNotFoundError", blaming the program for
the state of the copy. It now names the empty submodule and how to check it out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.agents.submodules import declared, empty_submodules
from torchport.agents.verifier import RunLimits, verify_tree

_GITMODULES = """[submodule "lib/bars"]
\tpath = lib/bars
\turl = https://example.invalid/bars.git
[submodule "third_party/full"]
\tpath = third_party/full
\turl = https://example.invalid/full.git
"""
_TRAIN = """import os, sys
sys.path.append(os.path.join(os.path.dirname(__file__), "lib", "bars"))
from bars.bar import Bar
import torch
model = torch.nn.Linear(4, 1).to("{device}")
"""


def _repo(root: Path, device: str) -> Path:
    (root / "lib" / "bars").mkdir(parents=True)  # an unchecked-out submodule: empty
    (root / "third_party" / "full").mkdir(parents=True)
    (root / "third_party" / "full" / "x.py").write_text("")
    (root / ".gitmodules").write_text(_GITMODULES)
    (root / "train.py").write_text(_TRAIN.format(device=device))
    return root


def test_only_the_empty_submodules_are_listed(tmp_path: Path):
    root = _repo(tmp_path, "cuda")
    assert [s.path for s in declared(root)] == ["lib/bars", "third_party/full"]
    assert [(s.path, s.url) for s in empty_submodules(root)] == [
        ("lib/bars", "https://example.invalid/bars.git")
    ]


@pytest.mark.slow
def test_an_import_from_an_empty_submodule_is_named_not_blamed_on_the_program(tmp_path):
    original = _repo(tmp_path / "original", "cuda")
    port = _repo(tmp_path / "port", "tpu")
    budget = RunLimits(steps=2, timeout_s=120, memory_mb=2048)
    v, _ = verify_tree(original, port, ["python", "train.py"], "tpu", budget, None)
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert v.reason.startswith(
        "the repository's git submodule lib/bars (https://example.invalid/bars.git) is empty"
    )
    assert "train.py:3" in v.reason
    assert "git submodule update --init" in v.next_step
