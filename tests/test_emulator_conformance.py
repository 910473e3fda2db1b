"""Conformance of the CPU-emulated ``tpu`` / ``neuron`` device, item by item.

The sections follow the emulator issue's list:

1. devices, factories, ``torch.accelerator``, ``torch.tpu`` / ``torch.neuron``;
2. autograd, optimizers, in-place ops and views, save/load, autocast, DataLoader,
   ``torch.Generator``, ``torch.compile``, ``torch.distributed``;
3. accelerator semantics: device mismatches, ``.numpy()``, CUDA use;
4. counters.

Only one PrivateUse1 backend can be activated per process, so each run is a
subprocess (``run_snippet`` from test_emulator.py) that executes many checks, each
in a ``section`` whose result (or traceback) comes back as JSON; the tests below
assert on those results. Numbers are always compared with the same code on the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import test_emulator
import torch
from test_emulator import backend_env, run_snippet
from torchport.sandbox import launch_step, torchtpu_facts, tpu_launch

backend = test_emulator.backend  # the fixture: every test below runs on both emulators
# each module fixture is a sandboxed run of the whole list, once per emulator backend
pytestmark = pytest.mark.slow

HELPERS = """
import io, inspect, traceback, warnings
from torch.utils.data import DataLoader, TensorDataset

def here():
    return sys._getframe(1).f_lineno

def section(fn):
    torch.accelerator.set_device_index(0) if emu.active_device() else None
    try:
        result[fn.__name__] = fn()
    except BaseException:
        result[fn.__name__] = {"__error__": traceback.format_exc()}
    return fn

def autocast_checks(dev):
    torch.manual_seed(0)
    x, y = torch.randn(4, 8), torch.randn(8, 3)
    m = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3))
    md = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).to(dev)
    md.load_state_dict(m.state_dict())
    xd, yd = x.to(dev), y.to(dev)
    conv = nn.Conv2d(2, 2, 3).to(dev)
    r = {}
    with torch.autocast(dev):  # no dtype: the runtimes' default, bfloat16
        r["default_dtype"] = str((xd @ xd.T).dtype)
    with torch.autocast(dev, dtype=torch.bfloat16):
        r["enabled"] = [torch.is_autocast_enabled(dev), str(torch.get_autocast_dtype(dev))]
        mm = xd @ yd
        out = md(xd)
        r["dtypes"] = {
            "matmul": str(mm.dtype), "linear": str(out.dtype),
            "conv": str(conv(torch.randn(1, 2, 5, 5, device=dev)).dtype),
            "softmax": str(torch.softmax(out, -1).dtype), "sum": str(out.sum().dtype),
            "add": str((out + out).dtype),
        }
        with torch.autocast(dev, enabled=False):
            r["disabled_inside"] = str((xd @ yd).dtype)
        loss = out.float().pow(2).mean()
    loss.backward()
    r["grad_dtype"] = str(md[0].weight.grad.dtype)
    r["outside"] = [str((xd @ yd).dtype), str(md(xd).dtype), torch.is_autocast_enabled(dev)]
    r["matmul_equals_cpu_bf16"] = mm.cpu().equal(x.bfloat16() @ y.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = m(x)
    r["model_equals_cpu_autocast"] = out.cpu().equal(ref)
    with torch.amp.autocast(dev, dtype=torch.bfloat16):
        r["amp_autocast"] = str((xd @ yd).dtype)
    return r

def outcome(fn):
    try:
        value = fn()
    except BaseException as e:
        return [type(e).__name__, str(e)]
    if isinstance(value, torch.Tensor):
        value = str(value.device)
    return ["ok", value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)]
"""


def part(run: dict[str, Any], name: str) -> Any:
    """One section's result; fail with the subprocess traceback if it raised."""
    assert name in run, f"section {name} did not run"
    value = run[name]
    if isinstance(value, dict) and "__error__" in value:
        pytest.fail(f"section {name} raised in the subprocess:\n{value['__error__']}")
    return value


# ---------------------------------------------------------------------------------------------
# Devices: these sections run in both processes, a tpu process (one device, tpu:0, on a host of
# three: TorchTPU's) and a neuron process that sees the host's three devices. D is the device's
# name, I and J two of the process's ordinals (1 and 2 where it has three, else 0), BAD the
# first ordinal out of its range (PLACES below).

DEVICE_CODE = """
def on(obj, *index):  # x.tpu(i) / x.neuron(i)
    return getattr(obj, D)(*index)

@section
def item1_devices():
    r = {}
    x = torch.arange(6.0).reshape(2, 3)
    a, b, c = x.to(D), on(x), x.to(f"{D}:{J}")
    r["devices"] = [str(t.device) for t in
                    (a, b, c, on(x, I), x.to(torch.device(D, I)), x.to(device=f"{D}:{J}"))]
    r["flags"] = [getattr(a, "is_" + D), getattr(x, "is_" + D), a.is_cpu, a.cpu().is_cpu,
                  a.device.type, a.device.index]
    r["roundtrip"] = [a.cpu().equal(x), c.to("cpu").equal(x), a.to(f"{D}:{I}").cpu().equal(x)]
    r["same_device_is_self"] = [a.to(f"{D}:0") is a, a.to(D) is a, on(a) is a]
    r["to_dtype"] = [str(a.to(torch.float16).dtype), str(a.to(f"{D}:{I}", torch.int32).device),
                     str(a.to(f"{D}:{I}", torch.int32).dtype)]
    r["item"] = a.sum().item()
    r["repr"] = repr(torch.ones(2, device=f"{D}:{I}"))
    r["torch_device_any_index"] = str(torch.device(f"{D}:7"))  # as torch.device("cuda:7")
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    m.load_state_dict(ref.state_dict())
    r["module_to_returns_self"] = m.to(f"{D}:{I}") is m
    r["module_devices"] = sorted({str(t.device) for t in [*m.parameters(), *m.buffers()]})
    r["param"] = [isinstance(m[0].weight, nn.Parameter), m[0].weight.requires_grad]
    r["module_forward_equal"] = m(x.to(f"{D}:{I}")).cpu().equal(ref(x))
    r["module_on"] = [str(on(nn.Linear(3, 2)).weight.device),
                      str(on(nn.Linear(3, 2), J).weight.device),
                      str(nn.Linear(3, 2).to(torch.device(f"{D}:{I}")).weight.device)]
    r["out_of_range"] = {
        "factory": outcome(lambda: torch.zeros(1, device=f"{D}:{BAD}")),
        "to": outcome(lambda: x.to(f"{D}:{BAD}")),
        "method": outcome(lambda: on(x, BAD)),
        "device_to_device": outcome(lambda: a.to(f"{D}:{BAD + 1}")),
        "module_to": outcome(lambda: nn.Linear(1, 1).to(f"{D}:{BAD + 2}")),
        "set_device_index": outcome(lambda: torch.accelerator.set_device_index(BAD)),
        "negative": outcome(lambda: torch.accelerator.set_device_index(-1)),
        "generator": outcome(lambda: torch.Generator(device=f"{D}:{BAD}")),
        "synchronize": outcome(lambda: torch.accelerator.synchronize(BAD)),
    }
    return r

FACTORIES = {
    "zeros": lambda d: torch.zeros(2, 3, device=d),
    "ones": lambda d: torch.ones(2, device=d, dtype=torch.int32),
    "empty": lambda d: torch.empty(4, 2, device=d),
    "empty_strided": lambda d: torch.empty_strided((2, 3), (1, 2), device=d),
    "full": lambda d: torch.full((2, 2), 7.5, device=d),
    "randn": lambda d: torch.randn(3, 2, device=d),
    "rand": lambda d: torch.rand(5, device=d, dtype=torch.float64),
    "randint": lambda d: torch.randint(0, 9, (6,), device=d),
    "randint_low": lambda d: torch.randint(3, 9, (2, 3), device=d),
    "randperm": lambda d: torch.randperm(7, device=d),
    "normal": lambda d: torch.normal(0.0, 2.0, (4,), device=d),
    "arange": lambda d: torch.arange(1, 7, 2, device=d),
    "arange_end": lambda d: torch.arange(5, device=d),
    "arange_float": lambda d: torch.arange(0, 1, 0.25, device=d),
    "linspace": lambda d: torch.linspace(0, 1, 5, device=d),
    "logspace": lambda d: torch.logspace(0, 2, 3, device=d),
    "eye": lambda d: torch.eye(3, device=d),
    "eye_nm": lambda d: torch.eye(2, 3, device=d),
    "scalar_tensor": lambda d: torch.scalar_tensor(2.5, device=d),
    "tensor": lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
    "tensor_0d": lambda d: torch.tensor(3.5, device=d),
    "tensor_bool": lambda d: torch.tensor([True, False], device=d),
    "as_tensor_list": lambda d: torch.as_tensor([1.0, 2.0], device=d),
    "as_tensor_tensor": lambda d: torch.as_tensor(torch.arange(3), device=d),
    "zeros_like": lambda d: torch.zeros_like(torch.ones(2, 2, device=d)),
    "ones_like": lambda d: torch.ones_like(torch.ones(2, device=d), dtype=torch.int64),
    "full_like": lambda d: torch.full_like(torch.ones(3, device=d), 4),
    "empty_like": lambda d: torch.empty_like(torch.ones(2, 3, device=d)),
    "rand_like": lambda d: torch.rand_like(torch.ones(3, device=d)),
    "randn_like": lambda d: torch.randn_like(torch.ones(3, device=d)),
    "randint_like": lambda d: torch.randint_like(torch.ones(4, device=d), 10),
    "like_from_cpu_with_device": lambda d: torch.ones_like(torch.zeros(2), device=d),
}

@section
def item1_factories():
    out = {}
    for name, make in FACTORIES.items():
        torch.manual_seed(0)
        cpu = make("cpu")
        torch.manual_seed(0)
        dev = make(D)
        meta = lambda t: [list(t.shape), str(t.dtype), list(t.stride()), t.requires_grad]
        out[name] = {
            "device": str(dev.device),
            "meta_equal": meta(cpu) == meta(dev.cpu()),
            "values_equal": name.startswith("empty") or cpu.equal(dev.cpu()),
        }
    torch.accelerator.set_device_index(I)
    out["current_device"] = [str(t.device) for t in (
        torch.zeros(1, device=D), torch.tensor([1], device=D),
        torch.as_tensor([1], device=D), torch.ones(1).to(D),
        torch.ones(1).to(torch.device(D)), torch.ones(1, device=f"{D}:{J}").to(D),
        on(torch.ones(1)), nn.Linear(1, 1).to(D).weight, torch.empty_like(
            torch.ones(1), device=D), torch.ones(1).new_tensor([1], device=D))]
    out["requires_grad"] = torch.zeros(2, device=D, requires_grad=True).requires_grad
    src = torch.ones(2, device=f"{D}:{J}")
    out["like_keeps_device"] = [str(f(src).device) for f in (
        torch.zeros_like, torch.ones_like, torch.empty_like, torch.rand_like, torch.randn_like)]
    return out

@section
def item1_accelerator():
    acc = torch.accelerator
    r = {
        "is_available": acc.is_available(),
        "device_count": acc.device_count(),
        "current_accelerator": str(acc.current_accelerator()),
        "index0": acc.current_device_index(),
    }
    acc.set_device_index(J)
    r["index_after_set"] = acc.current_device_index()
    r["factory_on_current"] = str(torch.zeros(1, device=D).device)
    with acc.device_index(I):
        r["inside_device_index"] = acc.current_device_index()
    r["after_device_index"] = acc.current_device_index()
    acc.set_device_index(f"{D}:0")
    r["set_by_string"] = acc.current_device_index()
    r["synchronize"] = [acc.synchronize(), acc.synchronize(I), acc.synchronize(f"{D}:{J}"),
                        acc.synchronize(torch.device(D, 0))]
    r["device_module"] = torch.get_device_module(D).__name__
    r["current_stream"] = str(acc.current_stream().device)
    # Memory statistics (torch.accelerator.memory_*: all present in torch 2.13).
    mem = {}
    import gc
    gc.collect()
    acc.empty_cache()
    base = acc.memory_allocated()
    keep = torch.empty(1024, device=D)  # 4096 bytes
    mem["after_alloc"] = acc.memory_allocated() - base
    view = keep[:10].view(2, 5)
    mem["after_view"] = acc.memory_allocated() - base
    acc.reset_peak_memory_stats()
    mem["peak_after_reset"] = acc.max_memory_allocated() - base
    big = torch.empty(4096, device=D) * 2  # 16384 bytes (+ the empty, freed)
    mem["peak_with_big"] = acc.max_memory_allocated() - base
    del big
    mem["after_del"] = acc.memory_allocated() - base
    mem["peak_after_del"] = acc.max_memory_allocated() - base
    base1 = acc.memory_allocated(I)
    other = torch.empty(256, device=f"{D}:{I}")
    mem["device1"] = acc.memory_allocated(I) - base1
    mem["device1_by_device"] = acc.memory_allocated(torch.device(f"{D}:{I}")) - base1
    mem["reserved_ge_allocated"] = acc.memory_reserved() >= acc.memory_allocated()
    mem["max_reserved_ge_reserved"] = acc.max_memory_reserved() >= acc.memory_reserved()
    stats = acc.memory_stats()
    mem["stats_current"] = stats["allocated_bytes.all.current"] == acc.memory_allocated()
    acc.reset_accumulated_memory_stats()
    mem["stats_after_accumulated_reset"] = acc.memory_stats()["allocated_bytes.all.allocated"]
    free, total = acc.get_memory_info()
    mem["memory_info"] = [isinstance(free, int), 0 < free <= total]
    mem["empty_cache"] = acc.empty_cache()
    mem["out_of_range"] = outcome(lambda: acc.memory_allocated(BAD))
    del keep, view, other
    r["memory"] = mem
    return r

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
    h = F.relu(conv(img)).flatten(1)
    h = lin(h).view(2, 8) + emb(ids).mean(0)
    h = ln(h)
    h = h.clone()
    h[:, 0].mul_(2.0)
    h.add_(1.0)
    h.retain_grad()
    logits = (h @ w).reshape(2, 5).repeat(2, 1)
    loss = F.cross_entropy(logits, target) + F.softmax(logits, -1).pow(2).sum()
    loss.backward(retain_graph=True)
    loss.backward()  # gradients accumulate
    params = [emb.weight, conv.weight, conv.bias, lin.weight, ln.weight, w]
    x = torch.linspace(-1, 1, 5, device=device, requires_grad=True)
    y = (x.sin() * x).sum()
    (gx,) = torch.autograd.grad(y, x, create_graph=True)
    (ggx,) = torch.autograd.grad(gx.sum(), x)  # second order
    hooked = []
    z = torch.ones(3, device=device, requires_grad=True)
    z.register_hook(lambda g: hooked.append(g.cpu().tolist()))
    (z * 3).sum().backward()
    with torch.no_grad():
        nog = (w * 2).requires_grad
    tensors = [*(p.grad for p in params), h.grad, gx, ggx]
    return {
        "loss": loss.item(),
        "grads": [t.detach().cpu() for t in tensors],
        "devices": sorted({str(t.device) for t in tensors}),
        "hooked": hooked,
        "no_grad": nog,
        "grad_fn": type(loss.grad_fn).__name__,
    }

def pipeline(first, second):
    torch.manual_seed(0)
    a, b = nn.Linear(3, 4).to(first), nn.Linear(4, 1).to(second)
    out = b(a(torch.randn(5, 3).to(first)).relu().to(second)).sum()
    out.backward()
    return [a.weight.grad.cpu(), b.weight.grad.cpu(), str(a.weight.grad.device),
            str(b.weight.grad.device)]

@section
def item2_autograd():
    cpu, dev, dev2 = grads("cpu"), grads(D), grads(f"{D}:{J}")
    diff = lambda x, y: max((a - b).abs().max().item() for a, b in zip(x, y, strict=True))
    ref, split = pipeline("cpu", "cpu"), pipeline(f"{D}:{I}", f"{D}:{J}")  # model parallel
    return {
        "loss": [cpu["loss"], dev["loss"], dev2["loss"]],
        "max_grad_diff": [diff(cpu["grads"], dev["grads"]), diff(cpu["grads"], dev2["grads"])],
        "devices": [dev["devices"], dev2["devices"]],
        "same": [cpu[k] == dev[k] == dev2[k] for k in ("hooked", "no_grad", "grad_fn")],
        "pipeline": [diff(ref[:2], split[:2]), split[2:]],
    }

@section
def item2_save_load():
    x = torch.randn(2, 3, device=f"{D}:{I}")
    m = nn.Linear(3, 2).to(D)
    c = torch.arange(4.0)
    buf = io.BytesIO()
    torch.save({"x": x, "w": m.weight, "sd": m.state_dict(), "c": c, "v": c[1:3]}, buf)
    locations = {
        "cpu": "cpu", "dev": D, "dev:I": f"{D}:{I}", "device(dev:I)": torch.device(f"{D}:{I}"),
        "dict_I_to_0": {f"{D}:{I}": f"{D}:0"},
        "dict_all_to_cpu": {f"{D}:{I}": "cpu", f"{D}:0": "cpu"},
        "dict_cpu_to_J": {"cpu": f"{D}:{J}"},
        "callable_identity": lambda storage, loc: storage,
        "None": None,
    }
    out = {}
    for key, loc in locations.items():
        for weights_only in (True, False):
            buf.seek(0)
            z = torch.load(buf, map_location=loc, weights_only=weights_only)
            z["v"].add_(10)  # still a view of "c" after loading, as torch keeps sharing
            out[f"{key}-{weights_only}"] = {
                "devices": [str(z[k].device) for k in ("x", "w", "c")] + [
                    str(z["sd"]["weight"].device)],
                "equal": z["x"].cpu().equal(x.cpu())
                and z["sd"]["weight"].cpu().equal(m.weight.detach().cpu()),
                "param": isinstance(z["w"], nn.Parameter) and z["w"].requires_grad,
                "shared": z["c"].cpu().tolist(),
            }
    buf.seek(0)
    errors = {"bad_ordinal": outcome(lambda: torch.load(buf, map_location=f"{D}:{BAD}"))}
    model_buf = io.BytesIO()
    torch.save(m, model_buf)
    model_buf.seek(0)
    whole = torch.load(model_buf, map_location=f"{D}:{J}", weights_only=False)
    m2 = nn.Linear(3, 2).to(f"{D}:{I}")
    sd_buf = io.BytesIO()
    torch.save(m.state_dict(), sd_buf)
    sd_buf.seek(0)
    m2.load_state_dict(torch.load(sd_buf, map_location=f"{D}:{I}"))
    return {"out": out, "errors": errors,
            "whole_module": [str(whole.weight.device), whole.weight.cpu().equal(m.weight.cpu())],
            "load_state_dict": [str(m2.weight.device), m2.weight.cpu().equal(m.weight.cpu())]}
"""

# ---------------------------------------------------------------------------------------------
# The main tpu run (one device per process, on a host of 3): items 1-4 except what needs another
# process or several devices.

TPU_CODE = """
TORCH_TPU_PUBLIC = [
    "EagerMode", "Event", "Precision", "Stream", "allow_excess_precision", "current_device",
    "current_stream", "default_generators", "default_stream", "device", "device_count",
    "device_of", "eager_mode", "get_amp_supported_dtype", "get_device_name",
    "get_device_properties", "get_rng_state", "initial_seed", "is_available",
    "is_initialized", "manual_seed", "manual_seed_all", "precision", "set_device",
    "set_eager_mode", "set_rng_state", "set_stream", "stream", "synchronize",
    "topology_aware_mesh", "compiler", "distributed", "optimizers", "pallas", "profiler", "ops",
]

@section
def item1_torch_tpu_module():
    t = torch.tpu
    r = {"missing": [n for n in TORCH_TPU_PUBLIC if not hasattr(t, n)]}
    # TorchTPU's internal APIs (the wheel's facts, for this torch) refuse user code
    from torchport.sandbox import launch_step, torchtpu_facts, tpu_launch
    args = {"device": (0,), "set_device": (0,), "set_stream": (None,)}
    r["internal"] = {n: outcome(lambda n=n: getattr(t, n)(*args.get(n, ())))
                     for n in torchtpu_facts.internal_for(torch.__version__)}
    r["torch_internal_calls_still_work"] = [torch.accelerator.device_count(),
                                            outcome(lambda: torch.manual_seed(3))[0]]
    t.manual_seed(5)
    a = torch.randn(3, device="tpu")
    torch.manual_seed(5)
    r["manual_seed_matches_cpu"] = a.cpu().equal(torch.randn(3))
    t.manual_seed_all(6)
    gen = t.default_generators[0]  # initial_seed and get_rng_state are internal
    r["initial_seed"] = gen.initial_seed()
    state = gen.get_state()
    first = torch.rand(2, device="tpu").cpu()
    t.set_rng_state(state)
    r["rng_state_roundtrip"] = torch.rand(2, device="tpu").cpu().equal(first)
    r["info"] = [t.is_initialized(), t.get_device_name(), [str(d) for d in
                 t.get_amp_supported_dtype()], t.get_device_properties(0).index]
    with t.device_of(torch.ones(1, device="tpu")):
        r["device_of"] = torch.accelerator.current_device_index()
    r["stream_devices"] = [str(t.Stream(device="tpu:0").device),
                           str(torch.accelerator.current_stream(0).device)]
    s = t.Stream()
    with t.stream(s):
        pass
    torch.accelerator.set_stream(s)
    e1, e2 = t.Event(enable_timing=True), t.Event(enable_timing=True)
    e1.record()
    e2.record()
    r["streams"] = [type(s).__name__, isinstance(s, torch.Stream), str(s.device),
                    str(torch.accelerator.current_stream().device),
                    str(t.default_stream().device), e1.elapsed_time(e2) >= 0.0, s.query(),
                    s.synchronize()]
    r["excess_precision"] = [t.allow_excess_precision]
    t.allow_excess_precision = False  # a module property, as on TorchTPU
    r["excess_precision"].append(t.allow_excess_precision)
    with t.precision(t.Precision.HIGHEST):
        r["precision_ctx"] = (torch.ones(2, 2, device="tpu") @ torch.ones(2, 2, device="tpu")
                              ).cpu().tolist()
    with t.set_eager_mode(t.EagerMode.DEFER_AND_FUSE):  # a context manager
        inside = t.eager_mode.name
    r["eager_mode"] = [inside, t.eager_mode.name]
    r["default_generators"] = [str(g.device) for g in t.default_generators]
    r["not_emulated"] = [outcome(lambda: t.optimizers.AdamW)[0],
                         "not emulated" in outcome(lambda: t.optimizers.AdamW)[1],
                         outcome(t.topology_aware_mesh)[0], hasattr(t.pallas, "kernel")]
    return r

@section
def item1_one_device():
    # A TorchTPU process sees one device on a host of three: what a multi-device program
    # does with the others is refused (the ordinal), and so is switching (TorchTPU's
    # set_device ValueError).
    def in_block(index):
        with torch.accelerator.device_index(index):
            pass
    buf = io.BytesIO()
    torch.save(torch.ones(2, device="tpu"), buf)
    def load(where):
        buf.seek(0)
        return torch.load(buf, map_location=where)
    x = torch.ones(2)
    return {
        "count": [torch.accelerator.device_count(), len(torch.tpu.default_generators)],
        "ordinal": {
            "factory": outcome(lambda: torch.zeros(1, device="tpu:1")),
            "to": outcome(lambda: x.to("tpu:2")),
            "tpu()": outcome(lambda: x.tpu(1)),
            "module_tpu": outcome(lambda: nn.Linear(1, 1).tpu(2)),
            "module_to": outcome(lambda: nn.Linear(1, 1).to(torch.device("tpu", 1))),
            "generator": outcome(lambda: torch.Generator(device="tpu:2")),
            "synchronize": outcome(lambda: torch.accelerator.synchronize(1)),
            "memory": outcome(lambda: torch.accelerator.memory_allocated(1)),
            "load": outcome(lambda: load("tpu:1")),
            "load_dict": outcome(lambda: load({"tpu:0": "tpu:1"})),
            "stream": outcome(lambda: torch.tpu.Stream(device="tpu:1")),
            "current_stream": outcome(lambda: torch.accelerator.current_stream(2)),
            "properties": outcome(lambda: torch.tpu.get_device_properties(1)),
        },
        "switch": {
            "set_device_index": outcome(lambda: torch.accelerator.set_device_index(2)),
            "by_string": outcome(lambda: torch.accelerator.set_device_index("tpu:1")),
            "device_index": outcome(lambda: in_block(1)),
        },
        "stay": [outcome(lambda: torch.accelerator.set_device_index(0)),
                 outcome(lambda: torch.accelerator.set_device_index("tpu")),
                 outcome(lambda: in_block(0)), torch.accelerator.current_device_index()],
    }

def recurrent(device):
    out = []
    for kind in ("GRUCell", "LSTMCell", "GRU", "LSTM", "GRUbi"):
        torch.manual_seed(0)
        mod, x = {
            "GRUCell": lambda: (nn.GRUCell(4, 5), torch.randn(3, 4)),
            "LSTMCell": lambda: (nn.LSTMCell(4, 5), torch.randn(3, 4)),
            "GRU": lambda: (nn.GRU(4, 5, batch_first=True), torch.randn(2, 3, 4)),
            "LSTM": lambda: (nn.LSTM(4, 5, num_layers=2), torch.randn(3, 2, 4)),
            "GRUbi": lambda: (nn.GRU(4, 5, num_layers=2, bidirectional=True), torch.randn(3, 2, 4)),
        }[kind]()
        mod = mod.to(device)
        y = mod(x.to(device))
        loss = (y[0] if isinstance(y, tuple) else y).pow(2).sum()
        loss.backward()
        out.append([loss.item(), sum(p.grad.abs().sum().item() for p in mod.parameters())])
    return out

@section
def item2_recurrent_layers():
    return {"cpu": recurrent("cpu"), "tpu": recurrent("tpu")}

def train(device, cls, foreach):
    torch.manual_seed(0)
    if cls.__name__ == "SparseAdam":  # needs sparse gradients
        model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 1)).to(device)
        x = torch.randint(0, 10, (16,)).to(device)
        params = list(model[0].parameters())
    else:
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
        x = torch.randn(16, 4).to(device)
        params = list(model.parameters())
    if cls.__name__ == "Muon":  # 2-D parameters only
        params = [p for p in params if p.dim() == 2]
    y = torch.randn(16, 1).to(device)
    opt = cls(params, lr=0.01, **({} if foreach is None else {"foreach": foreach}))

    def closure():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)  # LBFGS needs the closure; the others accept it
    state_devices = {str(v.device) for s in opt.state.values() for v in s.values()
                     if isinstance(v, torch.Tensor) and v.dim() > 0}
    return [p.detach().cpu() for p in model.parameters()], sorted(state_devices)

@section
def item2_optimizers():
    from torch.optim.optimizer import Optimizer, _default_to_fused_or_foreach
    classes = sorted({c for c in vars(torch.optim).values() if isinstance(c, type)
                      and issubclass(c, Optimizer) and c is not Optimizer},
                     key=lambda c: c.__name__)
    diffs, states = {}, {}
    for cls in classes:
        modes = [None]
        if "foreach" in inspect.signature(cls.__init__).parameters:
            modes = [None, True, False]
        for foreach in modes:
            key = f"{cls.__name__}-foreach={foreach}"
            ref, _ = train("cpu", cls, foreach)
            got, states[key] = train("tpu", cls, foreach)
            diffs[key] = max((a - b).abs().max().item() for a, b in zip(ref, got))
    params = list(nn.Linear(2, 2).to("tpu").parameters())
    return {"classes": [c.__name__ for c in classes], "diffs": diffs, "states": states,
            "default_foreach": _default_to_fused_or_foreach(params, False, False)[1]}

def views(device):
    out = {}
    a = torch.arange(12.0, device=device).reshape(3, 4).clone()  # a base, not a view
    s = a[1:3, ::2]
    s.add_(100)  # in-place on a slice changes the base
    out["slice"] = [a.cpu().tolist(), s._base is a, s.is_contiguous(), list(s.stride())]
    v = a.view(4, 3)
    v[0, 0] = -1.0
    out["view"] = [a[0, 0].item(), v._base is a, v.storage_offset()]
    t = a.t()
    t.mul_(2)
    out["transpose"] = [a.cpu().tolist(), t.is_contiguous(), list(t.stride()),
                        t.contiguous().is_contiguous()]
    n = a.narrow(1, 1, 2).unsqueeze(0).expand(2, 3, 2)
    out["expand"] = [list(n.shape), list(n.stride()), n.sum().item()]
    w = torch.ones(3, device=device, requires_grad=True)
    d = w.data
    d.fill_(5.0)  # .data: same storage, outside autograd
    out["data"] = [w.cpu().tolist(), d.requires_grad, d.device == w.device, w.requires_grad]
    det = w.detach()
    det[0] = 7.0  # detach shares storage
    out["detach"] = [w.cpu().tolist(), det.requires_grad]
    cl = w.clone()
    cl.data.zero_()  # clone does not
    out["clone"] = [w.cpu().tolist(), cl.requires_grad, cl.grad_fn is not None]
    u = torch.ones(2, device=device, requires_grad=True)
    y = u.exp()
    y.add_(1)  # modifies a tensor saved for backward
    try:
        y.sum().backward()
        out["version_check"] = "no error"
    except RuntimeError as e:
        out["version_check"] = str(e).split(":")[0]  # then the tensor type, device-specific
    x = torch.zeros(4, device=device)
    x[torch.tensor([0, 2])] = torch.tensor([1.0, 2.0], device=device)  # CPU index tensor
    x[1:2] += 3
    x.index_add_(0, torch.tensor([3], device=device), torch.tensor([9.0], device=device))
    out["indexing"] = x.cpu().tolist()
    meta = lambda t: [list(t.shape), list(t.stride()), t.storage_offset()]
    k = torch.arange(6.0, device=device)
    k.resize_(2, 2)
    out["resize_"] = [meta(k), k.cpu().tolist()]
    k = torch.arange(6.0, device=device).reshape(2, 3)
    k.t_()
    out["t_"] = [meta(k), k.cpu().tolist()]
    k = torch.arange(6.0, device=device)[1:]
    k.unsqueeze_(0)
    out["unsqueeze_"] = [meta(k), k.cpu().tolist()]
    o = torch.empty(0, device=device)
    torch.add(torch.ones(2, 2, device=device), 1, out=o)  # out= resizes its tensor
    out["out_resized"] = [meta(o), o.cpu().tolist()]
    return out

@section
def item2_inplace_and_views():
    return {"cpu": views("cpu"), "tpu": views("tpu")}

@section
def item2_autocast():
    return autocast_checks("tpu")

@section
def item2_dataloader_pin_memory():
    data = TensorDataset(torch.arange(16.0).reshape(8, 2), torch.arange(8))
    r = {}
    for workers in (0, 2):
        loader = DataLoader(data, batch_size=3, pin_memory=True, num_workers=workers)
        ref = DataLoader(data, batch_size=3)
        batches = list(loader)
        r[f"workers{workers}"] = {
            "equal": all(bx.equal(rx) and by.equal(ry) for (bx, by), (rx, ry)
                         in zip(batches, ref, strict=True)),
            "pinned": [bx.is_pinned() for bx, _ in batches],
            "moved": sorted({str(bx.to("tpu", non_blocking=True).device) for bx, _ in batches}),
        }
    x = torch.ones(3)
    p = x.pin_memory()
    r["pin_memory"] = [p is x, p.is_pinned(), x.is_pinned(), p.pin_memory() is p,
                       p.equal(x), p.to("tpu", non_blocking=True).cpu().equal(x)]
    r["pin_device_tensor"] = outcome(lambda: torch.ones(2, device="tpu").pin_memory())
    return r

@section
def item2_generator():
    r = {}
    g = torch.Generator(device="tpu")
    c = torch.Generator()
    r["kind"] = [str(g.device), isinstance(g, torch.Generator), isinstance(c, torch.Generator),
                 isinstance(torch.default_generator, torch.Generator),
                 type(c) is torch._C.Generator,
                 str(torch.Generator(device="tpu:0").device),
                 str(torch.Generator(torch.device("tpu")).device)]
    r["manual_seed_returns_self"] = g.manual_seed(5) is g
    c.manual_seed(5)
    r["initial_seed"] = [g.initial_seed(), c.initial_seed()]
    same = {}
    same["randn"] = torch.randn(4, generator=g, device="tpu").cpu().equal(
        torch.randn(4, generator=c))
    same["rand"] = torch.rand(2, 2, generator=g, device="tpu").cpu().equal(
        torch.rand(2, 2, generator=c))
    same["randint"] = torch.randint(3, 9, (5,), generator=g, device="tpu").cpu().equal(
        torch.randint(3, 9, (5,), generator=c))
    same["randperm_device"] = torch.randperm(6, generator=g, device="tpu").cpu().equal(
        torch.randperm(6, generator=c))
    same["randperm_cpu_op"] = torch.randperm(6, generator=g).equal(torch.randperm(6, generator=c))
    same["normal"] = torch.normal(0.0, 1.0, (3,), generator=g, device="tpu").cpu().equal(
        torch.normal(0.0, 1.0, (3,), generator=c))
    same["uniform_"] = torch.empty(3, device="tpu").uniform_(generator=g).cpu().equal(
        torch.empty(3).uniform_(generator=c))
    same["bernoulli"] = torch.bernoulli(torch.full((6,), 0.5, device="tpu"), generator=g
                                        ).cpu().equal(torch.bernoulli(torch.full((6,), 0.5),
                                                                      generator=c))
    same["multinomial"] = torch.multinomial(torch.ones(5, device="tpu"), 3, generator=g
                                            ).cpu().equal(torch.multinomial(torch.ones(5), 3,
                                                                            generator=c))
    state = g.get_state()
    same["state_matches_cpu"] = state.equal(c.get_state())
    first = torch.rand(3, generator=g, device="tpu").cpu()
    g.set_state(state)
    same["set_state"] = torch.rand(3, generator=g, device="tpu").cpu().equal(first)
    g.manual_seed(7)
    c.manual_seed(7)
    order = lambda gen: [b[0].tolist() for b in DataLoader(TensorDataset(torch.arange(10.0)),
                                                          batch_size=3, shuffle=True,
                                                          generator=gen)]
    same["dataloader_shuffle"] = order(g) == order(c)
    r["same_as_cpu"] = same
    import copy, pickle
    r["copies"] = [str(copy.deepcopy(g).device), str(pickle.loads(pickle.dumps(g)).device),
                   pickle.loads(pickle.dumps(g)).get_state().equal(g.get_state())]
    r["cpu_generator_on_device_op"] = outcome(
        lambda: torch.randn(2, device="tpu", generator=torch.Generator()))
    d0 = torch.tpu.default_generators[0]
    d0.manual_seed(11)
    a = torch.randn(3, device="tpu", generator=d0)
    torch.manual_seed(11)
    r["default_generator_is_cpu_default"] = [a.cpu().equal(torch.randn(3)), d0.initial_seed()]
    class MyGenerator(torch.Generator):
        pass
    r["subclass"] = [str(MyGenerator().device), str(MyGenerator(device="tpu").device)]
    return r

@section
def item2_compile():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2)).to("tpu")
    model.load_state_dict(ref.state_dict())
    x = torch.randn(5, 4)
    compiled = torch.compile(model, backend="tpu")
    fn = torch.compile(lambda a, b: (a @ b).relu().sum(0), backend="tpu", mode="reduce-overhead")

    @torch.compile(backend="tpu", fullgraph=True)
    def step(a):
        return a.sin() * 2

    return {
        "module_equal": compiled(x.to("tpu")).cpu().equal(ref(x)),
        "module_is_eager": compiled is model,
        "function_equal": fn(x.to("tpu"), x.T.to("tpu")).cpu().equal((x @ x.T).relu().sum(0)),
        "decorator": [str(step(x.to("tpu")).device), step(x.to("tpu")).cpu().equal(x.sin() * 2)],
        "default_backend_on_device": torch.compile(model) is model,
        "inductor_refused": outcome(lambda: torch.compile(model, backend="inductor")),
    }

@section
def item2_distributed_one_rank():
    import tempfile
    import torch.distributed as dist
    init = "file://" + os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group(backend="tpu", init_method=init, rank=0, world_size=1)
    t = torch.arange(3.0, device="tpu")
    dist.all_reduce(t)
    b = torch.full((2,), 4.0, device="tpu")
    dist.broadcast(b, src=0)
    gathered = [torch.zeros(3, device="tpu")]
    dist.all_gather(gathered, t)
    r = {"backend": dist.get_backend(), "world": dist.get_world_size(),
         "all_reduce": t.cpu().tolist(), "device": str(t.device),
         "broadcast": b.cpu().tolist(), "all_gather": gathered[0].cpu().tolist()}
    dist.destroy_process_group()
    return r

@section
def item3_device_mismatch():
    a = torch.ones(3, device="tpu")
    m2 = torch.ones(3, 2, device="tpu")
    return {
        "add_cpu": outcome(lambda: a + torch.ones(3)),
        "cpu_add": outcome(lambda: torch.ones(3) + a),
        "sum_then_add": outcome(lambda: m2.sum(1) + torch.ones(3)),
        "cpu_matmul": outcome(lambda: torch.ones(2, 3) @ m2),
        "matmul_cpu": outcome(lambda: torch.ones(2, 3, device="tpu") @ torch.ones(3, 2)),
        "linear_cpu_weight": outcome(lambda: F.linear(torch.ones(2, 3, device="tpu"),
                                                      torch.ones(4, 3))),
        "cat": outcome(lambda: torch.cat([a, torch.ones(3)])),
        "cpu_scalar_ok": outcome(lambda: (a * torch.tensor(2.0)).cpu().tolist()),
        "cpu_index_ok": outcome(lambda: a[torch.tensor([0, 2])].cpu().tolist()),
        "copy_ok": outcome(lambda: torch.zeros(3).copy_(a).tolist()),
    }

@section
def item3_numpy():
    a = torch.ones(2, device="tpu")
    return {"numpy": outcome(a.numpy), "array": outcome(lambda: a.__array__()),
            "via_cpu": outcome(lambda: a.cpu().tolist())}

@section
def item4_counters():
    x = torch.ones(4, 4)
    emu.reset()
    L = {}
    L["h2d"] = here(); d = x.to("tpu")                        # h2d 64 bytes
    L["h2d_tensor"] = here(); t = torch.tensor([1.0, 2.0], device="tpu")  # h2d 8 bytes
    y = d * 2
    L["item"] = here(); y.sum().item()
    L["cpu"] = here(); y.cpu()                                # d2h 64 bytes
    L["tolist"] = here(); y.tolist()                          # d2h 64 bytes
    L["bool"] = here(); bool(y[0, 0] > 0)
    L["if"] = here(); _ = 1 if y.any() else 0
    L["format"] = here(); f"{y.sum():.1f}"
    L["print"] = here(); print(y[0])
    L["float"] = here(); float(y[0, 0])
    y.double().sum()                                          # float64 ops
    c = emu.counters()
    return {"c": c, "lines": L}

@section
def item4_ops_per_step():
    m = nn.Linear(4, 2).to("tpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(8, 4, device="tpu")
    emu.reset()
    for _ in range(3):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
    c = emu.counters()
    emu.reset()
    after = emu.counters()
    return {"steps": c["optimizer_steps"], "per_step": c["ops_per_step"], "ops": c["ops"],
            "after_reset": [after["optimizer_steps"], after["ops_per_step"], after["ops"],
                            after["host_syncs"], after["cuda_calls"]]}
"""

# CUDA calls: the same code runs here (emulator active) and on plain CPU torch; the
# outcomes must match, and the emulator must record each call with its line.
CUDA_CODE = """
@section
def item3_cuda():
    warnings.simplefilter("ignore")
    buf = io.BytesIO()
    torch.save(torch.ones(2), buf)
    L, o = {}, {}
    saved = io.BytesIO(buf.getvalue())
    cuda = torch.cuda
    if emu.active_device():
        emu.reset()
    L["randn"] = here(); o["randn"] = outcome(lambda: torch.randn(2, device="cuda"))
    L["to"] = here(); o["to"] = outcome(lambda: torch.ones(2).to("cuda"))
    L["tensor_cuda"] = here(); o["tensor_cuda"] = outcome(lambda: torch.ones(2).cuda())
    L["module_cuda"] = here(); o["module_cuda"] = outcome(lambda: nn.Linear(2, 2).cuda())
    L["synchronize"] = here(); o["synchronize"] = outcome(lambda: cuda.synchronize())
    L["current_device"] = here(); o["current_device"] = outcome(lambda: cuda.current_device())
    L["device_name"] = here(); o["device_name"] = outcome(lambda: cuda.get_device_name())
    L["is_available"] = here(); o["is_available"] = outcome(lambda: cuda.is_available())
    L["manual_seed"] = here(); o["manual_seed"] = outcome(lambda: cuda.manual_seed(0))
    L["memory"] = here(); o["memory"] = outcome(lambda: cuda.memory_allocated())
    L["empty_cache"] = here(); o["empty_cache"] = outcome(lambda: cuda.empty_cache())
    L["generator"] = here(); o["generator"] = outcome(lambda: torch.Generator(device="cuda"))
    L["autocast"] = here(); o["autocast"] = outcome(lambda: torch.autocast("cuda").__class__)
    L["scaler"] = here(); o["scaler"] = outcome(lambda: type(torch.amp.GradScaler("cuda")))
    L["load"] = here(); o["load"] = outcome(lambda: torch.load(saved, map_location="cuda"))
    L["event"] = here(); o["event"] = outcome(lambda: cuda.Event(enable_timing=True))
    L["stream"] = here(); o["stream"] = outcome(lambda: cuda.Stream())
    out = o
    return {"out": out, "lines": L,
            "counters": emu.counters() if emu.active_device() else None}
"""

NEURON_CODE = """
@section
def neuron_device():
    x = torch.arange(4.0)
    d = x.to("neuron")
    m = nn.Linear(4, 2)
    ref = nn.Linear(4, 2)
    ref.load_state_dict(m.state_dict())
    m.neuron()
    return {
        "devices": [str(d.device), str(x.neuron().device), str(x.to("neuron:1").device),
                    str(m.weight.device)],
        "flags": [d.is_neuron, x.is_neuron, hasattr(torch, "tpu")],
        "values": [d.cpu().equal(x), m(d).cpu().equal(ref(x))],
        "accelerator": [str(torch.accelerator.current_accelerator()),
                        torch.accelerator.device_count(), torch.accelerator.is_available()],
        "module": torch.get_device_module("neuron").__name__,
        "no_legacy_ban": [torch.neuron.synchronize() is None, torch.neuron.device_count(),
                          torch.neuron.is_available(), torch.neuron.current_device()],
        "memory": torch.accelerator.memory_allocated() >= 16,
        "generator": [str(torch.Generator(device="neuron").device),
                      torch.randn(3, device="neuron",
                                  generator=torch.Generator(device="neuron").manual_seed(1)
                                  ).cpu().equal(torch.randn(3, generator=torch.Generator(
                                      ).manual_seed(1)))],
        "out_of_range": outcome(lambda: torch.zeros(1, device="neuron:3")),
        "mismatch": outcome(lambda: d + x),
        "ordinals": outcome(lambda: d + torch.ones(4, device="neuron:1")),
    }

@section
def neuron_device_module():
    # torch.neuron's device management across the host's devices (a TorchNeuron process
    # sees them all; TorchTPU's sees one, so this runs on neuron only).
    n = torch.neuron
    r = {"properties": n.get_device_properties(1).index}
    with n.device(2):
        r["device_ctx"] = torch.accelerator.current_device_index()
    with n.device_of(torch.ones(1, device="neuron:1")):
        r["device_of"] = torch.accelerator.current_device_index()
    r["after"] = torch.accelerator.current_device_index()
    r["stream_devices"] = [str(n.Stream(device="neuron:2").device),
                           str(n.current_stream(1).device),
                           str(torch.accelerator.current_stream(2).device)]
    r["generators"] = [str(torch.Generator(device="neuron:2").device),
                       [str(g.device) for g in n.default_generators]]
    return r

@section
def item2_autocast_neuron():
    return autocast_checks("neuron")

@section
def item2_compile_neuron():
    f = torch.compile(lambda a: a.cos() + 1, backend="neuron")
    x = torch.randn(3)
    return [str(f(x.to("neuron")).device), f(x.to("neuron")).cpu().equal(x.cos() + 1)]

@section
def item2_distributed_one_rank_neuron():
    import tempfile
    import torch.distributed as dist
    init = "file://" + os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group(backend="neuron", init_method=init, rank=0, world_size=1)
    t = torch.arange(3.0, device="neuron")
    dist.all_reduce(t)
    r = [dist.get_backend(), t.cpu().tolist(), str(t.device)]
    dist.destroy_process_group()
    return r
"""

LEGACY_CODE = """
@section
def item1_legacy_allowed():
    t = torch.tpu
    return {n: outcome(getattr(t, n)) for n in
            ("synchronize", "is_available", "device_count", "current_device")}
"""


# The device sections' places in each run: device, two ordinals I and J, the first bad one.
PLACES = {"tpu": ("tpu", 0, 0, 1), "neuron": ("neuron", 1, 2, 3)}
HOST_DEVICES = 3  # the emulated host of both runs (--devices): a tpu process sees one of them
# A TorchTPU process's reason for an ordinal other than 0 (sandbox/emulator/state.py).
ONE_DEVICE = "(a TorchTPU process sees one device, tpu:0"
BOUND = (
    "Cannot set TPU device to index {}, current process is bound to device index 0. "
    "Changing the active TPU device within a process is not supported."
)


def device_code(name: str) -> str:
    """DEVICE_CODE with its places for the run of device ``name``."""
    return f"D, I, J, BAD = {PLACES[name]!r}\n" + DEVICE_CODE


@dataclass(frozen=True)
class Place:
    """One run of DEVICE_CODE: its device's name, ordinals and results."""

    name: str
    i: int
    j: int
    bad: int
    run: dict[str, Any]

    def at(self, index: int) -> str:
        return f"{self.name}:{index}"


@pytest.fixture(scope="module")
def tpu_run(backend: str) -> dict[str, Any]:
    # the device's mechanics against the CPU's, at TorchTPU's exact float32 matmuls (HIGHEST);
    # its default bfloat16 passes: tests/test_tpu_precision.py
    code = HELPERS + device_code("tpu") + TPU_CODE + CUDA_CODE
    return run_snippet(code, devices=HOST_DEVICES, backend=backend, matmul_precision="highest")


@pytest.fixture(scope="module")
def plain_cpu_run() -> dict[str, Any]:
    return run_snippet(HELPERS + CUDA_CODE, activate=False)


@pytest.fixture(scope="module")
def neuron_run(backend: str) -> dict[str, Any]:
    code = HELPERS + device_code("neuron") + NEURON_CODE
    return run_snippet(code, name="neuron", devices=HOST_DEVICES, backend=backend)


@pytest.fixture(params=sorted(PLACES))
def place(request: pytest.FixtureRequest, backend: str) -> Place:
    """The device sections' results in the tpu run (one device) and the neuron run (three),
    on each emulator ``backend`` (requested so that the runs' own parameter is set)."""
    name, i, j, bad = PLACES[request.param]
    return Place(name, i, j, bad, request.getfixturevalue(f"{name}_run"))


# ---------------------------------------------------------------------------------------------
# Item 1: devices, factories, torch.accelerator, torch.tpu / torch.neuron


def test_item1_device_strings_to_and_is_device(place: Place) -> None:
    r, at = part(place.run, "item1_devices"), place.at
    assert r["devices"] == [at(0), at(0), at(place.j), at(place.i), at(place.i), at(place.j)]
    assert r["flags"] == [True, False, False, True, place.name, 0]
    assert r["roundtrip"] == [True, True, True]
    assert r["same_device_is_self"] == [True, True, True]
    assert r["to_dtype"] == ["torch.float16", at(place.i), "torch.int32"]
    assert r["item"] == 15.0
    assert r["repr"] == f"tensor([1., 1.], device='{at(place.i)}')"
    assert r["torch_device_any_index"] == at(7)  # a torch.device names any index


def test_item1_module_to_and_device_method(place: Place) -> None:
    r, at = part(place.run, "item1_devices"), place.at
    assert r["module_to_returns_self"] is True
    assert r["module_devices"] == [at(place.i)]  # parameters and buffers (BatchNorm stats)
    assert r["param"] == [True, True]
    assert r["module_forward_equal"] is True
    assert r["module_on"] == [at(0), at(place.j), at(place.i)]


def test_item1_out_of_range_device_index_raises(place: Place) -> None:
    errors = part(place.run, "item1_devices")["out_of_range"]
    assert len(errors) == 9
    for key, (kind, message) in errors.items():
        if place.name == "tpu" and key == "set_device_index":  # TorchTPU's set_device
            assert [kind, message] == ["ValueError", BOUND.format(place.bad)]
            continue
        assert kind == "RuntimeError", (key, kind, message)
        assert "invalid device ordinal" in message, (key, message)
        why = ONE_DEVICE if place.name == "tpu" else f"devices={HOST_DEVICES}"
        assert why in message, (key, message)


def test_item1_tpu_process_sees_one_device_of_the_host(tpu_run: dict[str, Any]) -> None:
    """What the neuron run does with ordinals 1 and 2 is refused in a tpu process: the
    ordinal (RuntimeError) and switching (TorchTPU's ValueError); staying on 0 works."""
    r = part(tpu_run, "item1_one_device")
    assert r["count"] == [1, 1]  # torch.accelerator.device_count(), default_generators
    assert len(r["ordinal"]) == 13
    for key, (kind, message) in r["ordinal"].items():
        assert kind == "RuntimeError", (key, kind, message)
        assert message.startswith("tpu error: invalid device ordinal "), (key, message)
        assert ONE_DEVICE in message, (key, message)
    assert r["switch"] == {
        "set_device_index": ["ValueError", BOUND.format(2)],
        "by_string": ["ValueError", BOUND.format(1)],
        "device_index": ["ValueError", BOUND.format(1)],
    }
    assert r["stay"] == [["ok", None], ["ok", None], ["ok", None], 0]


def test_item1_factory_functions_with_device(place: Place) -> None:
    r, at = part(place.run, "item1_factories"), place.at
    factories = {k: v for k, v in r.items() if isinstance(v, dict)}
    assert len(factories) == 32
    for name, v in factories.items():
        assert v == {"device": at(0), "meta_equal": True, "values_equal": True}, name
    assert r["current_device"] == [at(place.i)] * 10  # the bare name means the current device
    assert r["requires_grad"] is True
    assert r["like_keeps_device"] == [at(place.j)] * 5


def test_item1_torch_accelerator_api(place: Place) -> None:
    r = {k: v for k, v in part(place.run, "item1_accelerator").items() if k != "memory"}
    assert r == {
        "is_available": True,
        "device_count": 1 if place.name == "tpu" else HOST_DEVICES,
        "current_accelerator": place.name,
        "index0": 0,
        "index_after_set": place.j,
        "factory_on_current": place.at(place.j),
        "inside_device_index": place.i,
        "after_device_index": place.j,
        "set_by_string": 0,
        "synchronize": [None, None, None, None],
        "device_module": f"torch.{place.name}",
        "current_stream": place.at(0),
    }


def test_item1_torch_accelerator_memory_statistics(place: Place) -> None:
    mem = part(place.run, "item1_accelerator")["memory"]
    assert mem["after_alloc"] == 4096
    assert mem["after_view"] == 4096  # a view allocates nothing
    assert mem["peak_after_reset"] == 4096
    assert mem["peak_with_big"] >= 4096 + 16384
    assert mem["after_del"] == 4096
    assert mem["peak_after_del"] == mem["peak_with_big"]
    assert mem["device1"] == mem["device1_by_device"] == 1024
    assert mem["reserved_ge_allocated"] and mem["max_reserved_ge_reserved"]
    assert mem["stats_current"] is True
    assert mem["stats_after_accumulated_reset"] == 0
    assert mem["memory_info"] == [True, True]
    assert mem["empty_cache"] is None
    assert mem["out_of_range"][0] == "RuntimeError"


def test_item1_torch_tpu_public_names_and_internal_apis(tpu_run: dict[str, Any]) -> None:
    r = part(tpu_run, "item1_torch_tpu_module")
    assert r["missing"] == []
    internal = torchtpu_facts.internal_for(torch.__version__)
    assert set(r["internal"]) == set(internal) and len(internal) == 10
    for name, (kind, message) in r["internal"].items():
        shown = "_DeviceContext" if name == "device" else name  # TorchTPU names the class
        assert [kind, message] == [
            "RuntimeError",
            f"{shown} is internal to TorchTPU and can only be called by the PyTorch framework "
            f"(torch and torch_tpu). Use {internal[name].prefer} instead.",
        ]
    assert r["torch_internal_calls_still_work"] == [1, "ok"]
    assert r["manual_seed_matches_cpu"] is True
    assert r["initial_seed"] == 6
    assert r["rng_state_roundtrip"] is True
    assert r["info"] == [True, "emulated tpu (CPU)", ["torch.bfloat16", "torch.float16"], 0]
    assert r["device_of"] == 0
    assert r["stream_devices"] == ["tpu:0", "tpu:0"]
    assert r["streams"] == ["Stream", True, "tpu:0", "tpu:0", "tpu:0", True, True, None]
    assert r["excess_precision"] == [False, False]
    assert r["precision_ctx"] == [[2.0, 2.0], [2.0, 2.0]]
    assert r["eager_mode"] == ["DEFER_AND_FUSE", "DEFER_NEVER"]
    assert r["default_generators"] == ["tpu:0"]
    assert r["not_emulated"] == ["AttributeError", True, "NotImplementedError", False]


def test_item1_torch_tpu_legacy_apis_allowed_by_env(backend: str) -> None:
    r = run_snippet(
        HELPERS + LEGACY_CODE,
        devices=HOST_DEVICES,
        env={torchtpu_facts.section("environment")["allow_legacy_device_apis"]: "1"},
        backend=backend,
    )
    assert part(r, "item1_legacy_allowed") == {
        "synchronize": ["ok", None],
        "is_available": ["ok", True],
        "device_count": ["ok", 1],  # the process's device, not the host's
        "current_device": ["ok", 0],
    }


def test_item1_neuron_equivalents(neuron_run: dict[str, Any]) -> None:
    r = part(neuron_run, "neuron_device")
    assert r["devices"] == ["neuron:0", "neuron:0", "neuron:1", "neuron:0"]
    assert r["flags"] == [True, False, False]
    assert r["values"] == [True, True]
    assert r["accelerator"] == ["neuron", HOST_DEVICES, True]
    assert r["module"] == "torch.neuron"
    # the ban on device APIs is TorchTPU's, not Neuron's
    assert r["no_legacy_ban"] == [True, HOST_DEVICES, True, 0]
    assert r["memory"] is True
    assert r["generator"] == ["neuron:0", True]
    assert r["out_of_range"][0] == "RuntimeError" and "ordinal 3" in r["out_of_range"][1]
    assert r["mismatch"] == [
        "RuntimeError",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "neuron:0 and cpu!",
    ]
    assert r["ordinals"] == [
        "RuntimeError",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "neuron:0 and neuron:1!",
    ]


def test_item1_neuron_device_module_across_devices(neuron_run: dict[str, Any]) -> None:
    assert part(neuron_run, "neuron_device_module") == {
        "properties": 1,
        "device_ctx": 2,
        "device_of": 1,
        "after": 0,
        "stream_devices": ["neuron:2", "neuron:1", "neuron:2"],
        "generators": ["neuron:2", ["neuron:0", "neuron:1", "neuron:2"]],
    }


# ---------------------------------------------------------------------------------------------
# Item 2: autograd, optimizers, views, save/load, autocast, DataLoader, Generator, compile,
# distributed


def test_item2_autograd_matches_cpu(place: Place) -> None:
    r, at = part(place.run, "item2_autograd"), place.at
    assert r["loss"][0] == r["loss"][1] == r["loss"][2]
    assert r["max_grad_diff"] == [0.0, 0.0]  # incl. accumulation, retain_grad, 2nd order
    assert r["devices"] == [[at(0)], [at(place.j)]]  # any device index, not only 0
    assert r["same"] == [True, True, True]  # hooks, no_grad, grad_fn type
    assert r["pipeline"] == [0.0, [at(place.i), at(place.j)]]  # backward across devices


def test_item2_recurrent_layers_match_cpu(tpu_run: dict[str, Any]) -> None:
    """ATen sends RNN cells off the CPU to CUDA-only fused kernels; the emulator must not."""
    r = part(tpu_run, "item2_recurrent_layers")
    for (cpu_loss, cpu_grad), (tpu_loss, tpu_grad) in zip(r["cpu"], r["tpu"], strict=True):
        assert tpu_loss == pytest.approx(cpu_loss, rel=1e-6)
        assert tpu_grad == pytest.approx(cpu_grad, rel=1e-6)


def test_item2_every_optimizer_foreach_and_single_tensor_match_cpu(
    tpu_run: dict[str, Any],
) -> None:
    r = part(tpu_run, "item2_optimizers")
    expected = {"SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "LBFGS", "SparseAdam", "Rprop"}
    assert expected <= set(r["classes"]), r["classes"]
    for name in r["classes"]:  # every class ran, with both paths where it has foreach=
        keys = [k for k in r["diffs"] if k.startswith(f"{name}-")]
        assert keys, name
    assert "Adam-foreach=True" in r["diffs"] and "Adam-foreach=False" in r["diffs"]
    assert all(d <= 1e-6 for d in r["diffs"].values()), r["diffs"]
    assert all(devs in ([], ["tpu:0"]) for devs in r["states"].values()), r["states"]
    assert r["default_foreach"] is True  # like a real device tensor


def test_item2_inplace_ops_and_views(tpu_run: dict[str, Any]) -> None:
    r = part(tpu_run, "item2_inplace_and_views")
    cpu, tpu = r["cpu"], r["tpu"]
    assert tpu == cpu
    assert cpu["slice"][1] is True and cpu["view"][1] is True  # ._base of views
    assert cpu["data"][0] == [5.0, 5.0, 5.0]  # .data writes through
    assert cpu["detach"][0] == [7.0, 5.0, 5.0]  # detach shares storage
    assert cpu["clone"][0] == [7.0, 5.0, 5.0]  # clone does not
    assert "modified by an inplace operation" in cpu["version_check"]


def test_item2_save_load_map_location(place: Place) -> None:
    r, at, i, j = part(place.run, "item2_save_load"), place.at, place.i, place.j
    # Saved: x on I, parameter w and state_dict on 0, c (and its view v) on the CPU.
    expected = {
        "cpu": ["cpu", "cpu", "cpu", "cpu"],
        "dev": [at(0), at(0), at(0), at(0)],
        "dev:I": [at(i), at(i), at(i), at(i)],
        "device(dev:I)": [at(i), at(i), at(i), at(i)],
        "dict_I_to_0": [at(0), at(0), "cpu", at(0)],
        "dict_all_to_cpu": ["cpu", "cpu", "cpu", "cpu"],
        "dict_cpu_to_J": [at(i), at(0), at(j), at(0)],
        "callable_identity": ["cpu", "cpu", "cpu", "cpu"],
        "None": [at(i), at(0), "cpu", at(0)],
    }
    for key, devices in expected.items():
        for weights_only in (True, False):
            got = r["out"][f"{key}-{weights_only}"]
            assert got["devices"] == devices, (key, weights_only, got)
            assert got["equal"] and got["param"], (key, weights_only)
            assert got["shared"] == [0.0, 11.0, 12.0, 3.0], (key, weights_only)
    assert r["errors"]["bad_ordinal"][0] == "RuntimeError"
    assert f"invalid device ordinal {place.bad}" in r["errors"]["bad_ordinal"][1]
    assert r["whole_module"] == [at(j), True]
    assert r["load_state_dict"] == [at(i), True]


@pytest.mark.parametrize("name", ["tpu", "neuron"])
def test_item2_autocast_bfloat16(
    name: str, tpu_run: dict[str, Any], neuron_run: dict[str, Any]
) -> None:
    r = (
        part(tpu_run, "item2_autocast")
        if name == "tpu"
        else part(neuron_run, "item2_autocast_neuron")
    )
    assert r["enabled"] == [True, "torch.bfloat16"]
    assert r["default_dtype"] == "torch.bfloat16"
    d = r["dtypes"]
    assert d["matmul"] == d["linear"] == d["conv"] == d["add"] == "torch.bfloat16"
    # TorchTPU's autocast lists keep softmax and sum in the dtype they are given; CUDA's
    # (neuron's here) run them in float32
    wide = "torch.bfloat16" if name == "tpu" else "torch.float32"
    assert d["softmax"] == d["sum"] == wide
    assert r["disabled_inside"] == "torch.float32"
    assert r["grad_dtype"] == "torch.float32"
    assert r["outside"] == ["torch.float32", "torch.float32", False]
    assert r["matmul_equals_cpu_bf16"] is True
    assert r["model_equals_cpu_autocast"] is True
    assert r["amp_autocast"] == "torch.bfloat16"


def test_item2_dataloader_pin_memory(tpu_run: dict[str, Any]) -> None:
    r = part(tpu_run, "item2_dataloader_pin_memory")
    for workers in ("workers0", "workers2"):
        assert r[workers] == {"equal": True, "pinned": [True, True, True], "moved": ["tpu:0"]}
    assert r["pin_memory"] == [False, True, False, True, True, True]
    assert r["pin_device_tensor"] == [
        "RuntimeError",
        "cannot pin 'torch.tpu.FloatTensor' only dense CPU tensors can be pinned",
    ]


def test_item2_generator_on_device(tpu_run: dict[str, Any]) -> None:
    """``torch.Generator(device="tpu")`` works: a ``torch._C.Generator`` subclass.

    It carries a CPU generator's state and reports ``tpu:N``; device random ops
    draw from it on the CPU, so numbers equal a CPU generator's with the same seed.
    As on CUDA, device random ops refuse a CPU generator. Unlike CUDA, CPU ops
    (``torch.randperm(n, generator=g)``, so ``DataLoader(shuffle=True,
    generator=g)``) accept the device generator (CUDA would raise there).
    """
    r = part(tpu_run, "item2_generator")
    assert r["kind"] == ["tpu:0", True, True, True, True, "tpu:0", "tpu:0"]
    assert r["manual_seed_returns_self"] is True
    assert r["initial_seed"] == [5, 5]
    assert r["same_as_cpu"] == dict.fromkeys(r["same_as_cpu"], True)
    assert len(r["same_as_cpu"]) == 12
    assert r["copies"] == ["tpu:0", "tpu:0", True]
    assert r["cpu_generator_on_device_op"] == [
        "RuntimeError",
        "Expected a 'tpu' device type for generator but found 'cpu'. "
        "(Create it with torch.Generator(device='tpu').)",
    ]
    assert r["default_generator_is_cpu_default"] == [True, 11]
    assert r["subclass"] == ["cpu", "tpu:0"]


def test_item2_compile_with_device_backend(tpu_run: dict[str, Any]) -> None:
    r = part(tpu_run, "item2_compile")
    assert r["module_equal"] is True and r["module_is_eager"] is True
    assert r["function_equal"] is True
    assert r["decorator"] == ["tpu:0", True]
    assert r["default_backend_on_device"] is True  # "tpu" is the default for device inputs
    assert r["inductor_refused"][0] == "RuntimeError"
    assert "backend='tpu'" in r["inductor_refused"][1]


def test_item2_compile_neuron_backend(neuron_run: dict[str, Any]) -> None:
    assert part(neuron_run, "item2_compile_neuron") == ["neuron:0", True]


def test_item2_distributed_one_rank(tpu_run: dict[str, Any], neuron_run: dict[str, Any]) -> None:
    assert part(tpu_run, "item2_distributed_one_rank") == {
        "backend": "tpu",
        "world": 1,
        "all_reduce": [0.0, 1.0, 2.0],
        "device": "tpu:0",
        "broadcast": [4.0, 4.0],
        "all_gather": [0.0, 1.0, 2.0],
    }
    assert part(neuron_run, "item2_distributed_one_rank_neuron") == [
        "neuron",
        [0.0, 1.0, 2.0],
        "neuron:0",
    ]


DDP_SCRIPT = """
import json, os, sys
import torch, torch.nn as nn, torch.distributed as dist
import torchport.sandbox.emulated as emu
name = sys.argv[1]
emu.activate(name, devices=2, matmul_precision="highest")  # exact, as the CPU reference
dist.init_process_group(backend=name)
rank = dist.get_rank()
if name == "neuron":  # a TorchNeuron process sees the host's devices: the rank picks one
    torch.accelerator.set_device_index(rank)
# a TorchTPU process sees one, its own, as tpu:0: the process's accelerator either way
device = torch.accelerator.current_accelerator()
t = torch.full((3,), float(rank + 1), device=device)
dist.all_reduce(t)
torch.manual_seed(0)
m = nn.Linear(4, 2).to(device)
ref = nn.Linear(4, 2)
ref.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
ddp = nn.parallel.DistributedDataParallel(m)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
torch.manual_seed(123)
data = [torch.randn(2, 8, 4) for _ in range(3)]
for batch in data:
    loss = ddp(batch[rank].to(device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    # Reference: both ranks' batches on the CPU, gradients averaged.
    ref_opt.zero_grad()
    sum(ref(b).pow(2).mean() for b in batch).div(2).backward()
    ref_opt.step()
w = m.weight.detach()
gathered = [torch.zeros_like(w) for _ in range(2)]
dist.all_gather(gathered, w)  # device tensors: the tpu process group takes no others
out = {
    "allreduce": t.cpu().tolist(),
    "device": str(t.device),
    "same": gathered[0].cpu().equal(gathered[1].cpu()),
    "match": (w.cpu() - ref.weight.detach()).abs().max().item() < 1e-6,
}
dist.destroy_process_group()
with open(f"{sys.argv[2]}.{rank}", "w") as f:
    json.dump(out, f)
"""


@pytest.mark.parametrize("name", ["tpu", "neuron"])
def test_item2_distributed_ddp_two_ranks(tmp_path: Path, name: str, backend: str) -> None:
    """``init_process_group(backend=name)`` under torchrun: all_reduce and DDP, gloo below."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    # torchrun's own scratch folder (torchelastic_*) goes under the test's, not /tmp
    env = {**os.environ, **backend_env(backend), "TMPDIR": str(tmp_path)}
    if name == "tpu":  # a TorchTPU user's launch line: eval "$(python -m torch.tpu.distributed
        # | sed 's/^/export /')" && torchrun ...: the step's variables exported in the parent
        launch_step.exported(tpu_launch.printed(2, dict(env)), env)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run"),
            *("--nproc_per_node", "2", "--standalone"),
            *(str(script), name, str(tmp_path / name)),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        r = json.loads((tmp_path / f"{name}.{rank}").read_text())
        # each tpu rank on its process's only device; each neuron rank on its own ordinal
        assert r["allreduce"] == [3.0, 3.0, 3.0]
        assert r["device"] == ("tpu:0" if name == "tpu" else f"{name}:{rank}")
        assert r["same"] is True and r["match"] is True


# ---------------------------------------------------------------------------------------------
# Item 3: accelerator semantics


def test_item3_device_mismatch_uses_torch_error_text(tpu_run: dict[str, Any]) -> None:
    """torch 2.13's two texts: TensorIterator's (pointwise, reductions) and the
    generated wrappers' (aten/src/ATen/core/adaption.cpp), which name the argument."""
    r = part(tpu_run, "item3_device_mismatch")
    same = "Expected all tensors to be on the same device, but "
    assert r["add_cpu"] == ["RuntimeError", same + "found at least two devices, tpu:0 and cpu!"]
    assert r["cpu_add"] == r["add_cpu"]  # the first non-CPU device is named first
    assert r["sum_then_add"] == r["add_cpu"]
    assert r["cpu_matmul"] == [
        "RuntimeError",
        same + "got mat2 is on tpu:0, different from other tensors on cpu "
        "(when checking argument in method wrapper_PrivateUse1_mm)",
    ]
    assert r["matmul_cpu"][1].startswith(same + "got mat2 is on cpu, different from other ")
    assert r["linear_cpu_weight"][1].startswith(same + "got mat2 is on cpu")
    assert r["cat"][1].startswith(same + "got tensors is on cpu, different from other ")
    assert r["cpu_scalar_ok"] == ["ok", "[2.0, 2.0, 2.0]"]  # 0-dim CPU tensors mix, as on CUDA
    assert r["cpu_index_ok"] == ["ok", "[1.0, 1.0]"]
    assert r["copy_ok"] == ["ok", "[1.0, 1.0, 1.0]"]


def test_item3_numpy_on_device_tensor_raises(tpu_run: dict[str, Any]) -> None:
    r = part(tpu_run, "item3_numpy")
    text = (
        "can't convert tpu:0 device type tensor to numpy. "
        "Use Tensor.cpu() to copy the tensor to host memory first."
    )
    assert r["numpy"] == ["TypeError", text] and r["array"] == ["TypeError", text]
    assert r["via_cpu"] == ["ok", "[1.0, 1.0]"]


def test_item3_cuda_use_fails_as_on_cpu_torch_and_is_recorded(
    tpu_run: dict[str, Any], plain_cpu_run: dict[str, Any]
) -> None:
    emulated, plain = part(tpu_run, "item3_cuda"), part(plain_cpu_run, "item3_cuda")
    assert emulated["out"] == plain["out"]  # same outcome as on a CPU-only torch
    not_compiled = ["AssertionError", "Torch not compiled with CUDA enabled"]
    for key in ("randn", "to", "tensor_cuda", "module_cuda", "synchronize", "current_device"):
        assert emulated["out"][key] == not_compiled, key
    assert emulated["out"]["is_available"] == ["ok", False]
    assert emulated["out"]["load"][0] == "RuntimeError"
    assert "Attempting to deserialize object on a CUDA device" in emulated["out"]["load"][1]
    c, lines = emulated["counters"], emulated["lines"]
    sites = c["cuda_call_sites"]
    assert c["cuda_calls"] == sum(s["count"] for s in sites) >= len(lines)
    assert {s["file"] for s in sites} == {"<string>"}
    recorded = {s["line"] for s in sites}
    assert recorded == set(lines.values()), {k: v for k, v in lines.items() if v not in recorded}
    apis = {s["line"]: s["api"] for s in sites}
    assert apis[lines["synchronize"]] == "torch.cuda.synchronize"
    assert apis[lines["randn"]] == apis[lines["to"]] == "device='cuda'"
    assert apis[lines["event"]] == "torch.cuda.Event"
    assert apis[lines["stream"]] == "torch.cuda.Stream"
    assert apis[lines["module_cuda"]].startswith("Module.cuda")
    assert apis[lines["generator"]] == "torch.Generator(device='cuda')"
    assert apis[lines["autocast"]] == "autocast('cuda')"
    assert apis[lines["scaler"]] == "GradScaler('cuda')"
    assert apis[lines["load"]] == "torch.load(location='cuda')"


# ---------------------------------------------------------------------------------------------
# Item 4: counters


def test_item4_counters_syncs_transfers_float64(tpu_run: dict[str, Any], backend: str) -> None:
    r = part(tpu_run, "item4_counters")
    c, lines = r["c"], r["lines"]
    assert c["emulator_backend"] == backend and c["emulator_backend_reason"]  # the evidence
    assert c["host_syncs_by_kind"] == {"item": 5, "to_cpu": 1, "tolist": 1, "print": 1}
    assert c["host_syncs"] == 8
    sync_lines = {lines[k] for k in ("item", "cpu", "tolist", "bool", "if", "format", "print")}
    sync_lines.add(lines["float"])
    assert c["host_sync_sites"] == {f"<string>:{n}": 1 for n in sync_lines}
    assert c["h2d_count"] == 2 and c["h2d_bytes"] == 64 + 8
    assert c["d2h_count"] == 2 and c["d2h_bytes"] == 128
    assert c["float64_ops"] >= 2 and "sum" in c["float64_ops_by_name"]
    assert c["ops_by_name"]["mul"] == 1
    assert c["ops"] == sum(c["ops_by_name"].values())
    assert c["cuda_calls"] == 0 and c["cuda_call_sites"] == []


def test_item4_counters_ops_per_step(tpu_run: dict[str, Any]) -> None:
    r = part(tpu_run, "item4_ops_per_step")
    assert r["steps"] == 3 and len(r["per_step"]) == 3
    assert r["per_step"][0] > 0 and len(set(r["per_step"])) == 1
    assert sum(r["per_step"]) == r["ops"]
    assert r["after_reset"] == [0, [], 0, 0, 0]
