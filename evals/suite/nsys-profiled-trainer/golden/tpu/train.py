"""Transformer-encoder classifier with the profiling hooks a performance engineer adds.

    nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop \
        python train.py --nsys-steps 10 12      # Nsight records steps 10-11 only
    python train.py --torch-profile trace/      # a torch.profiler trace of a few steps

NVTX ranges name each phase in the Nsight timeline; CUDA events time each step on the GPU.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from model import EncoderClassifier


def batches(n, batch_size, seq_len, vocab, classes, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        tokens = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
        labels = (tokens[:, 0] % classes).long()
        yield tokens, labels


def train_step(model, optimizer, tokens, labels):
    with torch.profiler.record_function("forward"):
        logits = model(tokens)
        loss = F.cross_entropy(logits, labels)
    with torch.profiler.record_function("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with torch.profiler.record_function("optimizer"):
        optimizer.step()
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--nsys-steps", type=int, nargs=2, default=(10, 12))
    parser.add_argument("--torch-profile", default="")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("tpu")
    model = EncoderClassifier(vocab=1000, dim=64, heads=4, layers=2, classes=5).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

    prof = None
    if args.torch_profile:
        prof = profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
            schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
            on_trace_ready=tensorboard_trace_handler(args.torch_profile),
            record_shapes=True,
        )
        prof.start()

    data = batches(args.steps, args.batch_size, args.seq_len, vocab=1000, classes=5)
    for step, (tokens, labels) in enumerate(data):
        tokens, labels = tokens.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        torch.accelerator.synchronize()
        t0 = time.perf_counter()
        loss = train_step(model, optimizer, tokens, labels)
        torch.accelerator.synchronize()
        step_ms = (time.perf_counter() - t0) * 1000
        if prof is not None:
            prof.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} ({step_ms:.2f} ms)")

    if prof is not None:
        prof.stop()
        print(prof.key_averages().table(sort_by="device_time_total", row_limit=10))


if __name__ == "__main__":
    main()
