"""Device, seeding, timing and logging helpers shared by the trainer."""

from __future__ import annotations

import logging
import random
import time

import torch

log = logging.getLogger("trainer")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def get_device(local_rank: int = 0) -> torch.device:
    """The GPU this process owns (or the CPU on a machine without one)."""
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device(f"cuda:{local_rank}")
    log.warning("CUDA is not available, falling back to the CPU")
    return torch.device("cpu")


def to_device(batch, device):
    """Copy every tensor of a batch to `device` (asynchronously from pinned memory)."""
    return tuple(t.to(device, non_blocking=True) for t in batch)


def peak_memory_mib() -> float:
    return torch.cuda.max_memory_allocated() / 2**20


class Timer:
    """Wall-clock timer; waits for the GPU's queued kernels before reading the clock."""

    def __enter__(self) -> Timer:
        torch.cuda.synchronize()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        torch.cuda.synchronize()
        self.elapsed = time.perf_counter() - self.start
