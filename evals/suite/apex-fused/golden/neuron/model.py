"""Residual MLP for tabular regression."""
import torch.nn.functional as F
from torch import nn


class ResidualBlock(nn.Module):
    def __init__(self, width: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = self.fc2(F.gelu(self.fc1(self.norm(x))))
        return x + self.drop(h)


class TabularRegressor(nn.Module):
    def __init__(self, in_features: int, width: int = 64, depth: int = 3, dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Linear(in_features, width)
        self.blocks = nn.ModuleList(ResidualBlock(width, dropout) for _ in range(depth))
        self.head_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.head_norm(h)).squeeze(-1)
