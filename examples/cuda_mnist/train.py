"""Train a small CNN on MNIST-shaped data on one NVIDIA GPU.

Usage: python train.py [--steps 20] [--batch-size 64] [--no-amp]
"""
import argparse
import os
import tempfile

import torch
import torch.backends.cudnn as cudnn
import torch.nn.functional as F

from data import make_loaders
from model import Net


def parse_args():
    parser = argparse.ArgumentParser(description="CUDA MNIST example")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--checkpoint", default=os.path.join(tempfile.gettempdir(), "cuda_mnist_checkpoint.pt")
    )
    return parser.parse_args()


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        correct += (model(images).argmax(1) == labels).sum().item()
        total += labels.numel()
    model.train()
    return correct / total


def main():
    args = parse_args()
    device = torch.device(args.device)
    use_amp = args.amp and torch.cuda.is_available()

    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    cudnn.benchmark = True

    train_loader, test_loader = make_loaders(args.batch_size, seed=args.seed)
    model = Net().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    step = 0
    while step < args.steps:
        for images, labels in train_loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.cuda.amp.autocast(enabled=use_amp):
                loss = F.cross_entropy(model(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            print(f"step {step} loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000
    peak_mib = torch.cuda.max_memory_allocated() / 2**20
    print(f"trained {step} steps in {seconds:.2f}s, peak GPU memory {peak_mib:.1f} MiB")

    torch.save({"model": model.state_dict(), "step": step}, args.checkpoint)
    checkpoint = torch.load(args.checkpoint, map_location="cuda")
    restored = Net().cuda()
    restored.load_state_dict(checkpoint["model"])
    print(f"test accuracy {evaluate(restored, test_loader, device):.3f}")


if __name__ == "__main__":
    main()
