"""Generators for synthetic samples, and the record of what was handed out."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a sample is made: importing the sandbox
    import torch  # (the agent graph does) must not cost torch's start-up

TRAIN_SIZE = 512
TEST_SIZE = 128

CHUNK = 1024  # images drawn at a time

_RECORDS: list[dict[str, Any]] = []


def record(library: str, dataset: str, size: int, **extra: Any) -> None:
    entry = {"library": library, "dataset": dataset, "size": int(size), **extra}
    if entry not in _RECORDS:
        _RECORDS.append(entry)


def records() -> list[dict[str, Any]]:
    return [dict(r) for r in _RECORDS]


# Batches of the program's batch size a stand-in split holds at least (``batch.hint``):
# more for training than for testing, as the real splits differ (50,000 / 10,000).
BATCHES = {True: 4, False: 3}


def size_for(train: bool, real: int | None = None) -> int:
    """Samples in a stand-in split: the default size, or a few batches of the batch size
    the program uses where that is larger, never more than the real split's ``real``."""
    from . import batch

    n = TRAIN_SIZE if train else TEST_SIZE
    b = batch.hint()
    if b is not None:
        n = max(n, BATCHES[bool(train)] * b)
    return min(n, real) if real else n


def generator(*key: object) -> torch.Generator:
    """A generator seeded from the dataset's identity, not from the global RNG, so the
    data is the same whatever the program seeds (and the program's RNG is untouched)."""
    import torch

    seed = zlib.crc32("/".join(str(k) for k in key).encode())
    return torch.Generator().manual_seed(seed)


def labels(n: int, classes: int, gen: torch.Generator) -> torch.Tensor:
    import torch

    return torch.randint(0, classes, (n,), generator=gen, dtype=torch.int64)


def images(
    n: int, shape: tuple[int, ...], targets: torch.Tensor, classes: int, gen: torch.Generator
) -> torch.Tensor:
    """uint8 images of ``shape`` (HxW or HxWxC): a per-class pattern plus noise, so a
    model can learn something and losses go down."""
    import torch

    protos = torch.rand((classes, *shape), generator=gen) * 200.0
    out = torch.empty((n, *shape), dtype=torch.uint8)
    for start in range(0, n, CHUNK):  # in chunks: no float copy of a large split at once
        part = targets[start : start + CHUNK]
        noise = torch.randn((len(part), *shape), generator=gen) * 30.0
        out[start : start + CHUNK] = (protos[part] + noise + 20.0).clamp(0, 255).to(torch.uint8)
    return out


def waveforms(
    n: int, length: int, targets: torch.Tensor, sample_rate: int, gen: torch.Generator
) -> torch.Tensor:
    """float32 [n, 1, length] tones whose pitch depends on the label, plus noise."""
    import torch

    t = torch.arange(length, dtype=torch.float32) / sample_rate
    freq = 200.0 + 60.0 * targets.to(torch.float32)
    tone = 0.5 * torch.sin(2 * torch.pi * freq[:, None] * t[None, :])
    return (tone + 0.05 * torch.randn((n, length), generator=gen)).unsqueeze(1)


_WORDS = {
    1: [
        "good",
        "great",
        "excellent",
        "wonderful",
        "loved",
        "best",
        "fun",
        "brilliant",
        "moving",
        "superb",
    ],
    0: ["bad", "awful", "boring", "worst", "terrible", "dull", "poor", "waste", "hated", "weak"],
}
_FILLER = [
    "the",
    "a",
    "movie",
    "film",
    "story",
    "plot",
    "actor",
    "scene",
    "it",
    "was",
    "and",
    "this",
    "of",
    "to",
]


def sentences(targets: torch.Tensor, gen: torch.Generator, words: int = 24) -> list[str]:
    """Short texts whose sentiment words follow the (binary or folded) label."""
    import torch

    out = []
    for label in targets.tolist():
        pool = _WORDS[label % 2]
        picks = torch.randint(0, 100, (words,), generator=gen).tolist()
        toks = [pool[p % len(pool)] if p < 30 else _FILLER[p % len(_FILLER)] for p in picks]
        out.append(" ".join(toks) + ".")
    return out
