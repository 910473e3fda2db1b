"""Device introspection helpers: environment banner, memory-based batch sizing, NVML readings
on NVIDIA GPUs and torch.accelerator memory counters elsewhere."""
import logging
import shutil
import subprocess

import torch

log = logging.getLogger(__name__)

try:
    import pynvml
except ImportError:  # nvidia-ml-py not installed
    pynvml = None


def describe_environment(device_index=0):
    log.info("torch %s on %s", torch.__version__, torch.accelerator.current_accelerator())
    if shutil.which("nvidia-smi"):
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        log.info("nvidia-smi: %s", out.stdout.strip())


def auto_batch_size(bytes_per_sample, max_batch_size=256, headroom=0.5, device_index=0):
    """Largest power of two that fits in `headroom` of the device's memory, capped."""
    _, total = torch.accelerator.memory.get_memory_info(device_index)
    fits = int(total * headroom) // bytes_per_sample
    batch_size = 1
    while batch_size * 2 <= min(fits, max_batch_size):
        batch_size *= 2
    log.info("%.1f GiB on the device -> batch size %d", total / 2**30, batch_size)
    return batch_size


class GPUMonitor:
    """Utilisation, memory, temperature and power of one NVIDIA GPU, read through NVML;
    on other accelerators, the memory in use (torch.accelerator.memory)."""

    def __init__(self, device_index=0):
        self.device_index = device_index
        self.handle = None
        if pynvml is not None:
            try:
                pynvml.nvmlInit()
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            except pynvml.NVMLError as err:
                log.warning("NVML unavailable (%s); using torch.accelerator counters", err)

    def read(self):
        if self.handle is None:
            return {"mem_mib": torch.accelerator.memory.memory_allocated(self.device_index) / 2**20}
        util = pynvml.nvmlDeviceGetUtilizationRates(self.handle)
        mem = pynvml.nvmlDeviceGetMemoryInfo(self.handle)
        return {
            "util_pct": util.gpu,
            "mem_mib": mem.used / 2**20,
            "temp_c": pynvml.nvmlDeviceGetTemperature(self.handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0,
        }

    def close(self):
        if self.handle is not None:
            pynvml.nvmlShutdown()
