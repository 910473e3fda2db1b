"""Oracles for the dataloader family (tools/catalogue/data/dataloader.toml): pinned memory and
non-blocking copies."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

LOADER = """
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
"""

PAIRS = [
    Pair(
        "TPL001",
        "neuron",
        "pin-memory-dropped",
        LOADER,
        """
        from torch.utils.data import DataLoader

        loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
        """,
    ),
    Pair(
        "TPL001",
        "accelerator",
        "pin-memory-where-an-accelerator-is",
        """
        from torch.utils.data import DataLoader

        loader = DataLoader(dataset, batch_size=64, pin_memory=True)
        """,
        # the codemods edit in place: no re-wrapping, the new import after the others
        """
        from torch.utils.data import DataLoader
        import torch

        loader = DataLoader(dataset, batch_size=64, pin_memory=torch.accelerator.is_available())
        """,
    ),
    Pair("TPL001", "tpu", "pinning-works-on-tpu-left-alone", LOADER),
    Pair(
        "TPL001",
        "neuron",
        "pin-memory-false-left-alone",
        """
        from torch.utils.data import DataLoader

        loader = DataLoader(dataset, batch_size=64, pin_memory=False)
        """,
    ),
    Pair(
        "TPL002",
        "neuron",
        "pin-memory-call-removed",
        """
        import torch


        def collate(samples):
            images = torch.stack([s[0] for s in samples]).pin_memory()
            labels = torch.tensor([s[1] for s in samples]).pin_memory()
            return images, labels
        """,
        """
        import torch


        def collate(samples):
            images = torch.stack([s[0] for s in samples])
            labels = torch.tensor([s[1] for s in samples])
            return images, labels
        """,
    ),
    Pair(
        "TPL002",
        "accelerator",
        "pin-memory-call-removed",
        """
        pinned = batch.pin_memory()
        xs, ys = xs.pin_memory(), ys.pin_memory()
        """,
        # a statement left assigning names to themselves had no other job: it goes
        """
        pinned = batch
        """,
    ),
    Pair(
        "TPL002",
        "tpu",
        "pin-memory-call-left-alone",
        """
        batch = batch.pin_memory()
        """,
    ),
    Pair(
        "TPL003",
        "xla",
        "non-blocking-dropped",
        """
        def to_device(x, device):
            return x.to(device, non_blocking=True)
        """,
        """
        def to_device(x, device):
            return x.to(device)
        """,
    ),
    Pair(
        "TPL003",
        "tpu",
        "non-blocking-left-alone",
        """
        def to_device(x, device):
            return x.to(device, non_blocking=True)
        """,
    ),
    Pair(
        "TPL001",
        "xla",
        "middle-argument",
        """
        from torch.utils.data import DataLoader

        loader = DataLoader(ds, pin_memory=True, batch_size=4)
        """,
        """
        from torch.utils.data import DataLoader

        loader = DataLoader(ds, batch_size=4)
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_dataloader_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
