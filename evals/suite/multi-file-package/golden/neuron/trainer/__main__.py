"""Entry point: ``python -m trainer [--epochs N] [--batch-size B] [--lr LR]``."""

import argparse
import logging
import os

import torch
import torch.nn.functional as F

from .data import make_loader
from .model import build_model
from .utils import Timer, get_device, log, peak_memory_mib, seed_everything, to_device


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trainer")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    seed_everything(args.seed)

    device = get_device(args.local_rank)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    loader = make_loader(args.batch_size)

    step = 0
    for epoch in range(args.epochs):
        model.train()
        with Timer() as timer:
            for images, labels in loader:
                images, labels = to_device((images, labels), device)
                loss = F.cross_entropy(model(images), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                if step % args.log_every == 0:
                    log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
        log.info(
            "epoch %d done in %.2fs, peak memory %.1f MiB", epoch, timer.elapsed, peak_memory_mib()
        )


if __name__ == "__main__":
    main()
