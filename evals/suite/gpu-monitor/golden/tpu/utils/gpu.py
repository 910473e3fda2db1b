"""Device introspection helpers: environment banner, memory-based batch sizing, memory readings."""
import logging

import torch

log = logging.getLogger(__name__)


def describe_environment(device_index=0):
    log.info("torch %s on %s", torch.__version__, torch.accelerator.current_accelerator())


def auto_batch_size(bytes_per_sample, max_batch_size=256, headroom=0.5, device_index=0):
    """Largest power of two that fits in `headroom` of the device's memory, capped."""
    _, total = torch.accelerator.memory.get_memory_info(device_index)
    fits = int(total * headroom) // bytes_per_sample
    batch_size = 1
    while batch_size * 2 <= min(fits, max_batch_size):
        batch_size *= 2
    log.info("%.1f GiB on the TPU -> batch size %d", total / 2**30, batch_size)
    return batch_size


class GPUMonitor:
    """Memory in use on one TPU, from torch.accelerator.memory.

    TPU utilisation, temperature and power have no in-process API: watch them with
    the `tpu-info` CLI.
    """

    def __init__(self, device_index=0):
        self.device_index = device_index

    def read(self):
        return {"mem_mib": torch.accelerator.memory.memory_allocated(self.device_index) / 2**20}

    def close(self):
        pass
