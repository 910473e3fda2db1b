"""Tests of the CPU-emulated ``tpu`` / ``neuron`` device (torchport.sandbox.emulator).

Activation renames torch's PrivateUse1 backend, which can happen once per process,
so every test runs its snippet in a fresh interpreter and reads back JSON. Tests that
take the ``backend`` fixture run on both emulators: the Python one (a tensor subclass)
and the native one (a C++ PrivateUse1 backend), which is built once here, as torchport
builds it before a sandboxed run, and handed to the snippets.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

BACKENDS = ("python", "native")


@functools.cache
def _native_library() -> tuple[str | None, str]:
    """(library path, "") once built, or (None, why it cannot be built here).

    Kept across test sessions in the user's cache (as the local model is), since a
    build costs about a minute of CPU; ``TORCHPORT_EMULATOR_CACHE`` moves it.
    """
    from torchport.sandbox.native import build

    reason = build.missing_tools()
    if reason:
        return None, reason
    cache = os.environ.get(build.CACHE_ENV) or str(Path.home() / ".cache/torchport/emulator")
    proc = subprocess.run(
        [sys.executable, "-m", "torchport.sandbox.native.build"],
        capture_output=True,
        text=True,
        env={**os.environ, build.CACHE_ENV: cache},
        timeout=build.BUILD_TIMEOUT_S + 60,
    )
    assert proc.returncode == 0, f"the native emulator did not build:\n{proc.stderr[-4000:]}"
    return proc.stdout.strip().splitlines()[-1], ""


def backend_env(backend: str) -> dict[str, str]:
    """The variables that make a snippet's ``activate()`` use ``backend``."""
    from torchport.sandbox import native

    if backend == "python":
        return {native.ENV: "python"}
    library, reason = _native_library()
    if library is None:
        pytest.skip(f"native emulator: no C++ toolchain here ({reason})")
    return {native.ENV: "native", native.LIB_ENV: library}


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each emulator in turn; the native one skips only where nothing can compile it."""
    backend_env(request.param)
    return request.param


PRELUDE = """
import json, os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchport.sandbox.emulated as emu
if {activate!r}:
    emu.activate({name!r}, devices={devices}, matmul_precision={matmul_precision!r})
result = {{}}
"""


def run_snippet(
    code: str,
    name: str = "tpu",
    devices: int = 2,
    activate: bool = True,
    env: dict | None = None,
    backend: str = "python",
    matmul_precision: str | None = None,
) -> dict[str, Any]:
    """Run ``code`` (which fills ``result``) in a fresh interpreter on emulator ``backend``;
    return ``result``. ``matmul_precision="highest"`` pins exact float32 matmuls (TorchTPU's
    HIGHEST), for a comparison of the device's mechanics with the CPU's."""
    env = {**backend_env(backend), **(env or {})}
    source = PRELUDE.format(
        activate=activate, name=name, devices=devices, matmul_precision=matmul_precision
    )
    source += textwrap.dedent(code) + "\nprint('RESULT=' + json.dumps(result))\n"
    proc = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        # 35 s alone for the conformance suite's largest snippet; 120 s ran out once under
        # a full suite with other CPU-heavy work beside it (two cores)
        timeout=600,
        env={**os.environ, **env},
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
        # TorchTPU's fused attention ignores attention dropout (tests/test_tpu_attention.py);
        # the block's other dropouts stay, drawn from the device generator as on the CPU
        self.block.self_attn.dropout = 0.0
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


@pytest.mark.slow
def test_training_matches_cpu_within_1e_6(backend: str) -> None:
    """Acceptance: a CNN and a transformer block train identically on CPU and tpu, at
    TorchTPU's exact float32 matmuls (HIGHEST; its default: tests/test_tpu_precision.py)."""
    cpu = run_snippet("DEVICE = 'cpu'\n" + TRAIN_CODE, activate=False)["losses"]
    dev = run_snippet("DEVICE = 'tpu'\n" + TRAIN_CODE, backend=backend, matmul_precision="highest")[
        "losses"
    ]
    assert cpu.keys() == dev.keys()
    for key in cpu:
        assert len(dev[key]) == 20
        assert max(abs(a - b) for a, b in zip(cpu[key], dev[key], strict=True)) <= 1e-6, key
        assert cpu[key][-1] < cpu[key][0]  # it did train (one fixed batch)


def test_activate_rejects_unknown_or_second_device(backend: str) -> None:
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
        result["backend"] = emu.active_backend()
        """,
        backend=backend,
    )
    assert r["errors"] == ["ValueError", "RuntimeError", "ValueError"]
    assert r["again"] == "tpu:0"
    assert r["backend"][0] == backend and r["backend"][1]  # which one ran, and why


def test_import_alone_does_not_activate() -> None:
    import torch
    import torchport.sandbox.emulated as emu

    assert emu.active_device() is None
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


@pytest.mark.slow
def test_torchscript_still_knows_the_tensor_factories(backend: str) -> None:
    """``import torch.distributed.optim`` scripts functional optimizers that call
    ``torch.tensor``; the emulator's wrapper must stay the builtin TorchScript knows
    (llm.c's train_gpt2.py imports ZeroRedundancyOptimizer at the top)."""
    out = run_snippet(
        """
        from torch.distributed.optim import ZeroRedundancyOptimizer
        result = {"imported": ZeroRedundancyOptimizer.__name__}
        """,
        backend=backend,
    )
    assert out == {"imported": "ZeroRedundancyOptimizer"}


def test_the_backend_choice_says_why(tmp_path, monkeypatch) -> None:
    """One place decides the emulator; every answer carries its reason, and a sandboxed
    run (build=False) never compiles: it takes the library it is given or falls back."""
    from torchport.sandbox import native

    monkeypatch.setenv("TORCHPORT_EMULATOR_CACHE", str(tmp_path / "cache"))  # empty
    monkeypatch.delenv(native.LIB_ENV, raising=False)
    monkeypatch.delenv(native.WHY_ENV, raising=False)
    monkeypatch.setenv(native.ENV, "python")
    assert native.choose().backend == "python" and "python" in native.choose().reason
    assert native.prepare_for_sandbox("plain") == ([], {})
    paths, env = native.prepare_for_sandbox("tpu")
    assert paths == [] and env[native.ENV] == "python" and env[native.WHY_ENV]
    monkeypatch.setenv(native.ENV, "auto")
    fallback = native.choose(build=False)
    assert fallback.backend == "python" and native.LIB_ENV in fallback.reason
    monkeypatch.setenv(native.WHY_ENV, "no compiler on the parent")
    assert native.choose(build=False).reason.endswith("no compiler on the parent")
    with pytest.raises(RuntimeError, match="not available"):
        native.choose("native", build=False)
    library = tmp_path / "given.so"
    library.write_bytes(b"")
    monkeypatch.setenv(native.LIB_ENV, str(library))
    given = native.choose(build=False)
    assert (given.backend, given.library) == ("native", library)
    with pytest.raises(ValueError, match="unknown emulator backend"):
        native.choose("fast")


LEARNED_BIAS = """
torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, 6, 8, requires_grad=True) for _ in range(3))
bias = torch.randn(1, 4, 6, 6, requires_grad=True)  # a learned attention bias
device = DEVICE
leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v, bias)]
out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3])
out.pow(2).sum().backward()
result["out"] = out.detach().cpu().flatten().tolist()
result["grads"] = [t.grad.cpu().flatten().tolist() for t in leaves]
"""


def test_attention_with_a_learned_bias_has_its_gradients(backend: str) -> None:
    """The device asks the CPU which SDPA kernel to run; a mask that needs gradients must
    take the math kernel there too (the CPU flash kernel has none for attn_mask)."""
    cpu = run_snippet("DEVICE = 'cpu'\n" + LEARNED_BIAS, activate=False)
    dev = run_snippet(
        "DEVICE = 'tpu'\n" + LEARNED_BIAS, backend=backend, matmul_precision="highest"
    )
    assert max(abs(a - b) for a, b in zip(cpu["out"], dev["out"], strict=True)) <= 1e-6
    for want, got in zip(cpu["grads"], dev["grads"], strict=True):
        assert max(abs(a - b) for a, b in zip(want, got, strict=True)) <= 1e-6
