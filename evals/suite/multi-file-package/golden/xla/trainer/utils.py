"""Device, seeding, timing and logging helpers shared by the trainer."""

from __future__ import annotations

import logging
import random
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm

log = logging.getLogger("trainer")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def get_device(local_rank: int = 0) -> torch.device:
    """The XLA device of this process (torch_xla assigns one device per process)."""
    return torch_xla.device()


def to_device(batch, device):
    """Copy every tensor of a batch to `device`."""
    return tuple(t.to(device) for t in batch)


def peak_memory_mib() -> float:
    # torch.accelerator memory statistics are not kept for XLA devices: ask the runtime.
    info = xm.get_memory_info(torch_xla.device())
    return info.get("peak_bytes_used", info.get("bytes_used", 0)) / 2**20


class Timer:
    """Wall-clock timer; waits for the GPU's queued kernels before reading the clock."""

    def __enter__(self) -> Timer:
        torch_xla.sync(wait=True)
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        torch_xla.sync(wait=True)
        self.elapsed = time.perf_counter() - self.start
