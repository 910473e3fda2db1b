"""Train a small MLP classifier on a synthetic two-spirals-style dataset.

Usage: python train.py --epochs 20 --lr 1e-3
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla


def get_args():
    p = argparse.ArgumentParser(description="MLP baseline")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--n-samples", type=int, default=4096)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def make_spirals(n, noise=0.2):
    # two interleaved spirals, label = which arm a point sits on
    t = torch.rand(n) * 4 * math.pi
    labels = torch.randint(0, 2, (n,))
    r = t / (4 * math.pi)
    angle = t + labels.float() * math.pi
    x = torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)
    x = x + noise * 0.1 * torch.randn_like(x)
    return x, labels


class MLP(nn.Module):
    def __init__(self, in_dim, hidden, n_classes):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main():
    args = get_args()
    torch.manual_seed(args.seed)

    device = torch_xla.device()

    x, y = make_spirals(args.n_samples)
    # the whole dataset fits on the GPU, so move it once
    x, y = x.to(device), y.to(device)

    model = MLP(2, args.hidden, 2).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    n = x.size(0)
    for epoch in range(args.epochs):
        perm = torch.randperm(n, device=device)
        total_loss, correct = 0.0, 0
        for i in range(0, n, args.batch_size):
            idx = perm[i : i + args.batch_size]
            xb, yb = x[idx], y[idx]

            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            torch_xla.sync()

            total_loss += loss.item() * xb.size(0)
            correct += (logits.argmax(1) == yb).sum().item()
        print(f"epoch {epoch + 1:3d}  loss {total_loss / n:.4f}  acc {correct / n:.3f}")


if __name__ == "__main__":
    main()
