"""Synthetic 16x16 RGB images in ten classes, so the trainer runs anywhere."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader(batch_size: int, num_samples: int = 512, num_classes: int = 10) -> DataLoader:
    images = torch.randn(num_samples, 3, 16, 16)
    labels = torch.randint(0, num_classes, (num_samples,))
    dataset = TensorDataset(images, labels)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=0,
        drop_last=True,
    )
