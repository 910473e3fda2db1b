import torch.nn as nn
import torch.nn.functional as F

from layernorm_ext import FusedLayerNorm


class ResidualBlock(nn.Module):
    """Pre-norm MLP block: x + W2 gelu(W1 norm(x))."""

    def __init__(self, d_model, expansion=4):
        super().__init__()
        self.norm = FusedLayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, expansion * d_model)
        self.fc2 = nn.Linear(expansion * d_model, d_model)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    def __init__(self, d_in=48, d_model=96, depth=3, n_classes=10):
        super().__init__()
        self.embed = nn.Linear(d_in, d_model)
        self.blocks = nn.Sequential(*[ResidualBlock(d_model) for _ in range(depth)])
        self.norm = FusedLayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))))
