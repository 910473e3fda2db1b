"""Config-driven image classifier training.

    python train.py                                   # configs/default.yaml
    python train.py --config configs/default.yaml optim.lr=0.01 amp.enabled=false
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import yaml
from torch.utils.data import DataLoader, TensorDataset


def load_config(path, overrides):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    for item in overrides:
        key, value = item.split("=", 1)
        *parents, leaf = key.split(".")
        node = cfg
        for name in parents:
            node = node[name]
        node[leaf] = yaml.safe_load(value)
    return cfg


class Net(nn.Module):
    def __init__(self, width, dropout, num_classes):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(dropout),
        )
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        return self.fc(self.body(x))


def synthetic_loader(data_cfg):
    n, size, classes = data_cfg["num_samples"], data_cfg["image_size"], data_cfg["num_classes"]
    images = torch.randn(n, 3, size, size)
    targets = torch.randint(0, classes, (n,))
    return DataLoader(
        TensorDataset(images, targets),
        batch_size=data_cfg["batch_size"],
        shuffle=True,
        num_workers=data_cfg["num_workers"],
        pin_memory=data_cfg["pin_memory"],
        drop_last=True,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("overrides", nargs="*", help="key.path=value")
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    os.environ.update({k: str(v) for k, v in cfg.get("env", {}).items()})

    torch.manual_seed(cfg["seed"])
    device = torch.device(cfg["device"])
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    if cfg["distributed"]["enabled"]:
        dist.init_process_group(cfg["distributed"]["backend"])

    amp_cfg = cfg["amp"]
    amp_dtype = getattr(torch, amp_cfg["dtype"])
    scaler = torch.cuda.amp.GradScaler(enabled=amp_cfg["enabled"] and amp_cfg["grad_scaler"])

    model = Net(cfg["model"]["width"], cfg["model"]["dropout"], cfg["data"]["num_classes"])
    model = model.to(device)
    loader = synthetic_loader(cfg["data"])
    optim_cfg = cfg["optim"]
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=optim_cfg["lr"],
        momentum=optim_cfg["momentum"],
        weight_decay=optim_cfg["weight_decay"],
    )

    print(f"{cfg['experiment']}: training on {device}, amp={amp_cfg['enabled']} ({amp_cfg['dtype']})")
    step = 0
    for epoch in range(cfg["epochs"]):
        model.train()
        for images, targets in loader:
            images = images.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_cfg["enabled"]):
                logits = model(images)
                loss = F.cross_entropy(logits, targets, label_smoothing=optim_cfg["label_smoothing"])
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if step % cfg["log_every"] == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}")


if __name__ == "__main__":
    main()
