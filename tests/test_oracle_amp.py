"""Oracles for the amp family (tools/catalogue/data/amp.toml): autocast, loss scaling, float16."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

PAIRS = [
    Pair(
        "TPA001",
        "tpu",
        "imported-autocast",
        """
        import torch
        from torch.cuda.amp import autocast

        with autocast():
            logits = model(x)
            loss = loss_fn(logits, y)
        """,
        """
        import torch

        with torch.autocast("tpu", dtype=torch.bfloat16):
            logits = model(x)
            loss = loss_fn(logits, y)
        """,
    ),
    Pair(
        "TPA001",
        "neuron",
        "dotted-autocast",
        """
        import torch

        with torch.cuda.amp.autocast():
            out = model(x)
        """,
        """
        import torch

        with torch.autocast("neuron", dtype=torch.bfloat16):
            out = model(x)
        """,
    ),
    Pair(
        "TPA001",
        "accelerator",
        "keeps-cuda-default-dtype",
        # CUDA autocast's default dtype is float16: the accelerator port keeps it
        """
        import torch


        def step(model, x, device):
            with torch.cuda.amp.autocast():
                return model(x.to(device))
        """,
        """
        import torch


        def step(model, x, device):
            with torch.autocast((<accelerator>).type, dtype=torch.float16):
                return model(x.to(device))
        """,
    ),
    Pair(
        "TPA002",
        "tpu",
        "disabled-scaler",
        """
        import torch

        scaler = torch.cuda.amp.GradScaler()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.save({"scaler": scaler.state_dict()}, "ckpt.pt")
        """,
        """
        import torch

        scaler = torch.amp.GradScaler("tpu", enabled=False)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.save({"scaler": scaler.state_dict()}, "ckpt.pt")
        """,
    ),
    Pair(
        "TPA006",
        "xla",
        "only-scaling-scaler-removed",
        """
        import torch

        scaler = torch.cuda.amp.GradScaler()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        """,
        """
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        """,
    ),
    Pair(
        "TPA002",
        "accelerator",
        "scaler-for-the-device",
        """
        import torch


        def make_scaler(device):
            return torch.cuda.amp.GradScaler()
        """,
        """
        import torch


        def make_scaler(device):
            return torch.amp.GradScaler((<accelerator>).type)
        """,
    ),
    Pair(
        "TPA002",
        "tpu",
        "cpu-scaler-left-alone",
        """
        import torch

        scaler = torch.amp.GradScaler("cpu")
        """,
    ),
    Pair(
        "TPA003",
        "tpu",
        "device-type-keyword",
        """
        import torch

        with torch.autocast(device_type="cuda", dtype=torch.float16):
            out = model(x)
        if torch.is_autocast_enabled("cuda"):
            out = out.float()
        """,
        """
        import torch

        with torch.autocast(device_type="tpu", dtype=torch.bfloat16):
            out = model(x)
        if torch.is_autocast_enabled("tpu"):
            out = out.float()
        """,
    ),
    Pair(
        "TPA003",
        "xla",
        "positional-device-type",
        """
        import torch

        with torch.autocast("cuda"):
            out = model(x)
        """,
        """
        import torch

        with torch.autocast("xla", dtype=torch.bfloat16):
            out = model(x)
        """,
    ),
    Pair(
        "TPA003",
        "accelerator",
        "keeps-other-arguments",
        """
        import torch


        def forward(model, x, device):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(x)
        """,
        """
        import torch


        def forward(model, x, device):
            with torch.autocast((<accelerator>).type, dtype=torch.bfloat16):
                return model(x)
        """,
    ),
    Pair(
        "TPA003",
        "tpu",
        "cpu-autocast-left-alone",
        """
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        """,
    ),
    Pair(
        "TPA004",
        "tpu",
        "half-and-float16",
        """
        import torch

        model = model.half()
        x = x.to(dtype=torch.float16)
        cache = torch.zeros(8, 1024, dtype=torch.half, device=device)
        """,
        """
        import torch

        model = model.bfloat16()
        x = x.to(dtype=torch.bfloat16)
        cache = torch.zeros(8, 1024, dtype=torch.bfloat16, device=device)
        """,
    ),
    Pair(
        "TPA004",
        "neuron",
        "string-mentioning-float16-left-alone",
        """
        import torch

        x = x.to(torch.float16)
        print("weights saved as float16")
        """,
        """
        import torch

        x = x.to(torch.bfloat16)
        print("weights saved as float16")
        """,
    ),
    Pair(
        "TPA004",
        "accelerator",
        "float16-left-alone",
        """
        import torch

        model = model.half()
        x = x.to(dtype=torch.float16)
        """,
    ),
    Pair(
        "TPA005",
        "tpu",
        "custom-fwd-bwd",
        """
        import torch


        class Double(torch.autograd.Function):
            @staticmethod
            @torch.cuda.amp.custom_fwd(cast_inputs=torch.float16)
            def forward(ctx, x):
                return x * 2

            @staticmethod
            @torch.cuda.amp.custom_bwd
            def backward(ctx, grad):
                return grad * 2
        """,
        """
        import torch


        class Double(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(cast_inputs=torch.bfloat16, device_type="tpu")
            def forward(ctx, x):
                return x * 2

            @staticmethod
            @torch.amp.custom_bwd(device_type="tpu")
            def backward(ctx, grad):
                return grad * 2
        """,
    ),
    Pair(
        "TPA005",
        "accelerator",
        "custom-fwd-device-type",
        """
        import torch

        device = torch.accelerator.current_accelerator()


        class Double(torch.autograd.Function):
            @staticmethod
            @torch.cuda.amp.custom_fwd
            def forward(ctx, x):
                return x * 2
        """,
        """
        import torch

        device = torch.accelerator.current_accelerator()


        class Double(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(device_type=(<accelerator>).type)
            def forward(ctx, x):
                return x * 2
        """,
    ),
    Pair(
        "TPA001",
        "tpu",
        "autocast-imported-under-an-alias",
        """
        import torch
        from torch.cuda.amp import autocast as amp_autocast

        with amp_autocast():
            out = model(x)
        """,
        """
        import torch

        with torch.autocast("tpu", dtype=torch.bfloat16):
            out = model(x)
        """,
    ),
    Pair(
        "TPA001",
        "tpu",
        "own-autocast-left-alone",
        """
        from contextlib import nullcontext as autocast

        with autocast():
            out = model(x)
        """,
    ),
    Pair(
        "TPA002",
        "tpu",
        "cuda-scaler-keeps-its-options",
        """
        import torch

        scaler = torch.amp.GradScaler("cuda", init_scale=1024)
        torch.save(scaler.state_dict(), "scaler.pt")
        """,
        """
        import torch

        scaler = torch.amp.GradScaler("tpu", init_scale=1024, enabled=False)
        torch.save(scaler.state_dict(), "scaler.pt")
        """,
    ),
    Pair(
        "TPA004",
        "xla",
        "dtype-chosen-at-run-time",
        """
        import torch

        dtype = torch.float16 if fp16 else torch.float32
        dtypes = {"fp16": torch.half, "fp32": torch.float}
        """,
        """
        import torch

        dtype = torch.bfloat16 if fp16 else torch.float32
        dtypes = {"fp16": torch.bfloat16, "fp32": torch.float}
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_amp_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
