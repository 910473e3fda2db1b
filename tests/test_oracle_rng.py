"""Oracles for the rng family (tools/catalogue/data/rng.toml): CUDA seeding and generator
state."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

PAIRS = [
    Pair(
        "TPR001",
        "tpu",
        "seed-all-after-manual-seed-goes",
        # torch.manual_seed seeds every device: the CUDA call would repeat it
        """
        import random
        import torch


        def seed_everything(seed: int) -> None:
            random.seed(seed)
            torch.manual_seed(seed)
            torch.cuda.manual_seed_all(seed)
        """,
        """
        import random
        import torch


        def seed_everything(seed: int) -> None:
            random.seed(seed)
            torch.manual_seed(seed)
        """,
    ),
    Pair(
        "TPR001",
        "accelerator",
        "cuda-seed-becomes-torch-seed",
        """
        import torch

        torch.cuda.manual_seed(1234)
        first = torch.cuda.initial_seed()
        """,
        """
        import torch

        torch.manual_seed(1234)
        first = torch.initial_seed()
        """,
    ),
    Pair(
        "TPR001",
        "tpu",
        "numpy-seed-left-alone",
        """
        import numpy as np

        np.random.seed(1234)
        """,
    ),
    Pair(
        "TPR002",
        "tpu",
        "rng-state-through-the-public-generator",
        # get_rng_state is internal from torch 2.13 in the torch-tpu wheel; the generator
        # behind it is public, and set_rng_state is not internal
        """
        import torch

        state = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(state)
        """,
        """
        import torch

        state = torch.tpu.default_generators[0].get_state()
        torch.tpu.set_rng_state(state)
        """,
    ),
    Pair(
        "TPR002",
        "neuron",
        "rng-state-of-the-device-module",
        """
        import torch

        state = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(state)
        """,
        """
        import torch

        state = torch.get_device_module("neuron").get_rng_state()
        torch.get_device_module("neuron").set_rng_state(state)
        """,
    ),
    Pair(
        "TPR002",
        "accelerator",
        "rng-state-left-for-a-human",
        """
        import torch

        state = torch.cuda.get_rng_state()
        """,
    ),
    Pair(
        "TPR001",
        "neuron",
        "random-seed",
        """
        import torch

        s = torch.cuda.seed()
        """,
        """
        import torch

        s = torch.seed()
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_rng_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
