import argparse

import torch
import torch.backends.cudnn as cudnn
import torch.nn.functional as F

from data import make_loader
from model import SmallCNN


def main() -> None:
    parser = argparse.ArgumentParser(description="Train a small CNN on synthetic MNIST.")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    cudnn.benchmark = True
    device = torch.device(args.device if torch.cuda.is_available() else "cpu")

    model = SmallCNN().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    start.record()
    for step, (images, labels) in enumerate(make_loader(args.batch_size)):
        if step == args.steps:
            break
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad()
        with torch.cuda.amp.autocast():
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step} loss {loss.item():.4f}")
    end.record()
    torch.cuda.synchronize()
    print(f"time {start.elapsed_time(end):.1f} ms")
    print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")

    torch.save(model.state_dict(), "checkpoint.pt")
    model.load_state_dict(torch.load("checkpoint.pt", map_location="cuda"))


if __name__ == "__main__":
    main()
