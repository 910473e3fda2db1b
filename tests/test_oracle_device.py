"""Oracles for the device family (tools/catalogue/data/device.toml): `.cuda()`, device strings,
`is_cuda`, and the `torch.cuda` device queries."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

CUDA_CALLS = """
import torch

model = torch.nn.Linear(16, 4).cuda()
x = torch.randn(8, 16).cuda(local_rank)
"""

PAIRS = [
    Pair(
        "TPD001",
        "tpu",
        "cuda-method-index-dropped",
        CUDA_CALLS,
        # a TorchTPU process sees one device, tpu:0: the local rank's index goes
        """
        import torch

        model = torch.nn.Linear(16, 4).to("tpu")
        x = torch.randn(8, 16).to("tpu")
        """,
    ),
    Pair(
        "TPD001",
        "tpu",
        "cuda-method-to-the-device-variable",
        """
        import torch

        device = torch.device("cuda")
        model = torch.nn.Linear(16, 4).cuda()
        """,
        """
        import torch

        device = torch.device("tpu")
        model = torch.nn.Linear(16, 4).to(device)
        """,
    ),
    Pair(
        "TPD001",
        "neuron",
        "cuda-method-keeps-index",
        CUDA_CALLS,
        """
        import torch

        model = torch.nn.Linear(16, 4).to("neuron")
        x = torch.randn(8, 16).to(torch.device("neuron", local_rank))
        """,
    ),
    Pair(
        "TPD001",
        "accelerator",
        "cuda-method-to-the-accelerator",
        """
        import torch

        model = torch.nn.Linear(16, 4).cuda()
        """,
        """
        import torch

        model = torch.nn.Linear(16, 4).to(<accelerator>)
        """,
    ),
    Pair(
        "TPD002",
        "tpu",
        "device-strings",
        """
        import torch

        x = torch.zeros(4, 4, device="cuda")
        w = torch.randn(4, 4).to("cuda:1")
        z = torch.ones(2, device="cuda:0")
        print("moving the model to cuda")
        """,
        # "cuda:1" is a second device a TorchTPU process cannot have; "cuda:0" is its own
        """
        import torch

        x = torch.zeros(4, 4, device="tpu")
        w = torch.randn(4, 4).to("tpu")
        z = torch.ones(2, device="tpu:0")
        print("moving the model to cuda")
        """,
    ),
    Pair(
        "TPD002",
        "tpu",
        "device-constructor-index",
        """
        import torch

        mine = torch.device("cuda", local_rank)
        first = torch.device("cuda", 0)
        """,
        """
        import torch

        mine = torch.device("tpu")
        first = torch.device("tpu", 0)
        """,
    ),
    Pair(
        "TPD002",
        "neuron",
        "device-string",
        """
        import torch

        x = torch.zeros(4, device="cuda")
        """,
        """
        import torch

        x = torch.zeros(4, device="neuron")
        """,
    ),
    Pair(
        "TPD002",
        "accelerator",
        "device-string",
        """
        import torch

        x = torch.zeros(4, device="cuda")
        """,
        # a string stays a string: the accelerator's type, an index-less device
        """
        import torch

        x = torch.zeros(4, device=(<accelerator>).type)
        """,
    ),
    Pair(
        "TPD002",
        "accelerator",
        "cpu-and-prose-left-alone",
        """
        import torch

        x = torch.zeros(4, device="cpu")
        log.info("no cuda device here")
        """,
    ),
    Pair(
        "TPD004",
        "tpu",
        "is-cuda",
        """
        import torch


        def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
            if not x.is_cuda:
                x = x.to(device)
            return x
        """,
        """
        import torch


        def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
            if not x.is_tpu:
                x = x.to(device)
            return x
        """,
    ),
    Pair(
        "TPD004",
        "neuron",
        "is-cuda",
        """
        on_gpu = x.is_cuda
        """,
        """
        on_gpu = x.device.type == "neuron"
        """,
    ),
    Pair(
        "TPD004",
        "accelerator",
        "is-cuda",
        """
        on_gpu = x.is_cuda
        """,
        """
        on_gpu = x.device.type != "cpu"
        """,
    ),
    Pair(
        "TPD008",
        "tpu",
        "device-count",
        """
        import torch
        import torch.multiprocessing as mp

        world_size = torch.cuda.device_count()
        mp.spawn(train, args=(world_size,), nprocs=world_size)
        """,
        # the spawn also gets TorchTPU's launch step (TPN010; TARGETS.md, tpu: Distributed)
        """
        import torch
        import torch.multiprocessing as mp

        world_size = torch.accelerator.device_count()
        torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=world_size)
        mp.spawn(train, args=(world_size,), nprocs=world_size)
        """,
    ),
    Pair(
        "TPD008",
        "xla",
        "addressable-device-count",
        """
        import torch

        world_size = torch.cuda.device_count()
        """,
        """
        import torch_xla.runtime

        world_size = torch_xla.runtime.addressable_runtime_device_count()
        """,
    ),
    Pair(
        "TPD010",
        "tpu",
        "set-device-removed",
        """
        import os
        import torch

        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        """,
        """
        import os

        local_rank = int(os.environ["LOCAL_RANK"])
        """,
    ),
    Pair(
        "TPD010",
        "accelerator",
        "set-device-index",
        # guarded: the accelerator target also runs on the CPU, where there is no index to set
        """
        import os
        import torch

        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        """,
        """
        import os
        import torch

        local_rank = int(os.environ["LOCAL_RANK"])
        if torch.accelerator.is_available():
            torch.accelerator.set_device_index(local_rank)
        """,
    ),
    Pair(
        "TPD008",
        "accelerator",
        "cuda-module-imported-from-torch",
        """
        import torch
        from torch import cuda

        n = cuda.device_count()
        y = torch.zeros(2)
        """,
        """
        import torch

        n = torch.accelerator.device_count()
        y = torch.zeros(2)
        """,
    ),
    Pair(
        "TPD008",
        "tpu",
        "cupy-device-count-left-alone",
        """
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        """,
    ),
    Pair(
        "TPD003",
        "tpu",
        "built-device-string",
        """
        import torch

        x = torch.zeros(2, device=f"cuda:{local_rank}")
        y = torch.ones(2).to("cuda:%d" % rank)
        """,
        """
        import torch

        x = torch.zeros(2, device="tpu")
        y = torch.ones(2).to("tpu")
        """,
    ),
    Pair(
        "TPD003",
        "neuron",
        "built-device-string",
        """
        import torch

        x = torch.zeros(2, device=f"cuda:{local_rank}")
        """,
        """
        import torch

        x = torch.zeros(2, device=f"neuron:{local_rank}")
        """,
    ),
    Pair(
        "TPD005",
        "tpu",
        "integer-device-and-ddp-ids",
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = model.to(local_rank)
        model = DDP(model, device_ids=[local_rank], output_device=local_rank)
        """,
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = model.to(torch.device("tpu"))
        model = DDP(model)
        """,
    ),
    Pair(
        "TPD005",
        "tpu",
        "integer-that-is-no-device-left-alone",
        """
        import torch

        x = torch.zeros(2).to(torch.float32)
        y = x.to(steps)
        """,
    ),
    Pair(
        "TPD007",
        "tpu",
        "cuda-else-cpu",
        """
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        """,
        """
        import torch

        device = torch.device("tpu" if torch.accelerator.is_available() else "cpu")
        """,
    ),
    Pair(
        "TPD007",
        "tpu",
        "program-choice-kept",
        """
        import torch

        use_cuda = not args.no_cuda and torch.cuda.is_available()
        if use_cuda:
            device = torch.device("cuda")
        else:
            device = torch.device("cpu")
        """,
        """
        import torch

        use_cuda = not args.no_cuda and torch.accelerator.is_available()
        if use_cuda:
            device = torch.device("tpu")
        else:
            device = torch.device("cpu")
        """,
    ),
    Pair(
        "TPD006",
        "xla",
        "is-available-is-true",
        """
        import torch

        use_accel = torch.cuda.is_available()
        y = torch.zeros(2)
        """,
        """
        import torch

        use_accel = True
        y = torch.zeros(2)
        """,
    ),
    Pair(
        "TPD010",
        "tpu",
        "only-statement-of-an-if",
        """
        import torch

        if local_rank >= 0:
            torch.cuda.set_device(local_rank)
        x = torch.zeros(2)
        """,
        # an if left empty whose test does nothing goes with it
        """
        import torch

        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPD010",
        "tpu",
        "only-statement-of-an-if-whose-test-calls",
        """
        import torch

        if init_distributed():
            torch.cuda.set_device(local_rank)
        x = torch.zeros(2)
        """,
        # the test's call has effects: it stays
        """
        import torch

        if init_distributed():
            pass
        x = torch.zeros(2)
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_device_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
