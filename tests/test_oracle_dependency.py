"""Oracles for the dependency family (tools/catalogue/data/dependency.toml): CUDA builds of torch
in requirements files (TPP003, the family's one auto rule) and CUDA-only imports, which are
left for a human (TPP001 is manual on every target)."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

REQUIREMENTS = """
--extra-index-url https://download.pytorch.org/whl/cu124
torch==2.4.0+cu124
torchaudio==2.4.0+cu124
numpy
"""

PAIRS = [
    Pair(
        "TPP003",
        "tpu",
        "requirements-pin",
        REQUIREMENTS,
        """
        torch>=2.11,<=2.15
        torch-tpu
        torchaudio
        numpy
        """,
        file="requirements.txt",
    ),
    Pair(
        "TPP003",
        "accelerator",
        "requirements-pin",
        REQUIREMENTS,
        """
        torch==2.4.0
        torchaudio==2.4.0
        numpy
        """,
        file="requirements.txt",
    ),
    Pair(
        "TPP003",
        "neuron",
        "requirements-pin",
        REQUIREMENTS,
        """
        torch
        torch-neuronx>=2.14
        torchaudio
        numpy
        """,
        file="requirements.txt",
    ),
    Pair(
        "TPP003",
        "tpu",
        "plain-torch-left-alone",
        """
        torch>=2.11
        numpy
        """,
        file="requirements.txt",
    ),
    Pair(
        "TPP001",
        "tpu",
        "cuda-only-import-left-for-a-human",
        """
        import pynvml
        import torch

        pynvml.nvmlInit()
        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPP001",
        "accelerator",
        "cuda-only-import-left-for-a-human",
        """
        import cupy as cp

        a = cp.zeros(3)
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_dependency_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
