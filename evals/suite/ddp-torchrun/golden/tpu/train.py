"""Distributed data-parallel training of a tabular MLP.

Launch with: torchrun --nproc_per_node=2 train.py
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--resume", type=str, default=None)
    p.add_argument("--out", type=str, default="ckpt.pt")
    return p.parse_args()


def setup_distributed():
    dist.init_process_group("tpu")
    local_rank = int(os.environ["LOCAL_RANK"])  # TorchTPU shows this rank its own core as tpu:0
    return local_rank


def make_dataset(n=4096, features=32, classes=4):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    y = (x @ w + 0.5 * torch.randn(n, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def build_model(features=32, classes=4):
    return nn.Sequential(
        nn.Linear(features, 128),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(128, 128),
        nn.ReLU(),
        nn.Linear(128, classes),
    )


def main():
    args = parse_args()
    local_rank = setup_distributed()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    device = torch.device("tpu")

    model = build_model().to(device)
    if args.resume:
        map_location = "cpu"
        model.load_state_dict(torch.load(args.resume, map_location=map_location))
    model = DDP(model)

    dataset = make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        running, batches = 0.0, 0
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()
            batches += 1
        stats = torch.tensor([running, batches], device=device)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {stats[0].item() / stats[1].item():.4f}")

    if rank == 0:
        torch.save(model.module.state_dict(), args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
