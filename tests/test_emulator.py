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


def test_device_strings_transfers_and_printing() -> None:
    r = run_snippet(
        """
        x = torch.arange(6.0).reshape(2, 3)
        a, b, c = x.to("tpu"), x.tpu(), x.to("tpu:1")
        result["devices"] = [str(a.device), str(b.device), str(c.device)]
        result["is_tpu"] = [a.is_tpu, x.is_tpu]
        result["roundtrip"] = a.cpu().tolist() == x.tolist() and c.cpu().equal(x)
        result["cpu_device"] = str(a.cpu().device)
        result["item"] = a.sum().item()
        result["repr"] = repr(torch.ones(2, device="tpu:1"))
        m = nn.Linear(3, 2).to("tpu")
        result["module"] = [str(p.device) for p in m.parameters()]
        result["param"] = isinstance(m.weight, nn.Parameter)
        result["module_tpu"] = str(nn.Linear(3, 2).tpu().weight.device)
        try:
            torch.zeros(1, device="tpu:2")
            result["ordinal"] = "no error"
        except RuntimeError as e:
            result["ordinal"] = str(e)
        """
    )
    assert r["devices"] == ["tpu:0", "tpu:0", "tpu:1"]
    assert r["is_tpu"] == [True, False]
    assert r["roundtrip"] is True and r["cpu_device"] == "cpu"
    assert r["item"] == 15.0
    assert r["repr"] == "tensor([1., 1.], device='tpu:1')"
    assert r["module"] == ["tpu:0", "tpu:0"] and r["param"] is True
    assert r["module_tpu"] == "tpu:0"
    assert "invalid device ordinal 2" in r["ordinal"]


def test_factory_functions_with_device() -> None:
    r = run_snippet(
        """
        torch.manual_seed(0)
        cpu = [torch.randn(3), torch.rand(3), torch.randint(0, 9, (3,))]
        torch.manual_seed(0)
        dev = [torch.randn(3, device="tpu"), torch.rand(3, device="tpu"),
               torch.randint(0, 9, (3,), device="tpu")]
        result["random_match"] = all(c.equal(d.cpu()) for c, d in zip(cpu, dev))
        made = {
            "zeros": torch.zeros(2, 3, device="tpu"),
            "ones": torch.ones(2, device="tpu:1"),
            "empty": torch.empty(4, device="tpu"),
            "arange": torch.arange(1, 7, 2, device="tpu"),
            "full": torch.full((2,), 7.0, device="tpu"),
            "tensor": torch.tensor([[1, 2], [3, 4]], device="tpu"),
            "eye": torch.eye(2, device="tpu"),
            "linspace": torch.linspace(0, 1, 5, device="tpu"),
            "zeros_like": torch.zeros_like(torch.ones(2, device="tpu:1")),
            "ones_like": torch.ones_like(torch.ones(2), device="tpu"),
            "randn_like": torch.randn_like(torch.ones(2, device="tpu")),
            "full_like": torch.full_like(torch.ones(2, device="tpu"), 3),
        }
        result["made"] = {k: [str(v.device), list(v.shape), str(v.dtype)] for k, v in made.items()}
        result["values"] = {k: made[k].cpu().tolist() for k in ("arange", "full", "tensor", "eye")}
        """
    )
    assert r["random_match"] is True
    made = r["made"]
    assert made["zeros"] == ["tpu:0", [2, 3], "torch.float32"]
    assert made["ones"][0] == "tpu:1" and made["zeros_like"][0] == "tpu:1"
    assert made["arange"] == ["tpu:0", [3], "torch.int64"]
    assert made["tensor"] == ["tpu:0", [2, 2], "torch.int64"]
    assert all(v[0].startswith("tpu:") for v in made.values())
    assert r["values"]["arange"] == [1, 3, 5]
    assert r["values"]["full"] == [7.0, 7.0]
    assert r["values"]["tensor"] == [[1, 2], [3, 4]]
    assert r["values"]["eye"] == [[1.0, 0.0], [0.0, 1.0]]


def test_mixed_devices_and_numpy_raise() -> None:
    r = run_snippet(
        """
        a = torch.ones(3, device="tpu")
        errors = {}
        for key, fn in {
            "cpu": lambda: a + torch.ones(3),
            "ordinal": lambda: a + torch.ones(3, device="tpu:1"),
            "matmul": lambda: torch.ones(2, 3) @ torch.ones(3, 2, device="tpu"),
            "numpy": lambda: a.numpy(),
        }.items():
            try:
                fn()
                errors[key] = None
            except (RuntimeError, TypeError) as e:
                errors[key] = [type(e).__name__, str(e)]
        result["errors"] = errors
        result["scalar_ok"] = (a * torch.tensor(2.0)).cpu().tolist()
        """
    )
    e = r["errors"]
    for key in ("cpu", "ordinal", "matmul"):
        assert e[key][0] == "RuntimeError"
        assert "Expected all tensors to be on the same device" in e[key][1]
    assert "tpu:0 and cpu" in e["cpu"][1] and "tpu:0 and tpu:1" in e["ordinal"][1]
    assert e["numpy"] == [
        "TypeError",
        "can't convert tpu:0 device type tensor to numpy. "
        "Use Tensor.cpu() to copy the tensor to host memory first.",
    ]
    assert r["scalar_ok"] == [2.0, 2.0, 2.0]  # 0-dim CPU tensors mix, as on CUDA


def test_accelerator_api_reports_emulated_device() -> None:
    r = run_snippet(
        """
        acc = torch.accelerator
        result["available"] = acc.is_available()
        result["count"] = acc.device_count()
        result["current"] = str(acc.current_accelerator())
        result["index0"] = acc.current_device_index()
        acc.set_device_index(2)
        result["index2"] = acc.current_device_index()
        result["factory_on_current"] = str(torch.zeros(1, device="tpu").device)
        with acc.device_index(1):
            result["inside"] = acc.current_device_index()
        result["after"] = acc.current_device_index()
        acc.synchronize()
        result["module"] = torch.get_device_module("tpu").__name__
        """,
        devices=4,
    )
    assert r == {
        "available": True,
        "count": 4,
        "current": "tpu",
        "index0": 0,
        "index2": 2,
        "factory_on_current": "tpu:2",
        "inside": 1,
        "after": 2,
        "module": "torch.tpu",
    }


def test_neuron_device() -> None:
    r = run_snippet(
        """
        x = torch.ones(2).to("neuron")
        result["device"] = str(x.device)
        result["is_neuron"] = x.is_neuron
        result["acc"] = [str(torch.accelerator.current_accelerator()),
                         torch.accelerator.device_count()]
        result["sum"] = (x * 3).sum().item()
        result["sync"] = torch.neuron.synchronize() is None  # not a TorchTPU legacy ban
        """,
        name="neuron",
        devices=1,
    )
    assert r == {
        "device": "neuron:0",
        "is_neuron": True,
        "acc": ["neuron", 1],
        "sum": 6.0,
        "sync": True,
    }


AUTOGRAD_CODE = """
def grads(device):
    torch.manual_seed(0)
    emb = nn.Embedding(10, 8).to(device)
    conv = nn.Conv2d(2, 4, 3).to(device)
    lin = nn.Linear(16, 8).to(device)
    ln = nn.LayerNorm(8).to(device)
    w = torch.randn(8, 5).to(device).requires_grad_()
    img = torch.randn(2, 2, 4, 4).to(device)
    ids = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]).to(device)
    target = torch.tensor([0, 1, 2, 3]).to(device)
    h = F.relu(conv(img)).flatten(1)            # (2, 16)
    h = lin(h).view(2, 8) + emb(ids).mean(0)    # views + broadcasting
    h = ln(h)
    h = h.clone()
    h[:, 0].mul_(2.0)                           # in-place on a view
    h.add_(1.0)
    logits = (h @ w).reshape(2, 5).repeat(2, 1)
    loss = F.cross_entropy(logits, target) + F.softmax(logits, -1).pow(2).sum()
    loss.backward()
    params = [emb.weight, conv.weight, conv.bias, lin.weight, ln.weight, w]
    return loss.item(), [p.grad.cpu() for p in params], [str(p.grad.device) for p in params]

l_cpu, g_cpu, _ = grads("cpu")
l_dev, g_dev, devs = grads("tpu")
result["loss"] = [l_cpu, l_dev]
result["max_grad_diff"] = max((a - b).abs().max().item() for a, b in zip(g_cpu, g_dev))
result["grad_devices"] = sorted(set(devs))
"""


def test_autograd_common_ops_match_cpu() -> None:
    r = run_snippet(AUTOGRAD_CODE)
    assert r["loss"][0] == r["loss"][1]
    assert r["max_grad_diff"] == 0.0
    assert r["grad_devices"] == ["tpu:0"]


def test_optimizers_match_cpu_including_foreach() -> None:
    r = run_snippet(
        """
        from torch.optim.optimizer import _default_to_fused_or_foreach
        def train(device, opt_cls, foreach):
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
            opt = opt_cls(model.parameters(), lr=0.01, foreach=foreach)
            x, y = torch.randn(16, 4).to(device), torch.randn(16, 1).to(device)
            for _ in range(3):
                opt.zero_grad()
                F.mse_loss(model(x), y).backward()
                opt.step()
            return [p.detach().cpu() for p in model.parameters()]
        diffs = {}
        for opt_cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
            for foreach in (None, True, False):
                ref = train("cpu", opt_cls, foreach)
                got = train("tpu", opt_cls, foreach)
                key = f"{opt_cls.__name__}-{foreach}"
                diffs[key] = max((a - b).abs().max().item() for a, b in zip(ref, got))
        result["diffs"] = diffs
        params = list(nn.Linear(2, 2).to("tpu").parameters())
        result["default_foreach"] = _default_to_fused_or_foreach(params, False, False)[1]
        """
    )
    assert r["default_foreach"] is True  # like a real device tensor
    assert all(d <= 1e-6 for d in r["diffs"].values()), r["diffs"]


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


def test_counters_syncs_transfers_float64() -> None:
    r = run_snippet(
        """
        x = torch.ones(4, 4).to("tpu")          # h2d 64 bytes
        emu.reset()
        y = x * 2
        y.sum().item()                           # sync: item
        y.cpu()                                  # sync + d2h 64 bytes
        y.tolist()                               # sync + d2h 64 bytes
        bool(y[0, 0] > 0)                        # sync: item
        print(y[0])                              # sync: print (once)
        y.double().sum()                         # float64 ops
        result["c"] = emu.counters()
        """
    )
    c = r["c"]
    assert c["host_syncs"] == 5
    assert c["host_syncs_by_kind"] == {"item": 2, "to_cpu": 1, "tolist": 1, "print": 1}
    lines = sorted(int(site.rsplit(":", 1)[1]) for site in c["host_sync_sites"])
    assert len(lines) == 5 and all(site.startswith("<string>:") for site in c["host_sync_sites"])
    assert c["d2h_count"] == 2 and c["d2h_bytes"] == 128
    assert c["h2d_count"] == 0
    assert c["float64_ops"] >= 2 and "sum" in c["float64_ops_by_name"]
    assert c["ops"] >= 8 and c["ops_by_name"]["mul"] == 1


def test_torch_tpu_legacy_api_raises_unless_allowed() -> None:
    code = """
    try:
        torch.tpu.synchronize()
        result["sync"] = "ok"
    except RuntimeError as e:
        result["sync"] = str(e)
    result["acc_count"] = torch.accelerator.device_count()
    torch.manual_seed(3)  # torch calls torch.tpu.manual_seed_all internally
    """
    banned = run_snippet(code)
    assert "internal to TorchTPU" in banned["sync"]
    assert "torch.accelerator.synchronize" in banned["sync"]
    assert banned["acc_count"] == 2
    allowed = run_snippet(code, env={"TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS": "1"})
    assert allowed["sync"] == "ok"


def test_compile_with_device_backend_runs_eagerly() -> None:
    r = run_snippet(
        """
        model = torch.compile(nn.Linear(3, 1).to("tpu"), backend="tpu")
        result["out"] = str(model(torch.ones(2, 3, device="tpu")).device)
        """
    )
    assert r["out"] == "tpu:0"


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


def test_autocast_bfloat16_on_device() -> None:
    for name in ("tpu", "neuron"):
        r = run_snippet(
            f"""
            dev = {name!r}
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 3)).to(dev)
            conv = nn.Conv2d(2, 2, 3).to(dev)
            x = torch.randn(2, 4, device=dev)
            with torch.autocast(dev, dtype=torch.bfloat16):
                result["enabled"] = torch.is_autocast_enabled(dev)
                y = m(x)
                result["inside"] = {{
                    "linear": str(y.dtype),
                    "matmul": str((x @ x.T).dtype),
                    "conv": str(conv(torch.randn(1, 2, 5, 5, device=dev)).dtype),
                    "softmax": str(torch.softmax(y, -1).dtype),
                    "sum": str(y.sum().dtype),
                    "add": str((y + y).dtype),
                }}
                loss = y.float().pow(2).mean()
            loss.backward()
            result["grad"] = str(m[0].weight.grad.dtype)
            result["outside"] = str(m(x).dtype)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                ref = m.cpu()(x.cpu())
            result["close"] = (y.cpu().float() - ref.float()).abs().max().item() < 1e-2
            """,
            name=name,
        )
        assert r["enabled"] is True
        inside = r["inside"]
        assert inside["linear"] == inside["matmul"] == inside["conv"] == "torch.bfloat16"
        assert inside["softmax"] == inside["sum"] == "torch.float32"
        assert inside["add"] == "torch.bfloat16"
        assert r["grad"] == "torch.float32" and r["outside"] == "torch.float32"
        assert r["close"] is True


def test_save_load_map_location() -> None:
    r = run_snippet(
        """
        import io
        x = torch.randn(2, 3, device="tpu:1")
        m = nn.Linear(3, 2).to("tpu")
        out = {}
        for loc in ("tpu", "tpu:1", "cpu", None):
            buf = io.BytesIO()
            torch.save({"x": x, "sd": m.state_dict(), "p": m.weight}, buf)
            buf.seek(0)
            z = torch.load(buf, map_location=loc)
            out[str(loc)] = {
                "x": str(z["x"].device),
                "sd": str(z["sd"]["weight"].device),
                "equal": z["x"].cpu().equal(x.cpu())
                and z["sd"]["weight"].cpu().equal(m.weight.detach().cpu()),
                "param": isinstance(z["p"], nn.Parameter) and z["p"].requires_grad,
            }
        result["out"] = out
        m2 = nn.Linear(3, 2).to("tpu")
        buf = io.BytesIO()
        torch.save(m.state_dict(), buf)
        buf.seek(0)
        m2.load_state_dict(torch.load(buf, map_location="tpu"))
        result["loaded"] = m2.weight.detach().cpu().equal(m.weight.detach().cpu())
        """
    )
    out = r["out"]
    assert out["tpu"]["x"] == "tpu:0" and out["tpu"]["sd"] == "tpu:0"
    assert out["tpu:1"]["x"] == "tpu:1"
    assert out["cpu"]["x"] == "cpu" and out["cpu"]["sd"] == "cpu"
    assert out["None"]["x"] == "tpu:1" and out["None"]["sd"] == "tpu:0"
    assert all(v["equal"] and v["param"] for v in out.values())
    assert r["loaded"] is True


DDP_SCRIPT = """
import json, os, sys
import torch, torch.nn as nn, torch.distributed as dist
import torchport.sandbox.emulator as emu
name = sys.argv[1]
emu.activate(name, devices=2)
dist.init_process_group(backend=name)
rank = dist.get_rank()
t = torch.full((3,), float(rank + 1), device=name)
dist.all_reduce(t)
torch.manual_seed(0)
m = nn.Linear(4, 2).to(name)
ref = nn.Linear(4, 2)
ref.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
ddp = nn.parallel.DistributedDataParallel(m)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
torch.manual_seed(123)
data = [torch.randn(2, 8, 4) for _ in range(3)]
for batch in data:
    loss = ddp(batch[rank].to(name)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    # Reference: both ranks' batches on the CPU, gradients averaged.
    ref_opt.zero_grad()
    sum(ref(b).pow(2).mean() for b in batch).div(2).backward()
    ref_opt.step()
w = m.weight.detach().cpu()
gathered = [torch.zeros_like(w) for _ in range(2)]
dist.all_gather(gathered, w)
out = {
    "allreduce": t.cpu().tolist(),
    "device": str(t.device),
    "same": gathered[0].equal(gathered[1]),
    "match": (w - ref.weight.detach()).abs().max().item() < 1e-6,
}
dist.destroy_process_group()
with open(f"{sys.argv[2]}.{rank}", "w") as f:
    json.dump(out, f)
"""


def test_distributed_backend_ddp_two_ranks(tmp_path: Any) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    for name in ("tpu", "neuron"):
        proc = subprocess.run(
            [
                *(sys.executable, "-m", "torch.distributed.run"),
                *("--nproc_per_node", "2", "--standalone"),
                *(str(script), name, str(tmp_path / name)),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        results = [json.loads((tmp_path / f"{name}.{rank}").read_text()) for rank in (0, 1)]
        for r in results:
            assert r["allreduce"] == [3.0, 3.0, 3.0] and r["device"] == f"{name}:0"
            assert r["same"] is True and r["match"] is True


def test_pin_memory_is_noop_and_generator_unsupported() -> None:
    r = run_snippet(
        """
        from torch.utils.data import DataLoader, TensorDataset
        data = TensorDataset(torch.arange(8.0).reshape(4, 2))
        loader = DataLoader(data, batch_size=2, pin_memory=True)
        batches = [b[0].to("tpu") for b in loader]
        result["batches"] = [b.cpu().tolist() for b in batches]
        result["devices"] = [str(b.device) for b in batches]
        try:
            torch.Generator(device="tpu")
            result["generator"] = "ok"
        except NotImplementedError as e:
            result["generator"] = str(e)
        """
    )
    assert r["batches"] == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]
    assert r["devices"] == ["tpu:0", "tpu:0"]
    # Needs the C++ PrivateUse1HooksInterface::getNewGenerator (see the report).
    assert "getNewGenerator" in r["generator"]


def test_counters_ops_per_optimizer_step() -> None:
    r = run_snippet(
        """
        m = nn.Linear(4, 2).to("tpu")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        x = torch.randn(8, 4, device="tpu")
        emu.reset()
        for _ in range(3):
            opt.zero_grad()
            m(x).sum().backward()
            opt.step()
        c = emu.counters()
        result["steps"] = c["optimizer_steps"]
        result["per_step"] = c["ops_per_step"]
        result["ops"] = c["ops"]
        emu.reset()
        result["after_reset"] = [emu.counters()["optimizer_steps"], emu.counters()["ops_per_step"]]
        """
    )
    assert r["steps"] == 3 and len(r["per_step"]) == 3
    assert r["per_step"][0] > 0 and len(set(r["per_step"])) == 1
    assert sum(r["per_step"]) == r["ops"]
    assert r["after_reset"] == [0, []]
