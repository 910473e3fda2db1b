"""Oracles for the distributed family (tools/catalogue/data/distributed.toml): NCCL backends
and NCCL settings."""

# ruff: noqa: E501 (the codemods edit in place, without re-wrapping: the expected lines are long)
from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

INIT = """
import torch.distributed as dist

dist.init_process_group(backend="nccl")
"""

PAIRS = [
    Pair(
        "TPN001",
        "tpu",
        "nccl-backend",
        INIT,
        """
        import torch.distributed as dist

        dist.init_process_group(backend="tpu")
        """,
    ),
    Pair(
        "TPN001",
        "neuron",
        "nccl-backend",
        INIT,
        """
        import torch.distributed as dist

        dist.init_process_group(backend="neuron", init_method="env://")
        """,
    ),
    Pair(
        "TPN001",
        "xla",
        "nccl-backend",
        INIT,
        # the "xla" backend is registered by importing torch_xla's xla_backend
        """
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend

        dist.init_process_group(backend="xla", init_method="xla://")
        """,
    ),
    Pair(
        "TPN001",
        "accelerator",
        "backend-for-the-device",
        """
        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl")
        """,
        """
        import torch
        import torch.distributed as dist

        dist.init_process_group(torch.distributed.get_default_backend_for_device(<accelerator>))
        """,
    ),
    Pair(
        "TPN001",
        "tpu",
        "gloo-left-alone",
        """
        import torch.distributed as dist

        dist.init_process_group(backend="gloo")
        """,
    ),
    Pair(
        "TPN002",
        "tpu",
        "backend-default-of-an-option",
        """
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--dist-backend", default="nccl")
        """,
        """
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--dist-backend", default="tpu")
        """,
    ),
    Pair(
        "TPN002",
        "accelerator",
        "backend-default-of-an-option",
        """
        import argparse

        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("--dist-backend", default="nccl")
        """,
        """
        import argparse

        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("--dist-backend", default=torch.distributed.get_default_backend_for_device(<accelerator>))
        """,
    ),
    Pair(
        "TPN002",
        "tpu",
        "docstring-mentioning-nccl-left-alone",
        '''
        def setup():
            """nccl"""
            return None
        ''',
    ),
    Pair(
        "TPN006",
        "tpu",
        "nccl-variables-removed",
        """
        import os

        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_P2P_DISABLE"] = "1"
        os.environ["MASTER_PORT"] = "29500"
        """,
        """
        import os

        os.environ["MASTER_PORT"] = "29500"
        """,
    ),
    Pair(
        "TPN006",
        "accelerator",
        "nccl-variables-left-alone",
        """
        import os

        os.environ["NCCL_DEBUG"] = "INFO"
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_distributed_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
