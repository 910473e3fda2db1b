import torch.nn as nn

from ops import silu_mul


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(silu_mul(self.gate(x), self.up(x)))


class GLUClassifier(nn.Module):
    """Residual SwiGLU blocks over a feature vector, as in tabular transformers' FFNs."""

    def __init__(self, features: int, classes: int, dim: int = 64, depth: int = 3):
        super().__init__()
        self.stem = nn.Linear(features, dim)
        self.blocks = nn.ModuleList(SwiGLU(dim, 2 * dim) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = self.stem(x)
        for norm, block in zip(self.norms, self.blocks):
            h = h + block(norm(h))
        return self.head(h)
