"""Feed batches to the device: one copy per batch on the default stream (TorchNeuron
documents no record_stream, so the side-stream overlap of the CUDA version is dropped)."""
import torch


class CudaPrefetcher:
    def __init__(self, loader, device):
        self.loader = loader
        self.device = device

    def __iter__(self):
        for x, y in self.loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def __len__(self):
        return len(self.loader)
