"""1-D CNN on synthetic multichannel signals, with GPU telemetry in the training log."""
import logging
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from utils.gpu import GPUMonitor, auto_batch_size, describe_environment

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("train")

CHANNELS, LENGTH, CLASSES = 3, 256, 4
STEPS, LOG_EVERY = 500, 20


class SignalNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(CHANNELS, 32, 7, padding=3), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(32, 64, 5, padding=2), nn.BatchNorm1d(64), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(64, 64, 3, padding=1), nn.BatchNorm1d(64), nn.ReLU(),
        )
        self.classifier = nn.Linear(64, CLASSES)

    def forward(self, x):
        return self.classifier(self.features(x).mean(-1))


def synthetic_batch(batch_size, device):
    """Class k is a sine of frequency k+1 on a random channel, buried in noise."""
    labels = torch.randint(0, CLASSES, (batch_size,), device=device)
    t = torch.linspace(0, 1, LENGTH, device=device)
    x = 0.5 * torch.randn(batch_size, CHANNELS, LENGTH, device=device)
    x[:, 0] += torch.sin(2 * torch.pi * (labels[:, None] + 1) * 4 * t)
    return x, labels


def main():
    torch.manual_seed(0)
    device = torch.device("neuron")
    describe_environment()
    batch_size = auto_batch_size(bytes_per_sample=4 * 2**20, max_batch_size=64)

    model = SignalNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    monitor = GPUMonitor()

    t0 = time.perf_counter()
    for step in range(STEPS):
        x, y = synthetic_batch(batch_size, device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % LOG_EVERY == 0:
            stats = monitor.read()
            rate = (step + 1) * batch_size / (time.perf_counter() - t0)
            log.info(
                "step %d loss %.4f | %.0f samples/s | %s",
                step,
                loss.item(),
                rate,
                " ".join(f"{k}={v:.0f}" for k, v in stats.items()),
            )
    monitor.close()


if __name__ == "__main__":
    main()
