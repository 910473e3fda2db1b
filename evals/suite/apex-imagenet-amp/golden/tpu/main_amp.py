"""Image classifier trained the way apex's ImageNet example trains: apex.amp with an
opt level from the command line, FusedSGD, and apex DDP when launched on several GPUs.

    python main_amp.py --opt-level O1
    python -m torch.distributed.launch --nproc_per_node=2 main_amp.py --opt-level O2
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from net import SmallResNet


def parse():
    parser = argparse.ArgumentParser(description="apex amp classifier")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--opt-level", type=str, default="O1")
    parser.add_argument("--keep-batchnorm-fp32", type=str, default=None)
    parser.add_argument("--loss-scale", type=str, default=None)
    parser.add_argument("--resume", default="", type=str)
    parser.add_argument("--local_rank", default=int(os.environ.get("LOCAL_RANK", 0)), type=int)
    return parser.parse_args()


def synthetic_images(n=512, classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    prototypes = torch.randn(classes, 3, 16, 16, generator=g)
    images = prototypes[labels] + 0.5 * torch.randn(n, 3, 16, 16, generator=g)
    return images, labels


def main():
    args = parse()
    args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if args.distributed:
        torch.distributed.init_process_group(backend="tpu", init_method="env://")

    torch.manual_seed(0)
    model = SmallResNet(num_classes=10).to("tpu")
    optimizer = torch.optim.SGD(
        model.parameters(),
        args.lr,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        nesterov=True,
    )
    # apex O1/O2 -> bf16 autocast around the forward (bf16 needs no loss scaling); O0 is fp32
    model.forward = torch.autocast("tpu", dtype=torch.bfloat16, enabled=args.opt_level != "O0")(
        model.forward
    )
    if args.distributed:
        model = DDP(model)

    start_epoch = 0
    if args.resume and os.path.isfile(args.resume):
        checkpoint = torch.load(args.resume, map_location="tpu")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_epoch = checkpoint["epoch"] + 1

    images, labels = synthetic_images()
    for epoch in range(start_epoch, args.epochs):
        model.train()
        perm = torch.randperm(len(images))
        for i in range(0, len(images) - args.batch_size + 1, args.batch_size):
            idx = perm[i : i + args.batch_size]
            x, y = images[idx].to("tpu", non_blocking=True), labels[idx].to("tpu", non_blocking=True)
            loss = F.cross_entropy(model(x), y)

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i % (4 * args.batch_size) == 0 and args.local_rank == 0:
                print(f"epoch {epoch} iter {i // args.batch_size} loss {loss.item():.4f}")

        if args.local_rank == 0:
            torch.save(
                {
                    "epoch": epoch,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                },
                "checkpoint.pt",
            )


if __name__ == "__main__":
    main()
