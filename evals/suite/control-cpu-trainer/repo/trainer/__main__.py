"""python -m trainer [--config configs/default.json] [--epochs N]"""
import argparse
import logging
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from .config import Config
from .data import make_splits
from .engine import evaluate, train_one_epoch
from .model import mlp

log = logging.getLogger("trainer")


def report(epoch, train_loss, val_loss, val_acc):
    log.info(
        "epoch %3d  train %.4f  val %.4f  acc %.3f",
        epoch, float(train_loss), float(val_loss), float(val_acc),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="trainer")
    parser.add_argument("--config", default="configs/default.json")
    parser.add_argument("--epochs", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    cfg = Config.load(args.config)
    if args.epochs is not None:
        cfg.epochs = args.epochs
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.num_threads)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg.save(out / "config.json")

    train_set, val_set = make_splits(cfg)
    train_loader = DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=512)

    model = mlp(2, cfg.hidden, 3, cfg.dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)

    best, bad_epochs = float("inf"), 0
    for epoch in range(1, cfg.epochs + 1):
        train_loss = train_one_epoch(model, train_loader, optimizer)
        scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader)
        report(epoch, train_loss, val_loss, val_acc)
        if float(val_loss) < best:
            best, bad_epochs = float(val_loss), 0
            torch.save(model.state_dict(), out / "best.pt")
        else:
            bad_epochs += 1
            if bad_epochs >= cfg.patience:
                log.info("early stop after %d epochs without improvement", bad_epochs)
                break

    model.load_state_dict(torch.load(out / "best.pt", map_location="cpu", weights_only=True))
    val_loss, val_acc = evaluate(model, val_loader)
    log.info("best checkpoint: val %.4f  acc %.3f", float(val_loss), float(val_acc))


if __name__ == "__main__":
    main()
