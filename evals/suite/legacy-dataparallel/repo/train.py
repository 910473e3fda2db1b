from __future__ import print_function

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torchvision import datasets, transforms

from net import Net


def save_checkpoint(model, optimizer, epoch, path):
    torch.save({"epoch": epoch, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(model, optimizer, path):
    checkpoint = torch.load(path)
    model.load_state_dict(checkpoint["state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1


def export_weights(model, path):
    # unwrap DataParallel so the weights load into a plain Net() (see predict.py)
    torch.save(model.module.state_dict(), path)


def train(args, model, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.cuda(), target.cuda(non_blocking=True)
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
    parser = argparse.ArgumentParser(description="PyTorch MNIST, multi-GPU (DataParallel)")
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

    n_gpu = torch.cuda.device_count()
    print("Let's use", n_gpu, "GPUs!")
    batch_size = args.batch_size_per_gpu * n_gpu

    train_loader = torch.utils.data.DataLoader(
        datasets.MNIST("./data", train=True, download=True,
                       transform=transforms.Compose([
                           transforms.ToTensor(),
                           transforms.Normalize((0.1307,), (0.3081,))
                       ])),
        batch_size=batch_size, shuffle=True, num_workers=args.workers, pin_memory=True)

    model = nn.DataParallel(Net()).cuda()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * n_gpu, momentum=args.momentum)

    start_epoch = 1
    if args.resume and os.path.isfile(args.resume):
        start_epoch = load_checkpoint(model, optimizer, args.resume)
        print("=> resumed from '{}' (epoch {})".format(args.resume, start_epoch - 1))

    for epoch in range(start_epoch, args.epochs + 1):
        train(args, model, train_loader, optimizer, epoch)
        save_checkpoint(model, optimizer, epoch, "checkpoint.pth.tar")

    export_weights(model, "mnist_cnn.pt")


if __name__ == "__main__":
    main()
