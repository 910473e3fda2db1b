import math

import torch
from torch.utils.data import TensorDataset


def spirals(n, noise, generator, arms=3):
    """`arms` interleaved spirals in the plane; the label is the arm."""
    labels = torch.randint(0, arms, (n,), generator=generator)
    r = torch.rand(n, generator=generator)
    theta = 4.0 * r + labels.float() * (2 * math.pi / arms)
    points = torch.stack([r * torch.cos(theta), r * torch.sin(theta)], dim=1)
    points = points + noise * torch.randn(n, 2, generator=generator)
    return TensorDataset(points, labels)


def make_splits(cfg):
    g = torch.Generator().manual_seed(cfg.seed)
    return spirals(cfg.n_train, cfg.noise, g), spirals(cfg.n_val, cfg.noise, g)
