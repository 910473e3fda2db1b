"""Oracles for the serialization family (tools/catalogue/data/serialization.toml): where
torch.load puts a checkpoint's tensors."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

CUDA_LOAD = """
import torch

ckpt = torch.load("model.pt", map_location="cuda:0")
"""

PAIRS = [
    Pair(
        "TPS001",
        "tpu",
        "onto-the-device",
        # tensors used straight from the checkpoint must land where the model is
        CUDA_LOAD,
        """
        import torch

        ckpt = torch.load("model.pt", map_location="tpu")
        """,
    ),
    Pair(
        "TPS001",
        "tpu",
        "onto-the-device-variable",
        """
        import torch

        device = torch.device("cuda")
        ckpt = torch.load("model.pt", map_location="cuda")
        """,
        """
        import torch

        device = torch.device("tpu")
        ckpt = torch.load("model.pt", map_location=device)
        """,
    ),
    Pair(
        "TPS001",
        "accelerator",
        "onto-the-cpu",
        CUDA_LOAD,
        """
        import torch

        ckpt = torch.load("model.pt", map_location="cpu")
        """,
    ),
    Pair(
        "TPS001",
        "xla",
        "onto-the-cpu",
        CUDA_LOAD,
        """
        import torch

        ckpt = torch.load("model.pt", map_location="cpu")
        """,
    ),
    Pair(
        "TPS002",
        "tpu",
        "map-location-added",
        """
        import torch

        state = torch.load(args.resume)
        model.load_state_dict(state["model"])
        """,
        """
        import torch

        state = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(state["model"])
        """,
    ),
    Pair(
        "TPS002",
        "accelerator",
        "map-location-added",
        """
        import torch

        state = torch.load(args.resume)
        """,
        """
        import torch

        state = torch.load(args.resume, map_location="cpu")
        """,
    ),
    Pair(
        "TPS002",
        "tpu",
        "cpu-map-location-left-alone",
        """
        import torch

        state = torch.load(args.resume, map_location="cpu", weights_only=True)
        """,
    ),
    Pair(
        "TPS001",
        "neuron",
        "device-constructor",
        """
        import torch

        ckpt = torch.load(path, map_location=torch.device("cuda"))
        """,
        """
        import torch

        ckpt = torch.load(path, map_location="neuron")
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_serialization_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
