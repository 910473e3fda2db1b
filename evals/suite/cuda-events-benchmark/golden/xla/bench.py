"""Benchmark the training step of a residual MLP with CUDA events.

    python bench.py --batch 256 --width 256 --depth 4 --warmup 5 --iters 50
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
import torch_xla.runtime


class ResidualBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def make_model(width, depth):
    return nn.Sequential(*[ResidualBlock(width) for _ in range(depth)], nn.LayerNorm(width))


def time_steps(model, optimizer, x, y, n_steps):
    """Returns per-step device time in milliseconds (the first steps include compilation)."""
    times = []
    for _ in range(n_steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        torch_xla.sync(wait=True)  # run the step's graph and wait before reading the timer
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    print(f"device: {torch_xla.runtime.device_type()}")

    model = make_model(args.width, args.depth).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randn(args.batch, args.width, device=device)

    # warm-up: cuBLAS handles, allocator growth, optimizer state
    time_steps(model, optimizer, x, y, args.warmup)
    torch_xla.sync(wait=True)

    times = time_steps(model, optimizer, x, y, args.iters)
    med = statistics.median(times)
    print(f"step time: median {med:.3f} ms, min {min(times):.3f} ms, max {max(times):.3f} ms")
    print(f"throughput: {args.batch / med * 1e3:,.0f} samples/s")


if __name__ == "__main__":
    main()
