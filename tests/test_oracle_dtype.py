"""Oracles for the dtype family (tools/catalogue/data/dtype.toml). Its one rule, TPF001
(float64), is manual on every target: moving a precision-critical computation to the CPU is a
human's choice, so a migration must leave float64 code exactly as it is."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

FLOAT64 = """
import torch

x = torch.randn(n, d).double()
stats = torch.zeros(d, dtype=torch.float64)
"""

PAIRS = [
    Pair("TPF001", "tpu", "float64-left-for-a-human", FLOAT64),
    Pair("TPF001", "xla", "float64-left-for-a-human", FLOAT64),
    Pair("TPF001", "accelerator", "float64-left-alone", FLOAT64),
    Pair(
        "TPF001",
        "tpu",
        "float64-left-while-float16-moves",
        # TPA004 in the same file still turns float16 into bfloat16
        """
        import torch

        x = torch.randn(n, d, dtype=torch.float16).double()
        """,
        """
        import torch

        x = torch.randn(n, d, dtype=torch.bfloat16).double()
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_dtype_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
