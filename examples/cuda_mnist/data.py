import torch
from torch.utils.data import DataLoader, TensorDataset


def synthetic_mnist(n: int = 512, seed: int = 0) -> TensorDataset:
    """MNIST-shaped random data, so the example runs offline."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return TensorDataset(images, labels)


def make_loader(batch_size: int) -> DataLoader:
    return DataLoader(synthetic_mnist(), batch_size=batch_size, shuffle=False, pin_memory=True)
