"""Fit a residual MLP to synthetic tabular data with NVIDIA apex.

apex's FusedAdam and FusedLayerNorm kernels plus apex.amp (O1: fp16 casts with
dynamic loss scaling). Needs apex built with --cuda_ext.

    python train.py --epochs 5 --lr 3e-4
"""
import argparse
import math

import torch
import torch.nn.functional as F
from apex import amp
from apex.optimizers import FusedAdam
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
    torch.cuda.manual_seed(0)

    loader = DataLoader(make_dataset(), batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = TabularRegressor(FEATURES).cuda()
    optimizer = FusedAdam(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay
    )
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")

    step = 0
    for epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = F.mse_loss(model(x), y)

            optimizer.zero_grad()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), max_norm=1.0)
            optimizer.step()

            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            step += 1

    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "amp": amp.state_dict()},
        args.out,
    )


if __name__ == "__main__":
    main()
