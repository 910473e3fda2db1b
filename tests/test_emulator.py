"""Tests of the CPU-emulated ``tpu`` / ``neuron`` device (torchport.sandbox.emulator).

Activation renames torch's PrivateUse1 backend, which can happen once per process,
so every test runs its snippet in a fresh interpreter and reads back JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

PRELUDE = """
import json, os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchport.sandbox.emulator as emu
if {activate!r}:
    emu.activate({name!r}, devices={devices})
result = {{}}
"""


def run_snippet(
    code: str, name: str = "tpu", devices: int = 2, activate: bool = True, env: dict | None = None
) -> dict[str, Any]:
    """Run ``code`` (which fills ``result``) in a fresh interpreter; return ``result``."""
    source = PRELUDE.format(activate=activate, name=name, devices=devices)
    source += textwrap.dedent(code) + "\nprint('RESULT=' + json.dumps(result))\n"
    proc = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT=") :])


TRAIN_CODE = """
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))

class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.head = nn.Linear(16, 32)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.block(self.emb(x), src_mask=mask, is_causal=True))

device = sys.argv[1] if len(sys.argv) > 1 else DEVICE
losses = {}
for kind, opt_name in [("cnn", "sgd"), ("cnn", "adamw"), ("lm", "sgd"), ("lm", "adamw")]:
    torch.manual_seed(0)
    model = (CNN() if kind == "cnn" else TinyLM()).to(device)
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    out_losses = []
    if kind == "cnn":
        x = torch.randn(8, 1, 8, 8, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
    else:
        x = torch.randint(0, 32, (4, 12), generator=g)
        y = torch.randint(0, 32, (4, 12), generator=g)
    for _ in range(20):
        x, y = x.to(device), y.to(device)  # one fixed batch, so the loss must fall
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out_losses.append(loss.item())
    losses[f"{kind}-{opt_name}"] = out_losses
result["losses"] = losses
"""


def test_training_matches_cpu_within_1e_6() -> None:
    """Acceptance: a CNN and a transformer block train identically on CPU and tpu."""
    cpu = run_snippet("DEVICE = 'cpu'\n" + TRAIN_CODE, activate=False)["losses"]
    dev = run_snippet("DEVICE = 'tpu'\n" + TRAIN_CODE)["losses"]
    assert cpu.keys() == dev.keys()
    for key in cpu:
        assert len(dev[key]) == 20
        assert max(abs(a - b) for a, b in zip(cpu[key], dev[key], strict=True)) <= 1e-6, key
        assert cpu[key][-1] < cpu[key][0]  # it did train (one fixed batch)


def test_activate_rejects_unknown_or_second_device() -> None:
    r = run_snippet(
        """
        errors = []
        for args in [("cuda", 1), ("neuron", 1), ("tpu", 0)]:
            try:
                emu.activate(*args)
            except (ValueError, RuntimeError) as e:
                errors.append(type(e).__name__)
        result["errors"] = errors
        result["again"] = str(emu.activate("tpu", devices=2))
        """
    )
    assert r["errors"] == ["ValueError", "RuntimeError", "ValueError"]
    assert r["again"] == "tpu:0"


def test_import_alone_does_not_activate() -> None:
    import torch
    import torchport.sandbox.emulator as emu

    assert emu.active_device() is None
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


def test_torchscript_still_knows_the_tensor_factories() -> None:
    """``import torch.distributed.optim`` scripts functional optimizers that call
    ``torch.tensor``; the emulator's wrapper must stay the builtin TorchScript knows
    (llm.c's train_gpt2.py imports ZeroRedundancyOptimizer at the top)."""
    out = run_snippet(
        """
        from torch.distributed.optim import ZeroRedundancyOptimizer
        result = {"imported": ZeroRedundancyOptimizer.__name__}
        """
    )
    assert out == {"imported": "ZeroRedundancyOptimizer"}
