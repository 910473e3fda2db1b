# Mixed-precision training of a small conv net on random "images".
# Classic AMP recipe from the PyTorch docs: autocast for the forward pass,
# GradScaler to keep fp16 gradients from underflowing.
import time

import torch
import torch.nn as nn

torch.manual_seed(0)

BATCH_SIZE = 64
NUM_STEPS = 200
LR = 0.05
LOG_EVERY = 20


def build_model(num_classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


def random_batch(batch_size, num_classes=10):
    images = torch.randn(batch_size, 3, 32, 32)
    targets = torch.randint(0, num_classes, (batch_size,))
    return images.to("neuron"), targets.to("neuron")


def train():
    model = build_model().to("neuron")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=5e-4)
    criterion = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("neuron", enabled=False)  # bf16 needs no loss scaling

    model.train()
    t0 = time.time()
    for step in range(1, NUM_STEPS + 1):
        images, targets = random_batch(BATCH_SIZE)

        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("neuron", dtype=torch.bfloat16):
            output = model(images)
            loss = criterion(output, targets)

        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

        if step % LOG_EVERY == 0:
            print(f"step {step}/{NUM_STEPS} loss={loss.item():.4f} "
                  f"scale={scaler.get_scale():.0f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    train()
