"""Deterministic synthetic stand-ins for the datasets a program downloads.

A program under test often starts with ``torchvision.datasets.MNIST(..., download=True)``,
``datasets.load_dataset("imdb")``, ``tiktoken.get_encoding("gpt2")`` or
``np.memmap("train.bin")`` after a prepare script it never ran. The sandbox has no network
(and usually no torchvision, torchaudio, HF ``datasets`` or tiktoken), so the launcher calls
:func:`install`,
which serves small stand-in modules for those libraries when they are absent and
patches their dataset entry points when they are present. Every dataset handed out
is recorded; :func:`records` lists them for the run's result.
"""

from __future__ import annotations

from . import finder, hub, numpy_files, pretrained, weights
from .data import TEST_SIZE, TRAIN_SIZE, records


def install() -> finder.SyntheticFinder:
    """The import hook (stand-in and patched dataset libraries, tiktoken), numpy's
    token-file readers (``numpy_files``), an offline ``torch.hub.list`` and pretrained
    weights that cannot be downloaded (``weights``; Hugging Face ``from_pretrained``:
    ``pretrained``), for this process."""
    numpy_files.install()
    pretrained.install()
    hub.install()
    weights.install()
    return finder.install()


def uninstall() -> None:
    finder.uninstall()
    numpy_files.uninstall()
    hub.uninstall()
    weights.uninstall()


__all__ = ["TEST_SIZE", "TRAIN_SIZE", "install", "records", "uninstall"]
