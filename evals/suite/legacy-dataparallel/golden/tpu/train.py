from __future__ import print_function

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms

from net import Net


def save_checkpoint(model, optimizer, epoch, path):
    torch.save({"epoch": epoch, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(model, optimizer, path):
    checkpoint = torch.load(path, map_location="cpu")
    state = checkpoint["state_dict"]
    # checkpoints written under nn.DataParallel carry "module." prefixes
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    model.load_state_dict(state)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


def export_weights(model, path):
    # `model` is the unwrapped Net(), so the weights load into a plain Net() (see predict.py)
    torch.save(model.state_dict(), path)


def train(args, model, train_loader, optimizer, epoch, device):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device, non_blocking=True)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))


def main():
    parser = argparse.ArgumentParser(description="PyTorch MNIST, multi-TPU (DistributedDataParallel)")
    parser.add_argument("--batch-size-per-gpu", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--resume", default="", help="path to checkpoint.pth.tar")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(args.seed)

    # one process per TPU chip under `torchrun --nproc_per_node=<chips> train.py`;
    # a plain `python train.py` trains on one chip
    distributed = "LOCAL_RANK" in os.environ
    if distributed:
        dist.init_process_group(backend="tpu")
    world_size = dist.get_world_size() if distributed else 1
    rank = dist.get_rank() if distributed else 0
    device = torch.device("tpu")  # each process sees its own chip as tpu:0
    print("Process {} of {} on {}".format(rank, world_size, device))
    batch_size = args.batch_size_per_gpu  # per process: the global batch is still per-chip * chips

    train_set = datasets.MNIST("./data", train=True, download=True,
                               transform=transforms.Compose([
                                   transforms.ToTensor(),
                                   transforms.Normalize((0.1307,), (0.3081,))
                               ]))
    sampler = DistributedSampler(train_set, seed=args.seed) if distributed else None
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=batch_size, shuffle=sampler is None, sampler=sampler,
        num_workers=args.workers)

    model = Net().to(device)
    ddp_model = DDP(model) if distributed else model
    optimizer = optim.SGD(model.parameters(), lr=args.lr * world_size, momentum=args.momentum)

    start_epoch = 1
    if args.resume and os.path.isfile(args.resume):
        start_epoch = load_checkpoint(model, optimizer, args.resume)
        print("=> resumed from '{}' (epoch {})".format(args.resume, start_epoch - 1))

    for epoch in range(start_epoch, args.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        train(args, ddp_model, train_loader, optimizer, epoch, device)
        if rank == 0:
            save_checkpoint(model, optimizer, epoch, "checkpoint.pth.tar")

    if rank == 0:
        export_weights(model, "mnist_cnn.pt")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
