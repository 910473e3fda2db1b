"""Train a small CNN on synthetic images, feeding it through a side-stream prefetcher."""
import time

import torch
import torch_xla
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from prefetch import CudaPrefetcher


def make_loader(n=512, batch_size=32):
    g = torch.Generator().manual_seed(0)
    images = torch.randn(n, 3, 16, 16, generator=g)
    labels = (images.mean(dim=(1, 2, 3)) > 0).long()
    return DataLoader(TensorDataset(images, labels), batch_size=batch_size)


def main():
    torch.manual_seed(0)
    device = torch_xla.device()
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(16 * 16, 2),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for epoch in range(2):
        for step, (x, y) in enumerate(CudaPrefetcher(make_loader(), device)):
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            torch_xla.sync()
            if step % 4 == 0:
                print(f"epoch {epoch} step {step:3d} loss {loss.item():.4f}")
    torch_xla.sync(wait=True)
    print(f"{time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
