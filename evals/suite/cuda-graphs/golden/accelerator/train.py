"""Regression MLP whose whole training step (forward, backward, optimizer) is one CUDA graph
on NVIDIA GPUs; other accelerators (and the CPU) run the eager loop.

Small layers leave the GPU idle between kernel launches; capturing the step once and
replaying it removes the per-kernel CPU overhead.

    python train.py                   # capture once, replay every step (CUDA only)
    python train.py --no-cuda-graphs  # plain eager loop, for debugging and profiling
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
    parser.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = (
        torch.accelerator.current_accelerator()
        if torch.accelerator.is_available()
        else torch.device("cpu")
    )
    use_graphs = args.cuda_graphs and device.type == "cuda"  # CUDA graphs exist on CUDA only
    model = build_model().to(device)
    loss_fn = nn.MSELoss()
    # plain SGD keeps no optimizer state, so optimizer.step() is safe to capture as is
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=1e-4)

    xs, ys = make_batches(args.steps, args.batch_size)

    if use_graphs:
        static_x = torch.empty(args.batch_size, D_IN, device=device)
        static_y = torch.empty(args.batch_size, D_OUT, device=device)
        static_x.copy_(xs[0])
        static_y.copy_(ys[0])

        # warm up forward and backward on a side stream before capturing
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(args.warmup):
                optimizer.zero_grad(set_to_none=True)
                loss_fn(model(static_x), static_y).backward()
        torch.cuda.current_stream().wait_stream(side)

        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(model(static_x), static_y)
            static_loss.backward()
            optimizer.step()

        def train_step(x, y):
            static_x.copy_(x, non_blocking=True)
            static_y.copy_(y, non_blocking=True)
            graph.replay()
            return static_loss

    else:
        # the same warm-up passes as the graph path, on the default stream
        for _ in range(args.warmup):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(xs[0].to(device)), ys[0].to(device)).backward()

        def train_step(x, y):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
            loss.backward()
            optimizer.step()
            return loss

    if device.type != "cpu":
        torch.accelerator.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = train_step(xs[i], ys[i])
        if i % args.log_every == 0:
            if device.type != "cpu":
                torch.accelerator.synchronize()
            ms = (time.perf_counter() - t0) * 1000 / (i + 1)
            print(f"step {i:4d} loss {loss.item():.5f} ({ms:.3f} ms/step, graphs={use_graphs})")


if __name__ == "__main__":
    main()
