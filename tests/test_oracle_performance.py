"""Oracles for the performance family (tools/catalogue/data/performance.toml): TPH005, the XLA
step boundary, is its one auto rule (xla only); the others are advice a migration leaves to a
human."""

# ruff: noqa: E501 (the codemods edit in place, without re-wrapping: the expected lines are long)
from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

LOADER_LOOP = """
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""

PAIRS = [
    Pair(
        "TPH005",
        "xla",
        "loader-loop-through-mp-device-loader",
        LOADER_LOOP,
        """
        import torch_xla
        import torch_xla.distributed.parallel_loader

        for x, y in torch_xla.distributed.parallel_loader.MpDeviceLoader(loader, torch_xla.device()):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        """,
    ),
    Pair(
        "TPH005",
        "xla",
        "other-loop-gets-a-sync",
        """
        for step in range(100):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        """,
        """
        import torch_xla

        for step in range(100):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            torch_xla.sync()
        """,
    ),
    Pair("TPH005", "tpu", "eager-target-left-alone", LOADER_LOOP),
    Pair("TPH005", "accelerator", "eager-target-left-alone", LOADER_LOOP),
    Pair(
        "TPH005",
        "xla",
        "loop-without-backward-left-alone",
        """
        for x, y in loader:
            preds.append(model(x).argmax(-1))
        """,
    ),
    Pair(
        "TPH001",
        "tpu",
        "item-in-loop-left-for-a-human",
        """
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            print(loss.item())
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_performance_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
