"""Oracles for the timing family (tools/catalogue/data/timing.toml): synchronisation, NVTX
ranges and record_stream."""

# ruff: noqa: E501 (the codemods edit in place, without re-wrapping: the expected lines are long)
from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

TIMED = """
import time
import torch


def timed_forward(model, x):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model(x)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start
"""
TIMED_PORTED = """
import time
import torch


def timed_forward(model, x):
    torch.accelerator.synchronize()
    start = time.perf_counter()
    out = model(x)
    torch.accelerator.synchronize()
    return out, time.perf_counter() - start
"""

# on a machine without an accelerator torch.accelerator.synchronize() raises ("Cannot access
# accelerator device when none is available", torch 2.13): the accelerator port guards it
TIMED_GUARDED = """
import time
import torch


def timed_forward(model, x):
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()
    start = time.perf_counter()
    out = model(x)
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()
    return out, time.perf_counter() - start
"""

PAIRS = [
    Pair("TPT001", "tpu", "synchronize", TIMED, TIMED_PORTED),
    Pair("TPT001", "accelerator", "synchronize-guarded", TIMED, TIMED_GUARDED),
    Pair(
        "TPT001",
        "xla",
        "synchronize-waits-for-the-graph",
        """
        import torch

        torch.cuda.synchronize()
        y = torch.zeros(2)
        """,
        """
        import torch
        import torch_xla

        torch_xla.sync(wait=True)
        y = torch.zeros(2)
        """,
    ),
    Pair(
        "TPT001",
        "tpu",
        "other-synchronize-left-alone",
        """
        import torch

        stream = torch.accelerator.current_stream()
        stream.synchronize()
        """,
    ),
    Pair(
        "TPT004",
        "tpu",
        "nvtx-range-and-push-pop",
        # the doc's fix text: push/pop/mark statements go; `with range` becomes
        # record_function (a with block over a push/pop pair is left to a human)
        """
        import torch


        def train_step(model, x):
            torch.cuda.nvtx.range_push("forward")
            loss = model(x).sum()
            torch.cuda.nvtx.range_pop()
            with torch.cuda.nvtx.range("backward"):
                loss.backward()
        """,
        """
        import torch


        def train_step(model, x):
            loss = model(x).sum()
            with torch.profiler.record_function("backward"):
                loss.backward()
        """,
    ),
    Pair(
        "TPT004",
        "accelerator",
        "aliased-nvtx-module",
        """
        import torch
        import torch.cuda.nvtx as nvtx

        with nvtx.range("step"):
            y = torch.zeros(2)
        nvtx.mark("done")
        """,
        """
        import torch

        with torch.profiler.record_function("step"):
            y = torch.zeros(2)
        """,
    ),
    Pair(
        "TPT009",
        "tpu",
        "record-stream-removed",
        """
        import torch

        torch.cuda.current_stream().wait_stream(copy_stream)
        x.record_stream(torch.cuda.current_stream())
        """,
        """
        import torch

        torch.accelerator.current_stream().wait_stream(copy_stream)
        """,
    ),
    Pair(
        "TPT009",
        "accelerator",
        "record-stream-left-for-a-human",
        """
        x.record_stream(side_stream)
        """,
    ),
    Pair(
        "TPT001",
        "tpu",
        "torch-imported-under-an-alias",
        """
        import torch as th

        th.cuda.synchronize()
        y = th.zeros(2)
        """,
        """
        import torch as th

        th.accelerator.synchronize()
        y = th.zeros(2)
        """,
    ),
    Pair(
        "TPT001",
        "tpu",
        "synchronize-imported-by-name",
        """
        import torch
        from torch.cuda import synchronize

        synchronize()
        y = torch.zeros(2)
        """,
        """
        import torch

        torch.accelerator.synchronize()
        y = torch.zeros(2)
        """,
    ),
    Pair(
        "TPT001",
        "accelerator",
        "numba-synchronize-left-alone",
        """
        from numba import cuda

        cuda.synchronize()
        """,
    ),
    Pair(
        "TPT009",
        "tpu",
        "only-statement-of-a-loop",
        # a body must keep a statement
        """
        for t in batch:
            t.record_stream(stream)
        """,
        """
        for t in batch:
            pass
        """,
    ),
    Pair(
        "TPT001",
        "accelerator",
        "one-line-if",
        """
        import torch

        if timing: torch.cuda.synchronize()
        """,
        """
        import torch

        if timing: (torch.accelerator.synchronize() if torch.accelerator.is_available() else None)
        """,
    ),
    Pair(
        "TPT001",
        "accelerator",
        "inside-a-lambda",
        """
        import torch

        sync = lambda: torch.cuda.synchronize()
        """,
        """
        import torch

        sync = lambda: (torch.accelerator.synchronize() if torch.accelerator.is_available() else None)
        """,
    ),
    Pair(
        "TPT001",
        "tpu",
        "semicolon-statements",
        """
        import time
        import torch

        torch.cuda.synchronize(); t0 = time.time()
        """,
        """
        import time
        import torch

        torch.accelerator.synchronize(); t0 = time.time()
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_timing_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
