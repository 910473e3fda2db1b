"""Fit a residual MLP to synthetic tabular data on a TPU.

torch.optim.AdamW and nn.LayerNorm stand in for apex's CUDA-only fused kernels,
and bf16 autocast for apex.amp O1 (bf16 needs no loss scaling).

    python train.py --epochs 5 --lr 3e-4
"""
import argparse
import math

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from model import TabularRegressor

FEATURES = 24


def make_dataset(n: int = 2048, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    w = torch.randn(FEATURES, generator=g)
    y = torch.sin(x @ w / math.sqrt(FEATURES)) + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--out", default="checkpoint.pt")
    args = parser.parse_args()

    torch.manual_seed(0)

    loader = DataLoader(make_dataset(), batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = TabularRegressor(FEATURES).to("tpu")
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay
    )

    step = 0
    for epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            x, y = x.to("tpu", non_blocking=True), y.to("tpu", non_blocking=True)
            with torch.autocast("tpu", dtype=torch.bfloat16):
                loss = F.mse_loss(model(x), y)

            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()

            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            step += 1

    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, args.out)


if __name__ == "__main__":
    main()
