import torch.nn as nn

from fused_ops import LinearBiasGELU


class FeedForwardNet(nn.Module):
    def __init__(self, d_in=32, d_hidden=256, d_out=8, depth=3):
        super().__init__()
        layers = [LinearBiasGELU(d_in, d_hidden)]
        layers += [LinearBiasGELU(d_hidden, d_hidden) for _ in range(depth - 1)]
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.out(self.body(x))
