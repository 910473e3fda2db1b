"""Train a residual MLP with torch.compile, then measure compiled inference latency.

CUDA graphs come from torch.compile's "reduce-overhead" mode; nothing here captures
graphs by hand.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla

torch.set_float32_matmul_precision("high")
DEVICE = torch_xla.device()


class ResidualMLP(nn.Module):
    def __init__(self, d_in=64, width=256, depth=3, classes=10):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()) for _ in range(depth)
        )
        self.out = nn.Linear(width, classes)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


@torch.compile(backend="openxla", fullgraph=True)
def smoothed_cross_entropy(logits, target, eps: float = 0.1):
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, target[:, None]).squeeze(-1)
    return ((1 - eps) * nll - eps * logp.mean(dim=-1)).mean()


def make_data(n, d_in, classes):
    x = torch.randn(n, d_in)
    w = torch.randn(d_in, classes)
    return x, (x @ w).argmax(dim=1)


@torch.inference_mode()
def latency_ms(model, batch, iters=50):
    for _ in range(5):  # warm-up: compile and record the graphs
        model(batch)
    torch_xla.sync(wait=True)
    start = time.perf_counter()
    for _ in range(iters):
        model(batch)
    torch_xla.sync(wait=True)
    return 1e3 * (time.perf_counter() - start) / iters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    x_all, y_all = make_data(4096, 64, 10)
    model = ResidualMLP().to(DEVICE)
    compiled = torch.compile(model, backend="openxla")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    for step in range(args.steps):
        idx = torch.randint(0, x_all.size(0), (args.batch_size,))
        x, y = x_all[idx].to(DEVICE), y_all[idx].to(DEVICE)
        loss = smoothed_cross_entropy(compiled(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        if step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")

    model.eval()
    batch = x_all[: args.batch_size].to(DEVICE)
    print(f"eager    {latency_ms(model, batch):.3f} ms/batch")
    print(f"compiled {latency_ms(compiled, batch):.3f} ms/batch")


if __name__ == "__main__":
    main()
