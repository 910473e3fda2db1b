"""Oracles for the compile family (tools/catalogue/data/compile.toml): torch.compile modes
and backends, profiler options and columns."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

PAIRS = [
    Pair(
        "TPC001",
        "tpu",
        "cuda-graph-modes-dropped",
        """
        import torch

        model = torch.compile(model, mode="reduce-overhead")
        net.compile(mode="max-autotune")
        """,
        """
        import torch

        model = torch.compile(model)
        net.compile()
        """,
    ),
    Pair(
        "TPC001",
        "accelerator",
        "mode-dropped-other-options-kept",
        """
        import torch

        model = torch.compile(model, mode="max-autotune-no-cudagraphs", fullgraph=True)
        """,
        """
        import torch

        model = torch.compile(model, fullgraph=True)
        """,
    ),
    Pair(
        "TPC001",
        "tpu",
        "default-mode-left-alone",
        """
        import torch

        model = torch.compile(model, mode="default")
        """,
    ),
    Pair(
        "TPC002",
        "tpu",
        "tpu-backend",
        # the doc allows backend="tpu" or no backend (the default for TPU inputs)
        """
        import torch

        compiled = torch.compile(model, backend="inductor")
        """,
        """
        import torch

        compiled = torch.compile(model, backend="tpu")
        """,
    ),
    Pair(
        "TPC002",
        "neuron",
        "neuron-backend",
        """
        import torch

        compiled = torch.compile(model, backend="inductor")
        """,
        """
        import torch

        compiled = torch.compile(model, backend="neuron")
        """,
    ),
    Pair(
        "TPC002",
        "xla",
        "openxla-backend",
        """
        import torch

        compiled = torch.compile(model, backend="cudagraphs")
        """,
        """
        import torch

        compiled = torch.compile(model, backend="openxla")
        """,
    ),
    Pair(
        "TPC002",
        "accelerator",
        "backend-dropped",
        """
        import torch

        compiled = torch.compile(model, backend="inductor", dynamic=False)
        """,
        """
        import torch

        compiled = torch.compile(model, dynamic=False)
        """,
    ),
    Pair(
        "TPC002",
        "accelerator",
        "eager-backend-left-alone",
        """
        import torch

        compiled = torch.compile(model, backend="eager")
        """,
    ),
    Pair(
        "TPC004",
        "tpu",
        "use-cuda-becomes-use-device",
        """
        import torch

        with torch.autograd.profiler.profile(use_cuda=True) as prof:
            model(x)
        """,
        """
        import torch

        with torch.autograd.profiler.profile(use_device="tpu") as prof:
            model(x)
        """,
    ),
    Pair(
        "TPC004",
        "accelerator",
        "use-device-of-the-accelerator",
        """
        import torch

        with torch.autograd.profiler.profile(use_cuda=True) as prof:
            model(x)
        """,
        """
        import torch

        with torch.autograd.profiler.profile(use_device=(<accelerator>).type) as prof:
            model(x)
        """,
    ),
    Pair(
        "TPC005",
        "tpu",
        "sort-column",
        """
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
        """,
        # the doc's example gives self_device_time_total; cuda_time_total is inclusive
        # time, and torch's profiler names that column device_time_total
        """
        print(prof.key_averages().table(sort_by="device_time_total", row_limit=10))
        """,
    ),
    Pair(
        "TPC005",
        "accelerator",
        "sort-column",
        """
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
        """,
        """
        print(prof.key_averages().table(sort_by="device_time_total", row_limit=10))
        """,
    ),
    Pair(
        "TPC005",
        "neuron",
        "self-column-and-export-stacks",
        """
        print(prof.key_averages().table(sort_by="self_cuda_time_total"))
        prof.export_stacks("stacks.txt", "self_cuda_time_total")
        """,
        """
        print(prof.key_averages().table(sort_by="self_device_time_total"))
        prof.export_stacks("stacks.txt", "self_privateuse1_time_total")
        """,
    ),
    Pair(
        "TPC005",
        "tpu",
        "prose-mentioning-cuda-time-left-alone",
        """
        print("sorted by cuda_time_total, the slowest first")
        """,
    ),
    Pair(
        "TPC001",
        "neuron",
        "decorator-mode-dropped",
        """
        import torch


        @torch.compile(mode="reduce-overhead")
        def step(x):
            return x * 2
        """,
        """
        import torch


        @torch.compile()
        def step(x):
            return x * 2
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_compile_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
