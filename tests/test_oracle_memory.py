"""Oracles for the memory family (tools/catalogue/data/memory.toml): torch.cuda's memory
statistics, cache and sizes, which torch.accelerator.memory answers."""

# ruff: noqa: E501 (the codemods edit in place, without re-wrapping: the expected lines are long)
from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

PEAK = """
import torch


def report_peak(step_fn, batch):
    torch.cuda.reset_peak_memory_stats()
    step_fn(batch)
    print(f"peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
"""
PEAK_PORTED = """
import torch


def report_peak(step_fn, batch):
    torch.accelerator.memory.reset_peak_memory_stats()
    step_fn(batch)
    print(f"peak {torch.accelerator.memory.max_memory_allocated() / 2**20:.0f} MiB")
"""

PAIRS = [
    Pair("TPM001", "tpu", "peak-memory", PEAK, PEAK_PORTED),
    Pair(
        "TPM001",
        "accelerator",
        "peak-memory-guarded",
        # the accelerator target also runs on the CPU, where the memory calls have no device
        """
        import torch

        peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        """,
        """
        import torch

        peak = (torch.accelerator.memory.max_memory_allocated() if torch.accelerator.is_available() else 0)
        if torch.accelerator.is_available():
            torch.accelerator.memory.reset_peak_memory_stats()
        """,
    ),
    Pair(
        "TPM001",
        "neuron",
        "deprecated-names",
        """
        import torch

        cached = torch.cuda.memory_cached()
        torch.cuda.reset_max_memory_allocated()
        """,
        """
        import torch

        cached = torch.accelerator.memory.memory_reserved()
        torch.accelerator.memory.reset_peak_memory_stats()
        """,
    ),
    Pair(
        "TPM001",
        "tpu",
        "host-memory-and-prose-left-alone",
        """
        import psutil

        total = psutil.virtual_memory().total
        print("torch.cuda.memory_allocated() is not used here")
        """,
    ),
    Pair(
        "TPM002",
        "tpu",
        "empty-cache",
        """
        import gc
        import torch


        def free_memory():
            gc.collect()
            torch.cuda.empty_cache()
        """,
        """
        import gc
        import torch


        def free_memory():
            gc.collect()
            torch.accelerator.memory.empty_cache()
        """,
    ),
    Pair(
        "TPM002",
        "xla",
        "empty-cache-removed",
        """
        import gc
        import torch


        def free_memory():
            gc.collect()
            torch.cuda.empty_cache()
        """,
        """
        import gc


        def free_memory():
            gc.collect()
        """,
    ),
    Pair(
        "TPM004",
        "accelerator",
        "mem-get-info-guarded",
        """
        import torch

        free, total = torch.cuda.mem_get_info()
        """,
        """
        import torch

        free, total = (torch.accelerator.memory.get_memory_info() if torch.accelerator.is_available() else (0, 0))
        """,
    ),
    Pair(
        "TPM006",
        "tpu",
        "total-memory",
        """
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
        """,
        """
        import torch

        total = torch.accelerator.memory.get_memory_info(0)[1]
        """,
    ),
    Pair(
        "TPM006",
        "accelerator",
        "total-memory-guarded",
        """
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
        """,
        """
        import torch

        total = (torch.accelerator.memory.get_memory_info(0)[1] if torch.accelerator.is_available() else 0)
        """,
    ),
    Pair(
        "TPM002",
        "neuron",
        "empty-cache-imported-by-name",
        """
        import torch
        from torch.cuda import empty_cache

        empty_cache()
        y = torch.zeros(2)
        """,
        """
        import torch

        torch.accelerator.memory.empty_cache()
        y = torch.zeros(2)
        """,
    ),
    Pair(
        "TPM002",
        "tpu",
        "own-empty-cache-left-alone",
        """
        def empty_cache():
            cache.clear()


        empty_cache()
        """,
    ),
    Pair(
        "TPM002",
        "xla",
        "only-statement-of-a-function",
        """
        import torch


        def free():
            torch.cuda.empty_cache()


        x = torch.zeros(2)
        """,
        """
        import torch


        def free():
            pass


        x = torch.zeros(2)
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_memory_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
