"""Deterministic synthetic stand-ins for the datasets a program downloads.

A program under test often starts with ``torchvision.datasets.MNIST(..., download=True)``
or ``datasets.load_dataset("imdb")``. The sandbox has no network (and usually no
torchvision, torchaudio or HF ``datasets``), so the launcher calls :func:`install`,
which serves small stand-in modules for those libraries when they are absent and
patches their dataset entry points when they are present. Every dataset handed out
is recorded; :func:`records` lists them for the run's result.
"""

from __future__ import annotations

from .data import TEST_SIZE, TRAIN_SIZE, records
from .finder import install, uninstall

__all__ = ["TEST_SIZE", "TRAIN_SIZE", "install", "records", "uninstall"]
