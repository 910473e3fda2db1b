"""Regression MLP trained on TPU, with the model compiled to cut per-op overhead.

There are no CUDA graphs on TPU: instead of capturing and replaying the step, the
model goes through torch.compile (backend "tpu", the default for TPU tensors).

    python train.py               # compiled model
    python train.py --no-compile  # plain eager loop, for debugging and profiling
"""
import argparse
import time

import torch
import torch.nn as nn

D_IN, D_HIDDEN, D_OUT = 64, 256, 8


def build_model():
    return nn.Sequential(
        nn.Linear(D_IN, D_HIDDEN),
        nn.SiLU(),
        nn.Linear(D_HIDDEN, D_HIDDEN),
        nn.SiLU(),
        nn.Linear(D_HIDDEN, D_OUT),
    )


def make_batches(n_batches, batch_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(D_IN, D_OUT, generator=g) / D_IN**0.5
    xs = torch.randn(n_batches, batch_size, D_IN, generator=g)
    ys = torch.sin(3 * xs @ w) + 0.05 * torch.randn(n_batches, batch_size, D_OUT, generator=g)
    return xs, ys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("tpu")
    model = build_model().to(device)
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=1e-4)

    xs, ys = make_batches(args.steps, args.batch_size)

    net = torch.compile(model) if args.compile else model

    # warm up forward and backward before timing (the compiled model compiles on first use)
    for _ in range(args.warmup):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(net(xs[0].to(device)), ys[0].to(device)).backward()

    def train_step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(net(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss.backward()
        optimizer.step()
        return loss

    torch.accelerator.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = train_step(xs[i], ys[i])
        if i % args.log_every == 0:
            torch.accelerator.synchronize()
            ms = (time.perf_counter() - t0) * 1000 / (i + 1)
            print(f"step {i:4d} loss {loss.item():.5f} ({ms:.3f} ms/step, compile={args.compile})")


if __name__ == "__main__":
    main()
