"""Training time per step on the emulated device versus plain CPU, side by side.

Three models: an MLP, a small CNN and a small GPT (2 layers, width 128), trained with
AdamW. Each emulator (``python``: the tensor subclass; ``native``: the C++ PrivateUse1
backend) runs in a fresh process (activation changes the process for good), and
inside that process a CPU copy of the same model is timed in alternating 10-step
blocks, so both see the same machine load (method B of benchmarks/cpp_backend/README.md).
The ratio is device time / CPU time per step: 1.00x = no overhead. The first losses
must equal the CPU's within --tol at --matmul-precision highest (the default: exact float32
matmuls); ``--matmul-precision tpu`` times TorchTPU's own arithmetic (float32 matmuls in
bfloat16, sandbox/emulator/precision.py), whose losses differ from the CPU's by design (shown,
not checked). Not a test. Usage:
    python benchmarks/emulator_overhead.py [--steps 30] [--repeats 3] [--backends python,native]
        [--matmul-precision highest|high|medium|tpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

WORKER = r"""
import json, os, sys, time
import torch
from torch import nn
backend = sys.argv[1]
steps, check_steps, block = (int(a) for a in sys.argv[2:5])
pinned = None if sys.argv[5] == "tpu" else sys.argv[5]
from torchport.sandbox import emulated as emulator
device = str(emulator.activate("tpu", backend=backend, matmul_precision=pinned))
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

def trainer(name, dev):
    torch.manual_seed(0)
    net = model(name).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = (t.to(dev) for t in batch(name))
    def step():
        logits = net(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step

def timed(step, n):
    start = time.perf_counter()
    for _ in range(n):
        step()
    return time.perf_counter() - start

for name in ("mlp", "cnn", "gpt"):
    dev_step, cpu_step = trainer(name, device), trainer(name, "cpu")
    losses = [[dev_step().item(), cpu_step().item()] for _ in range(check_steps)]
    for _ in range(3):
        dev_step(), cpu_step()
    t_dev = t_cpu = 0.0
    done = 0
    while done < steps:
        n = min(block, steps - done)
        t_cpu += timed(cpu_step, n)
        t_dev += timed(dev_step, n)
        done += n
    out[name] = {"cpu_steps_per_s": steps / t_cpu, "steps_per_s": steps / t_dev,
                 "ratio": t_dev / t_cpu, "max_loss_diff": max(abs(a - b) for a, b in losses)}
print(json.dumps({"backend": emulator.active_backend(), "models": out}), flush=True)
"""

MODELS = ("mlp", "cnn", "gpt")


def measure(backend: str, args: argparse.Namespace) -> dict:
    """One worker process on emulator ``backend``; its JSON result."""
    cmd = [sys.executable, "-c", WORKER, backend, str(args.steps), str(args.check_steps), "10"]
    cmd.append(args.matmul_precision)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{backend} worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check-steps", type=int, default=5)
    ap.add_argument("--backends", default="python,native")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument(
        "--matmul-precision", default="highest", choices=("highest", "high", "medium", "tpu")
    )
    args = ap.parse_args()
    backends = args.backends.split(",")
    if "native" in backends:  # build (or find) it before any timing
        from torchport.sandbox.native import build

        started = time.monotonic()
        print(f"native library: {build.build()} ({time.monotonic() - started:.1f} s to get)")
    runs: dict[str, list[dict]] = {b: [] for b in backends}
    for r in range(args.repeats):  # backends take turns in every round
        for b in backends:
            runs[b].append(measure(b, args))
        print(f"round {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    med = statistics.median
    print(f"\n{args.repeats} rounds x {args.steps} timed steps; ratio = emulated / CPU time per")
    print("step, the CPU copy timed in the same process in alternating 10-step blocks (median).")
    header = f"{'model':<6}{'cpu steps/s':>13}"
    for b in backends:
        header += f"{b + ' steps/s':>18}{b + ' ratio':>15}"
    print(header)
    ok = True
    for m in MODELS:
        cpu = med(x["models"][m]["cpu_steps_per_s"] for b in backends for x in runs[b])
        row = f"{m:<6}{cpu:>13.1f}"
        for b in backends:
            sps = med(x["models"][m]["steps_per_s"] for x in runs[b])
            ratio = med(x["models"][m]["ratio"] for x in runs[b])
            row += f"{sps:>18.1f}{ratio:>14.2f}x"
            ok &= all(x["models"][m]["max_loss_diff"] <= args.tol for x in runs[b])
        print(row)
    for b in backends:
        name, why = runs[b][0]["backend"]
        diff = max(x["models"][m]["max_loss_diff"] for x in runs[b] for m in MODELS)
        print(f"{b}: ran as {name} ({why}); max loss difference vs CPU {diff:.1e}")
    if not ok and args.matmul_precision == "highest":
        sys.exit(f"losses differ from the CPU's by more than {args.tol:g}")


if __name__ == "__main__":
    main()
