"""How fast `torchport scan` is, measured against baselines in the same run.

1. A realistic CUDA training repository (the labelled fixture corpus plus the
   bundled example: scripts, packages, notebooks, DDP, AMP, kernels): wall time
   of `torchport scan` against TorchFix (`torchfix --select ALL`), both as the
   command a user runs, best of N.
2. A large synthetic tree (default 5,000 files) where few files mention CUDA:
   lines per second, and peak memory, against a baseline of merely reading and
   `ast.parse`-ing every file (what any Python-aware scanner must at least do
   without a prefilter); TorchFix on a 5% sample for scale.

Not a test: prints figures. Usage: `make bench`, or
`python benchmarks/scan_speed.py --torchfix PATH/TO/torchfix [--files 5000]`.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCHPORT = [sys.executable, "-m", "torchport.cli"]

PLAIN_MODULE = '''\
"""Module {i}: data utilities and a small model, no accelerator code."""

import math
import os
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Config{i}:
    width: int = {w}
    depth: int = 3
    dropout: float = 0.1
    name: str = "block-{i}"


class Block{i}(nn.Module):
    def __init__(self, cfg: Config{i}) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(cfg.width, cfg.width) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.width)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        for layer in self.layers:
            x = x + self.drop(torch.relu(layer(self.norm(x))))
        return x


def schedule_{i}(step: int, warmup: int = 100, total: int = 1000) -> float:
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def read_manifest_{i}(path: str) -> list[str]:
    entries = []
    if not os.path.exists(path):
        return entries
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                entries.append(line)
    return entries


def collate_{i}(batch):
    xs = torch.stack([b[0] for b in batch])
    ys = torch.tensor([b[1] for b in batch])
    return xs, ys


def summarize_{i}(values: list[float]) -> dict[str, float]:
    if not values:
        return {{"mean": 0.0, "max": 0.0, "min": 0.0}}
    return {{"mean": sum(values) / len(values), "max": max(values), "min": min(values)}}
'''

CUDA_TAIL = """

def train_{i}(model, loader, steps: int = 10):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.cuda()
    scaler = torch.cuda.amp.GradScaler()
    torch.backends.cudnn.benchmark = True
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.cuda.amp.autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        print(step, loss.item())
    return torch.cuda.max_memory_allocated()
"""


def make_large_tree(root: Path, files: int, cuda_share: float, seed: int = 0) -> int:
    """Write ``files`` modules into nested packages; returns their total line count."""
    rng = random.Random(seed)
    lines = 0
    for i in range(files):
        pkg = root / f"pkg{i // 250}" / f"sub{(i // 25) % 10}"
        pkg.mkdir(parents=True, exist_ok=True)
        text = PLAIN_MODULE.format(i=i, w=rng.choice([64, 128, 256]))
        if rng.random() < cuda_share:
            text += CUDA_TAIL.format(i=i)
        (pkg / f"mod{i}.py").write_text(text)
        lines += text.count("\n")
    return lines


def make_realistic_repo(root: Path) -> None:
    corpus = ROOT / "tests" / "fixtures" / "corpus"
    if not corpus.is_dir():
        raise SystemExit(f"fixture corpus missing at {corpus}")
    shutil.copytree(corpus, root / "projects")
    shutil.copytree(ROOT / "examples" / "cuda_mnist", root / "cuda_mnist")


def timed(cmd: list[str], repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` runs, and the peak RSS (KiB) seen across them."""
    best, peak = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}): {proc.stderr.read()[-500:]}")
        best, peak = min(best, elapsed), max(peak, usage.ru_maxrss)
    return best, peak


def parse_everything(root: Path) -> float:
    start = time.perf_counter()
    for path in root.rglob("*.py"):
        ast.parse(path.read_bytes())
    return time.perf_counter() - start


def loc_of(root: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in root.rglob("*.py"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--torchfix", help="path to the torchfix executable (its own venv)")
    ap.add_argument("--files", type=int, default=5000, help="files in the large tree")
    ap.add_argument("--cuda-share", type=float, default=0.02, help="share of files using CUDA")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        real = tmp / "realistic"
        make_realistic_repo(real)
        real_loc = loc_of(real)
        print(f"realistic repo: {sum(1 for _ in real.rglob('*.py'))} .py files, {real_loc} LOC")
        tp_real, _ = timed([*TORCHPORT, "scan", str(real), "-f", "json", "-q"], args.repeat)
        print(f"  torchport scan:           {tp_real:7.3f} s")
        if args.torchfix:
            tf_real, _ = timed([args.torchfix, "--select", "ALL", str(real)], args.repeat)
            print(f"  torchfix --select ALL:    {tf_real:7.3f} s")
            print(f"  speed-up vs TorchFix:     {tf_real / tp_real:7.1f}x")

        large = tmp / "large"
        large_loc = make_large_tree(large, args.files, args.cuda_share)
        print(f"large tree: {args.files} files, {large_loc} LOC, {args.cuda_share:.0%} use CUDA")
        base = min(parse_everything(large) for _ in range(args.repeat))
        tp_large, rss = timed([*TORCHPORT, "scan", str(large), "-f", "json", "-q"], args.repeat)
        one, _ = timed([*TORCHPORT, "scan", str(large), "-f", "json", "-q", "-j", "1"], 1)
        print(f"  baseline read+ast.parse:  {base:7.3f} s  ({large_loc / base:,.0f} LOC/s)")
        print(
            f"  torchport scan:           {tp_large:7.3f} s  ({large_loc / tp_large:,.0f} LOC/s,"
            f" {base / tp_large:.1f}x the baseline)"
        )
        print(f"  torchport scan -j 1:      {one:7.3f} s  ({large_loc / one:,.0f} LOC/s)")
        print(f"  peak RSS (scan process):  {rss / 1024:7.1f} MiB")
        if args.torchfix:
            sample = tmp / "sample"
            sample_files = max(1, args.files // 20)
            sample_loc = make_large_tree(sample, sample_files, args.cuda_share)
            tf_sample, _ = timed([args.torchfix, "--select", "ALL", str(sample)], 1)
            print(
                f"  torchfix on a {sample_files}-file sample: {tf_sample:.3f} s "
                f"({sample_loc / tf_sample:,.0f} LOC/s)"
            )


if __name__ == "__main__":
    main()
