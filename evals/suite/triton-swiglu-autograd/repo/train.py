"""Classify synthetic tabular rows with a SwiGLU MLP.

    python train.py --epochs 5 --batch-size 64
"""
import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from model import GLUClassifier

FEATURES, CLASSES = 24, 5


def make_data(n: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=gen)
    centers = torch.randn(CLASSES, FEATURES, generator=gen) * 1.5
    y = torch.cdist(x, centers).argmin(1)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    loader = DataLoader(make_data(4096, 0), batch_size=args.batch_size, shuffle=True, pin_memory=True)
    model = GLUClassifier(FEATURES, CLASSES).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        correct = seen = 0
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(1) == y).sum().item()
            seen += y.numel()
        peak = torch.cuda.max_memory_allocated() / 2**20
        print(f"epoch {epoch}: loss {loss.item():.4f} acc {correct / seen:.3f} peak {peak:.0f} MiB")


if __name__ == "__main__":
    main()
