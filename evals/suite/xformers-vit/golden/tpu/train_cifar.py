"""Train a small ViT on CIFAR-10 in fp32/TF32 with xformers memory-efficient attention."""
import argparse
import time

import torch
import torch.nn as nn
import torchvision
import torchvision.transforms as T
from torch.utils.data import DataLoader

from vit import VisionTransformer

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def get_args():
    p = argparse.ArgumentParser(description="ViT on CIFAR-10")
    p.add_argument("--data", default="./data")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--print-freq", type=int, default=50)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def build_loader(args):
    transform = T.Compose(
        [
            T.RandomCrop(32, padding=4),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(CIFAR_MEAN, CIFAR_STD),
        ]
    )
    train_set = torchvision.datasets.CIFAR10(args.data, train=True, download=True, transform=transform)
    return DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        drop_last=True,
    )


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    device = torch.device("tpu")

    loader = build_loader(args)
    model = VisionTransformer().to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)

    for epoch in range(args.epochs):
        model.train()
        torch.accelerator.memory.reset_peak_memory_stats()
        start = time.time()
        for i, (images, targets) in enumerate(loader):
            images = images.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)

            loss = criterion(model(images), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

            if i % args.print_freq == 0:
                peak = torch.accelerator.memory.max_memory_allocated() / 2**20
                print(f"epoch {epoch} [{i}/{len(loader)}] loss {loss.item():.4f} peak mem {peak:.0f} MiB")
        print(f"epoch {epoch} done in {time.time() - start:.1f}s")

    torch.save(model.state_dict(), "vit_cifar10.pt")


if __name__ == "__main__":
    main()
