"""The emulated ``tpu`` refuses what TorchTPU refuses (issue 30), on both emulator backends.

Each fact comes from the torch-tpu wheel (``sandbox/data/torch_tpu.toml``, read through
``sandbox.torchtpu_facts``): its internal device APIs, one device per process, the
``tpu`` process group's devices, the fork refusal, the settings' shapes, the events'
timing rules. Each test runs a snippet in a fresh interpreter (one PrivateUse1 backend
per process) and asserts the outcome the wheel's code gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_emulator
import torch
from test_emulator import run_snippet
from torchport.sandbox import torchtpu_facts

backend = test_emulator.backend  # every test below runs on both emulators

OUTCOME = """
def outcome(fn):
    try:
        value = fn()
    except BaseException as e:
        return [type(e).__name__, str(e)]
    return ["ok", str(value.device) if isinstance(value, torch.Tensor) else repr(value)]
"""

INTERNAL = (
    OUTCOME
    + """
args = {"device": (0,), "set_device": (0,), "set_stream": (None,)}
result["user"] = {n: outcome(lambda n=n: getattr(torch.tpu, n)(*args.get(n, ())))
                  for n in NAMES}
# torch itself calls them through the device module (torch.accelerator, torch._utils)
result["torch"] = [torch.accelerator.device_count(), torch.accelerator.is_available(),
                   torch._utils._get_device_index("tpu", optional=True)]
"""
)


def _internal_names() -> list[str]:
    return sorted(torchtpu_facts.internal_for(torch.__version__))


def test_every_internal_api_raises_torchtpu_error_from_user_code(backend: str) -> None:
    names = _internal_names()
    assert len(names) == 10  # torch 2.13: every gate of the wheel is open
    r = run_snippet(f"NAMES = {names!r}\n" + INTERNAL, backend=backend)
    internal = torchtpu_facts.internal_for(torch.__version__)
    for name, (kind, message) in r["user"].items():
        shown = "_DeviceContext" if name == "device" else name  # TorchTPU names the class
        assert kind == "RuntimeError", (name, message)
        assert message == (
            f"{shown} is internal to TorchTPU and can only be called by the PyTorch framework "
            f"(torch and torch_tpu). Use {internal[name].prefer} instead."
        )
    assert r["torch"] == [1, True, 0]


def test_allow_legacy_env_var_turns_the_error_into_one_warning_per_api(backend: str) -> None:
    var = torchtpu_facts.section("environment")["allow_legacy_device_apis"]
    code = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result["values"] = [torch.tpu.device_count(), torch.tpu.device_count(),
                        torch.tpu.current_device()]
result["warnings"] = [str(w.message) for w in caught]
"""
    r = run_snippet(code, env={var: "1"}, backend=backend)
    assert r["values"] == [1, 1, 0]
    prefix = torchtpu_facts.section("device_module")["internal_warning_prefix"]
    assert r["warnings"] == [
        f"{prefix}device_count is internal to TorchTPU and may change or be removed without "
        "notice. Use torch.accelerator.device_count instead.",
        f"{prefix}current_device is internal to TorchTPU and may change or be removed without "
        "notice. Use torch.accelerator.current_device_index instead.",
    ]


ONE_DEVICE = (
    OUTCOME
    + """
result["count"] = torch.accelerator.device_count()
result["tpu"] = [str(torch.ones(1, device="tpu").device), str(torch.ones(1).to("tpu:0").device)]
result["other"] = [
    outcome(lambda: torch.ones(2, device="tpu:1")),
    outcome(lambda: torch.ones(2).to(torch.device("tpu", 1))),
    outcome(lambda: nn.Linear(2, 2).to("tpu:1")),
]
result["switch"] = [outcome(lambda: torch.accelerator.set_device_index(1)),
                    outcome(lambda: torch.accelerator.set_device_index(0))]
def in_block():
    with torch.accelerator.device_index(1):
        pass
result["block"] = outcome(in_block)
"""
)


def test_a_tpu_process_sees_one_device_and_cannot_switch(backend: str) -> None:
    r = run_snippet(ONE_DEVICE, devices=4, backend=backend)  # a host of 4 devices
    assert r["count"] == 1
    assert r["tpu"] == ["tpu:0", "tpu:0"]
    for kind, message in r["other"]:
        assert kind == "RuntimeError"
        assert message.startswith("tpu error: invalid device ordinal 1 (a TorchTPU process")
    bound = (
        "Cannot set TPU device to index 1, current process is bound to device index 0. "
        "Changing the active TPU device within a process is not supported."
    )
    assert r["switch"] == [["ValueError", bound], ["ok", "None"]]
    assert r["block"] == ["ValueError", bound]


def test_neuron_keeps_every_device_of_the_host(backend: str) -> None:
    code = "result['r'] = [torch.accelerator.device_count(), str(torch.ones(1, device='neuron:1'))]"
    r = run_snippet(code, name="neuron", devices=2, backend=backend)["r"]
    assert r == [2, "tensor([1.], device='neuron:1')"]


PROCESS_GROUP = (
    OUTCOME
    + """
import torch.distributed as dist
dist.init_process_group(BACKEND, init_method=INIT, rank=0, world_size=1)
x = torch.ones(2, device="tpu")
dist.all_reduce(x)
result["tpu"] = str(x.device)
result["cpu"] = [outcome(lambda: dist.all_reduce(torch.ones(2))),
                 outcome(lambda: dist.broadcast(torch.ones(2), src=0))]
dist.destroy_process_group()
"""
)


@pytest.mark.parametrize("name", torchtpu_facts.section("distributed")["backends"])
def test_tpu_process_group_takes_tpu_tensors_only(backend: str, name: str, tmp_path: Path) -> None:
    code = f"BACKEND, INIT = {name!r}, {'file://' + str(tmp_path / 'store')!r}\n" + PROCESS_GROUP
    r = run_snippet(code, backend=backend)
    assert r["tpu"] == "tpu:0"
    refused = ["RuntimeError", "No backend type associated with device type cpu"]
    assert r["cpu"] == [refused, refused]


FORK = """
import multiprocessing as mp
def child(q):
    try:
        torch.ones(2, device="tpu")
        q.put("ok")
    except Exception as e:
        q.put(f"{type(e).__name__}: {e}")
def run(method):
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    out = q.get()
    p.join()
    return out
result["fork_before_use"] = run("fork")
torch.ones(1, device="tpu")
result["fork_after_use"] = run("fork")
result["parent"] = [torch.tpu._is_in_bad_fork(), str(torch.ones(1, device="tpu").device)]
"""


def test_a_forked_child_of_a_process_that_used_the_device_is_refused(backend: str) -> None:
    r = run_snippet(FORK, backend=backend)
    error = torchtpu_facts.section("distributed")["fork_error"]
    assert r["fork_before_use"] == "ok"
    assert r["fork_after_use"] == f"RuntimeError: {error}"
    assert r["parent"] == [False, "tpu:0"]


SETTINGS = (
    OUTCOME
    + """
t = torch.tpu
result["members"] = [m.name for m in t.EagerMode]
result["read"] = [t.eager_mode.name, t.allow_excess_precision]
t.eager_mode = t.EagerMode.DEFER_AND_FUSE
t.allow_excess_precision = True
result["assigned"] = [t.eager_mode.name, t.allow_excess_precision]
with t.set_eager_mode(t.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
    result["inside"] = t.eager_mode.name
result["after"] = t.eager_mode.name
result["not_callable"] = [callable(t.eager_mode), callable(t.allow_excess_precision)]
"""
)


def test_settings_have_torchtpu_shapes(backend: str) -> None:
    r = run_snippet(SETTINGS, backend=backend)
    assert r["members"] == [
        "DEFER_AND_FUSE",
        "DEFER_NEVER",
        "DEFER_NEVER_AND_LAUNCH_BLOCKING",
        "_INTERNAL_COMPILE_FX_GRAPH",
    ]
    assert r["read"] == ["DEFER_NEVER", False]
    assert r["assigned"] == ["DEFER_AND_FUSE", True]
    assert r["inside"] == "DEFER_NEVER_AND_LAUNCH_BLOCKING"
    assert r["after"] == "DEFER_AND_FUSE"
    assert r["not_callable"] == [False, False]
    assert set(torchtpu_facts.public_properties()) == {"eager_mode", "allow_excess_precision"}


EVENTS = (
    OUTCOME
    + """
E = torch.tpu.Event
def timed(start_timing, end_timing, record):
    a, b = E(enable_timing=start_timing), E(enable_timing=end_timing)
    if record:
        a.record(); b.record()
    return outcome(lambda: a.elapsed_time(b) >= 0.0)
result["r"] = [timed(True, True, True), timed(False, True, True), timed(True, False, True),
               timed(True, True, False)]
"""
)


def test_event_elapsed_time_needs_timing_enabled_recorded_events(backend: str) -> None:
    r = run_snippet(EVENTS, backend=backend)["r"]
    untimed = ["RuntimeError", "Both events must be created with argument 'enable_timing=True'."]
    unrecorded = ["RuntimeError", "Both events must be recorded before calculating elapsed time."]
    assert r == [["ok", "True"], untimed, untimed, unrecorded]


COMPLETED = (
    OUTCOME
    + """
E = torch.tpu.Event
never, start, end = E(), E(enable_timing=True), E(enable_timing=True)
result["unrecorded"] = [outcome(never.query), outcome(never.synchronize)]
start.record()
torch.ones(4, device="tpu").sum()
end.record()
result["recorded"] = [outcome(end.query), outcome(end.synchronize),
                      outcome(lambda: start.elapsed_time(end) >= 0.0)]
"""
)


def test_event_query_and_synchronize_see_a_completed_event(backend: str) -> None:
    # TpuEvent (torch_tpu/_internal/stream/streams.py): synchronize() waits for the work
    # record() captured and returns at once when never recorded; query() says whether that
    # work completed. On the emulator it has when record() returns, so both answer at once,
    # on either backend, and elapsed_time follows, as TpuEvent's docstring shows.
    r = run_snippet(COMPLETED, backend=backend)
    assert r["unrecorded"] == [["ok", "True"], ["ok", "None"]]
    assert r["recorded"] == [["ok", "True"], ["ok", "None"], ["ok", "True"]]


PINNING = """
from torch.utils.data import DataLoader, TensorDataset
x = torch.arange(6.0)
p = x.pin_memory()
loader = DataLoader(TensorDataset(torch.arange(12.0).view(6, 2)), batch_size=3, pin_memory=True)
batches = list(loader)
result["r"] = [p.is_pinned(), p.equal(x), [b.is_pinned() for (b,) in batches],
               str(batches[0][0].to("tpu", non_blocking=True).device)]
"""


def test_pinning_works_with_tpu_current(backend: str) -> None:
    assert run_snippet(PINNING, backend=backend)["r"] == [True, True, [True, True], "tpu:0"]
