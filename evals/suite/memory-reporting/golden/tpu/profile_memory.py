"""How much GPU memory does training the autoencoder take at each batch size?

    python profile_memory.py --gpu 0 --batch-sizes 64 128 256 512
"""
import argparse
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

MB = 1024**2


class MemoryLogger:
    """Thin wrapper over the accelerator's allocator counters."""

    def __init__(self, device):
        self.device = device
        torch.accelerator.memory.reset_peak_memory_stats(device)

    def snapshot(self, tag):
        allocated = torch.accelerator.memory.memory_allocated(self.device) / MB
        reserved = torch.accelerator.memory.memory_reserved(self.device) / MB
        peak = torch.accelerator.memory.max_memory_allocated(self.device) / MB
        print(f"[{tag:>12}] allocated {allocated:8.1f} MB | reserved {reserved:8.1f} MB | "
              f"peak {peak:8.1f} MB")
        return peak

    def reset(self):
        # drop whatever the previous trial left behind before measuring the next one
        gc.collect()
        torch.accelerator.memory.empty_cache()
        torch.accelerator.memory.reset_peak_memory_stats(self.device)


class AutoEncoder(nn.Module):
    def __init__(self, dim=784, hidden=512, code=32):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, code),
        )
        self.decoder = nn.Sequential(
            nn.Linear(code, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, hidden), nn.ReLU(),
            nn.Linear(hidden, dim),
        )

    def forward(self, x):
        return torch.sigmoid(self.decoder(self.encoder(x)))


def run_trial(model, batch_size, steps, device):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.rand(batch_size, 784, device=device)
        recon = model(x)
        loss = F.binary_cross_entropy(recon, x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss.detach()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--steps-per-trial", type=int, default=20)
    args = parser.parse_args()

    if not torch.accelerator.is_available():
        raise SystemExit("this profiler needs an accelerator")
    device = torch.device("tpu")
    torch.manual_seed(0)

    model = AutoEncoder().to(device)
    logger = MemoryLogger(device)
    logger.snapshot("model")

    peaks = {}
    for bs in args.batch_sizes:
        logger.reset()
        loss = run_trial(model, bs, args.steps_per_trial, device)
        peaks[bs] = logger.snapshot(f"bs={bs}")
        print(f"{'':>14} final loss {loss.item():.4f}")

    print("\nbatch size -> peak MB")
    for bs, peak in peaks.items():
        print(f"  {bs:5d} -> {peak:8.1f}")


if __name__ == "__main__":
    main()
