"""Overlap host-to-device copies with compute: the next batch is copied on a side stream
while the current one trains (the pattern of NVIDIA's apex/timm data prefetchers)."""
import torch


class CudaPrefetcher:
    def __init__(self, loader, device):
        self.loader = loader
        self.device = device
        self.stream = torch.Stream(device=device)

    def _preload(self, it):
        try:
            x, y = next(it)
        except StopIteration:
            return None
        with self.stream:
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
        return x, y

    def __iter__(self):
        it = iter(self.loader)
        nxt = self._preload(it)
        while nxt is not None:
            torch.accelerator.current_stream(self.device).wait_stream(self.stream)
            x, y = nxt
            # the copies were made on the side stream: keep their memory until this
            # stream's work on them is done
            if self.device.type == "cuda":  # concurrent side streams: CUDA only
                x.record_stream(torch.accelerator.current_stream(self.device))
                y.record_stream(torch.accelerator.current_stream(self.device))
            nxt = self._preload(it)
            yield x, y

    def __len__(self):
        return len(self.loader)
