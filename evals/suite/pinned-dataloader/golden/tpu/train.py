"""Tabular regression with a standard DataLoader pipeline.

python train.py [--epochs N]
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, random_split


class SyntheticHousing(Dataset):
    """Stand-in for a CSV of house features -> price (log scale)."""

    def __init__(self, n=5000, n_features=12, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, n_features, generator=g)
        w = torch.randn(n_features, generator=g)
        self.y = (self.x @ w + 0.5 * torch.sin(3 * self.x[:, 0]) + 0.1 * torch.randn(n, generator=g))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def get_loaders(batch_size):
    ds = SyntheticHousing()
    train_ds, val_ds = random_split(ds, [4000, 1000], generator=torch.Generator().manual_seed(0))
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True,
                              num_workers=0, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=512, shuffle=False,
                            num_workers=0)
    return train_loader, val_loader


def train_one_epoch(model, loader, optimizer, loss_fn, device):
    model.train()
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        pred = model(x).squeeze(-1)
        loss = loss_fn(pred, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@torch.no_grad()
def evaluate(model, loader, loss_fn, device):
    model.eval()
    total, n = 0.0, 0
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        total += loss_fn(model(x).squeeze(-1), y).item() * len(x)
        n += len(x)
    return total / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("tpu:0")

    train_loader, val_loader = get_loaders(args.batch_size)
    model = nn.Sequential(
        nn.Linear(12, 128), nn.SiLU(), nn.Linear(128, 128), nn.SiLU(), nn.Linear(128, 1)
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    loss_fn = nn.MSELoss()

    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer, loss_fn, device)
        val_loss = evaluate(model, val_loader, loss_fn, device)
        print(f"epoch {epoch + 1:2d}  val mse {val_loss:.4f}")


if __name__ == "__main__":
    main()
