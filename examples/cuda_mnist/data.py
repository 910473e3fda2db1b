"""Synthetic MNIST-shaped data: ten noisy class templates, so that the loss really falls.

No download: the images are generated from a seed, identically on every machine.
"""
import torch
from torch.utils.data import DataLoader, TensorDataset


TEMPLATE_SEED = 1234


def synthetic_mnist(n, seed=0):
    templates = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(TEMPLATE_SEED))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = templates[labels] + 0.3 * torch.randn(n, 1, 28, 28, generator=g)
    return TensorDataset((images - 0.5) / 0.5, labels)


def make_loaders(batch_size, seed=0, workers=0):
    train = synthetic_mnist(2048, seed)
    test = synthetic_mnist(512, seed + 1)
    train_loader = DataLoader(
        train,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=True,
        generator=torch.Generator().manual_seed(seed),
    )
    test_loader = DataLoader(test, batch_size=256, num_workers=workers, pin_memory=True)
    return train_loader, test_loader
