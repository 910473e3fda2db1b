"""Training steps/s: plain CPU vs a C++ PrivateUse1 backend vs the Python emulator.

Same models, batches, optimizer and step as benchmarks/emulator_overhead.py (its
worker source is reused as is). Each measurement runs in a fresh process, since a
process can hold one PrivateUse1 backend only; backends are interleaved over
--repeats rounds and the median steps/s is reported with its ratio to the CPU
median of the same run. Also checks the first 20 losses against CPU's and
measures the per-op dispatch cost (a tiny add). Not a test. Usage:
    python benchmarks/cpp_backend/bench.py [--steps 30] [--repeats 5]
        [--backends cpu,cppdev-alias,cppdev-copy,emulator]
Backends: cpu; cppdev-alias / cppdev-copy (C++ backend, zero-copy or copying
fallback; add -noroute to leave composite kernels in place, see cppdev.py);
emulator (the Python emulator, torchport.sandbox.emulator, as "tpu").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import emulator_overhead  # noqa: E402  (reused: its WORKER holds the models)


def model_source() -> str:
    """The GPT class and batch()/model() definitions of emulator_overhead's worker."""
    src = emulator_overhead.WORKER
    start = src.index("class GPT(nn.Module):")
    end = src.index("out = {}")
    return src[start:end]


WORKER = (
    r"""
import json, os, sys, time
import torch
from torch import nn
backend = sys.argv[1]
steps, check_steps, micro_n = (int(a) for a in sys.argv[2:5])
models = sys.argv[5].split(",")
ext = None
if backend == "cpu":
    device = "cpu"
elif backend.startswith("cppdev-"):
    sys.path.insert(0, sys.argv[6])
    import cppdev
    parts = backend.split("-")  # cppdev-<alias|copy>[-noroute]
    ext = cppdev.activate(parts[1], route="noroute" not in parts)
    device = "cppdev"
elif backend == "emulator":
    from torchport.sandbox import emulator
    device = str(emulator.activate("tpu"))
else:
    raise SystemExit(f"unknown backend {backend}")
torch.set_num_threads(1)
"""
    + "{MODELS}"
    + r"""
res = {"steps_per_s": {}, "cpu_inproc_steps_per_s": {}, "losses": {}, "fallback_calls_per_step": {}}

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

block = 10
for name in models:
    step = trainer(name, device)
    # correctness: the first check_steps losses, from the same seed on every backend
    res["losses"][name] = [step().item() for _ in range(check_steps)]
    for _ in range(3):
        step()
    if device == "cpu":
        res["steps_per_s"][name] = steps / timed(step, steps)
        continue
    # Also time a CPU copy of the model in this process, in alternating blocks of
    # `block` steps, so that both see the same machine load.
    cpu_step = trainer(name, "cpu")
    for _ in range(3):
        cpu_step()
    t_dev = t_cpu = 0.0
    best_dev = best_cpu = float("inf")
    calls = 0
    done = 0
    while done < steps:
        n = min(block, steps - done)
        dt = timed(cpu_step, n)
        t_cpu += dt
        best_cpu = min(best_cpu, dt / n)
        c0 = ext.fallback_calls() if ext else 0
        dt = timed(step, n)
        t_dev += dt
        best_dev = min(best_dev, dt / n)
        calls += (ext.fallback_calls() - c0) if ext else 0
        done += n
    res["steps_per_s"][name] = steps / t_dev
    res["cpu_inproc_steps_per_s"][name] = steps / t_cpu
    res.setdefault("best_block_ratio", {})[name] = best_dev / best_cpu
    if ext:
        res["fallback_calls_per_step"][name] = calls / steps

# dispatch cost of one tiny op (out-of-place add of two 1-element tensors),
# on this backend and, alternating, on plain CPU in the same process
def add_cost(dev):
    a = torch.ones(1, device=dev)
    b = torch.ones(1, device=dev)
    for _ in range(1000):
        a + b
    t0 = time.perf_counter()
    for _ in range(micro_n):
        a + b
    return (time.perf_counter() - t0) / micro_n * 1e6
best_dev = best_cpu = float("inf")
for _ in range(5):
    best_cpu = min(best_cpu, add_cost("cpu"))
    if device != "cpu":
        best_dev = min(best_dev, add_cost(device))
res["add_us"] = best_cpu if device == "cpu" else best_dev
res["cpu_inproc_add_us"] = best_cpu
print(json.dumps(res), flush=True)
# The autograd device thread can race the interpreter's shutdown (a torch issue,
# not the backend's); the results are out, so leave without it.
os._exit(0)
"""
)


def run_worker(backend: str, args: argparse.Namespace) -> dict:
    code = WORKER.replace("{MODELS}", model_source())
    cmd = [
        sys.executable,
        "-c",
        code,
        backend,
        str(args.steps),
        str(args.check_steps),
        str(args.micro_n),
        args.models,
        str(HERE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--check-steps", type=int, default=20)
    ap.add_argument("--micro-n", type=int, default=20000)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--backends", default="cpu,cppdev-alias,cppdev-copy,emulator")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--json", help="also write all raw results to this file")
    args = ap.parse_args()
    backends = args.backends.split(",")
    if "cpu" not in backends:
        backends.insert(0, "cpu")
    if any(b.startswith("cppdev") for b in backends):
        sys.path.insert(0, str(HERE))
        import cppdev

        cppdev.load()  # build once, before any timing
    runs: dict[str, list[dict]] = {b: [] for b in backends}
    for r in range(args.repeats):
        for b in backends:
            runs[b].append(run_worker(b, args))
        print(f"round {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)

    models = args.models.split(",")
    med = lambda xs: statistics.median(list(xs))  # noqa: E731
    cpu_runs = runs["cpu"]
    sps = {b: {m: med(x["steps_per_s"][m] for x in runs[b]) for m in models} for b in backends}
    # ratio per round (CPU process and backend process of the same round), then median
    ratio = {
        b: {
            m: med(
                c["steps_per_s"][m] / x["steps_per_s"][m]
                for c, x in zip(cpu_runs, runs[b], strict=True)
            )
            for m in models
        }
        for b in backends
    }
    # ratio against the CPU model timed in the same process, alternating blocks
    paired = {
        b: {
            m: med(x["cpu_inproc_steps_per_s"][m] / x["steps_per_s"][m] for x in runs[b])
            for m in models
        }
        for b in backends
        if b != "cpu"
    }
    best = {
        b: {m: min(x["best_block_ratio"][m] for x in runs[b]) for m in models}
        for b in backends
        if b != "cpu"
    }
    print(f"{args.repeats} interleaved rounds, {args.steps} timed steps per model and process.")
    print("steps/s: median over rounds. ratio = CPU time / backend time per step,")
    print("  A: vs the CPU process of the same round, B: vs a CPU copy of the model timed in")
    print("  the same process in alternating 10-step blocks (robust to machine load);")
    print("  both are medians over rounds; C: fastest backend block / fastest CPU block of")
    print("  the same process, best over rounds (load only ever adds). 1.00x = no overhead.\n")
    w = 38
    print(f"{'model':<6}" + "".join(f"{b:>{w}}" for b in backends))
    for m in models:
        row = f"{m:<6}"
        for b in backends:
            cell = f"{sps[b][m]:.1f}"
            if b != "cpu":
                cell += f" (A {ratio[b][m]:.2f}x B {paired[b][m]:.2f}x C {best[b][m]:.2f}x)"
            row += f"{cell:>{w}}"
        print(row)
    print("\ntiny add (1-element tensors), µs/op, median over rounds;")
    print("overhead = backend - CPU timed in the same process:")
    for b in backends:
        add = med(x["add_us"] for x in runs[b])
        over = med(x["add_us"] - x["cpu_inproc_add_us"] for x in runs[b])
        extra = "" if b == "cpu" else f"  (+{over:.2f} µs)"
        print(f"  {b:<22} {add:8.2f}{extra}")
    for b in backends:
        calls = runs[b][0]["fallback_calls_per_step"]
        if calls:
            print(
                f"\n{b}: boxed-fallback calls per training step: "
                + ", ".join(f"{m} {calls[m]:.0f}" for m in models)
            )
    print(f"\nlosses of the first {args.check_steps} steps vs CPU (max |diff|, tol {args.tol:g}):")
    ok = True
    ref = runs["cpu"][0]["losses"]
    for b in backends[1:]:
        for m in models:
            diff = max(abs(p - q) for p, q in zip(ref[m], runs[b][0]["losses"][m], strict=True))
            good = diff <= args.tol
            note = "ok" if good else "MISMATCH"
            if "noroute" in b:  # runs torch's composite decompositions: may differ
                note += " (diagnostic variant, not checked)"
            else:
                ok &= good
            print(f"  {b:<22} {m:<4} {diff:.2e} {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
