"""Batched GPU inference throughput for a small image classifier.

The weights would normally come from a training run; here the network is built
in code and initialised from a fixed seed so the numbers are reproducible.

    python infer.py --batch-size 128 --num-batches 20
"""
import argparse
import time
from dataclasses import dataclass

import torch
import torch.nn as nn

DEVICE = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


def synchronize():
    if DEVICE.type != "cpu":  # torch.accelerator.synchronize() raises without an accelerator
        torch.accelerator.synchronize()


@dataclass
class InferenceConfig:
    batch_size: int = 128
    num_batches: int = 20
    warmup: int = 3
    image_size: int = 32
    num_classes: int = 10


def conv_bn(c_in, c_out, stride=1):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


def build_model(num_classes):
    torch.manual_seed(0)
    model = nn.Sequential(
        conv_bn(3, 32), conv_bn(32, 64, stride=2), conv_bn(64, 64),
        conv_bn(64, 128, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, num_classes),
    )
    # pretend-trained BN statistics, so eval mode does something non-trivial
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model


class Predictor:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = build_model(cfg.num_classes).eval().to(DEVICE)

    def random_batch(self):
        return torch.randn(self.cfg.batch_size, 3, self.cfg.image_size, self.cfg.image_size).to(DEVICE)

    def warmup(self):
        with torch.no_grad():
            for _ in range(self.cfg.warmup):
                self.model(self.random_batch())
        synchronize()

    @torch.inference_mode()
    def run(self):
        preds, elapsed = [], 0.0
        for _ in range(self.cfg.num_batches):
            x = self.random_batch()
            synchronize()
            t0 = time.perf_counter()
            logits = self.model(x)
            synchronize()
            elapsed += time.perf_counter() - t0
            preds.append(logits.argmax(dim=1).cpu())
        return torch.cat(preds), elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True  # fixed input shape: let cuDNN autotune
    cfg = InferenceConfig(batch_size=args.batch_size, num_batches=args.num_batches, warmup=args.warmup)
    torch.manual_seed(1)

    predictor = Predictor(cfg)
    predictor.warmup()
    preds, elapsed = predictor.run()

    n = cfg.batch_size * cfg.num_batches
    print(f"{n} images in {elapsed * 1e3:.1f} ms -> {n / elapsed:,.0f} img/s")
    print("class histogram:", torch.bincount(preds, minlength=cfg.num_classes).tolist())


if __name__ == "__main__":
    main()
