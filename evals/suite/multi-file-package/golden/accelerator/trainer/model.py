"""The network: two conv blocks and a linear head."""

import torch
from torch import nn


class ConvBlock(nn.Sequential):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )


class SmallConvNet(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(ConvBlock(3, width), ConvBlock(width, 2 * width))
        self.head = nn.Linear(2 * width * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def build_model(num_classes: int = 10) -> nn.Module:
    model = SmallConvNet(num_classes)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"SmallConvNet: {n_params / 1e3:.1f}k parameters")
    device = (
        torch.accelerator.current_accelerator()
        if torch.accelerator.is_available()
        else torch.device("cpu")
    )
    return model.to(device)
