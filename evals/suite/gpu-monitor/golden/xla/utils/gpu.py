"""Device introspection helpers: environment banner, memory-based batch sizing, memory readings."""
import logging

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

log = logging.getLogger(__name__)


def describe_environment(device_index=0):
    log.info("torch %s, torch_xla %s on %s", torch.__version__, torch_xla.__version__, xr.device_type())


def auto_batch_size(bytes_per_sample, max_batch_size=256, headroom=0.5, device_index=0):
    """Largest power of two that fits in `headroom` of the device's memory, capped."""
    total = xm.get_memory_info(torch_xla.device())["bytes_limit"]
    fits = int(total * headroom) // bytes_per_sample
    batch_size = 1
    while batch_size * 2 <= min(fits, max_batch_size):
        batch_size *= 2
    log.info("%.1f GiB on the XLA device -> batch size %d", total / 2**30, batch_size)
    return batch_size


class GPUMonitor:
    """Memory in use on the XLA device, from the XLA runtime (xm.get_memory_info)."""

    def __init__(self, device_index=0):
        self.device = torch_xla.device()

    def read(self):
        return {"mem_mib": xm.get_memory_info(self.device)["bytes_used"] / 2**20}

    def close(self):
        pass
