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


def get_device(local_rank: int = 0) -> torch.device:
    """The GPU this process owns (or the CPU on a machine without one)."""
    if torch.accelerator.is_available():
        return torch.device("tpu")  # TorchTPU shows each process its own core as tpu:0
    log.warning("CUDA is not available, falling back to the CPU")
    return torch.device("cpu")


def to_device(batch, device):
    """Copy every tensor of a batch to `device` (asynchronously from pinned memory)."""
    return tuple(t.to(device, non_blocking=True) for t in batch)


def peak_memory_mib() -> float:
    return torch.accelerator.memory.max_memory_allocated() / 2**20


class Timer:
    """Wall-clock timer; waits for the GPU's queued kernels before reading the clock."""

    def __enter__(self) -> Timer:
        torch.accelerator.synchronize()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        torch.accelerator.synchronize()
        self.elapsed = time.perf_counter() - self.start
