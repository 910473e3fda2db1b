"""Training steps per second on the emulated device versus plain CPU, same run.

Three models: an MLP, a small CNN and a small GPT (2 layers, width 128). Each is
trained for a few warm-up steps, then timed, in a fresh process per device
(activating the emulator changes the process for good). Prints steps/s and the
emulated/CPU time ratio. Not a test. Usage:
    python benchmarks/emulator_overhead.py [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORKER = r"""
import json, sys, time
import torch
from torch import nn
device = sys.argv[1]
steps = int(sys.argv[2])
if device != "cpu":
    from torchport.sandbox import emulator
    emulator.activate(device)
torch.manual_seed(0)
torch.set_num_threads(1)

class GPT(nn.Module):
    def __init__(self, vocab=256, width=128, layers=2, heads=4, seq=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))
    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.blocks(x, mask=self.mask, is_causal=True))

def batch(name):
    if name == "mlp":
        return torch.randn(64, 256), torch.randint(0, 10, (64,))
    if name == "cnn":
        return torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    x = torch.randint(0, 256, (8, 64))
    return x, torch.roll(x, -1, 1)

def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    return GPT()

out = {}
for name in ("mlp", "cnn", "gpt"):
    net = model(name).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = (t.to(device) for t in batch(name))
    def step():
        logits = net(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    out[name] = steps / (time.perf_counter() - start)
print(json.dumps(out))
"""


def measure(device: str, steps: int) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, device, str(steps)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    cpu = measure("cpu", args.steps)
    tpu = measure("tpu", args.steps)
    print(f"{'model':<6} {'cpu steps/s':>12} {'tpu-emulated steps/s':>21} {'time ratio':>11}")
    for name in cpu:
        print(f"{name:<6} {cpu[name]:>12.1f} {tpu[name]:>21.1f} {cpu[name] / tpu[name]:>10.2f}x")


if __name__ == "__main__":
    main()
