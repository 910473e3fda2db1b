"""The CUDA→CPU reference shim: unit tests of the mapping, and corpus programs run unmodified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torchport.sandbox import shim

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
PYTHON = sys.executable
ACCEPTANCE = [
    "mnist_basic/train.py",
    "amp_gradscaler/train.py",
    "cuda_events_bench/bench.py",
    "memory_report/report.py",
    "cudnn_flags/train.py",
    "checkpoint_gpu/train.py",
    "inference_only/predict.py",
    "rng_state/train.py",
    "host_sync_loop/train.py",
    "legacy_tensor_types/train.py",
]


def _apis() -> set[str]:
    return {entry["api"] for entry in shim.intercepted()}


# --- devices ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device", ["cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)]
)
def test_factories_map_cuda_to_cpu(active, device):
    assert torch.randn(2, device=device).device.type == "cpu"
    assert torch.zeros(3, device=device).device.type == "cpu"
    assert torch.tensor([1.0], device=device).device.type == "cpu"
    assert torch.zeros_like(torch.ones(2), device=device).device.type == "cpu"
    assert torch.ones(2).new_zeros(3, device=device).device.type == "cpu"


def test_tensor_moves(active):
    x = torch.ones(2)
    for moved in (
        x.to("cuda"),
        x.to(torch.device("cuda", 0)),
        x.to(0),
        x.to(device="cuda:0"),
        x.cuda(),
        x.cuda(0),
        x.to("cuda", torch.float64),
    ):
        assert moved.device.type == "cpu"
    assert x.to("cuda", dtype=torch.float64).dtype == torch.float64
    assert x.pin_memory() is x
    assert x.type("torch.cuda.LongTensor").dtype == torch.int64
    assert isinstance(torch.ones(1).type(torch.cuda.FloatTensor), torch.cuda.FloatTensor)
    assert {"Tensor.to(cuda)", "Tensor.cuda", "Tensor.pin_memory"} <= _apis()


def test_module_moves(active):
    for move in (
        lambda m: m.cuda(),
        lambda m: m.to("cuda:0"),
        lambda m: m.to(torch.device("cuda")),
    ):
        model = move(nn.Linear(2, 2))
        assert next(model.parameters()).device.type == "cpu"
    assert {"Module.cuda", "Module.to(cuda)"} <= _apis()


def test_torch_load_map_location(active, tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    for location in ("cuda", "cuda:0", torch.device("cuda"), {"cuda:1": "cuda:0"}, None):
        assert torch.load(path, map_location=location)["w"].device.type == "cpu"
    assert torch.load(path, map_location=lambda s, loc: s.cuda())["w"].tolist() == [0, 1, 2]


def test_generator_and_dataloader(active):
    g = torch.Generator(device="cuda")
    assert isinstance(g, torch.Generator) and g.device.type == "cpu"
    g.manual_seed(5)
    a = torch.randn(3, generator=g, device="cuda")
    assert torch.equal(a, torch.randn(3, generator=torch.Generator().manual_seed(5)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2, pin_memory=True)
        assert [b[0].tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0]]
    assert {"torch.Generator(device=cuda)", "DataLoader(pin_memory=True)"} <= _apis()


# --- torch.cuda -------------------------------------------------------------------------


def test_torch_cuda_answers_like_two_gpus_by_default(active):
    cuda = torch.cuda
    assert cuda.is_available() and cuda.device_count() == 2 and cuda.current_device() == 0
    cuda.set_device(1)  # a rank selects its GPU; tensors still land on the CPU
    assert cuda.current_device() == 1 and torch.ones(1).cuda(1).device.type == "cpu"
    cuda.set_device("cuda:0")
    assert cuda.current_device() == 0
    assert cuda.get_device_name(0) == "torchport reference (CPU)"
    assert cuda.get_device_capability() == (8, 0)
    props = cuda.get_device_properties(0)
    assert (props.major, props.minor) == (8, 0) and props.total_memory > 0
    assert cuda.is_bf16_supported()
    cuda.synchronize()
    assert cuda.memory_allocated() == 0 and cuda.max_memory_reserved() == 0
    assert cuda.memory_stats() == {}
    cuda.empty_cache()
    cuda.reset_peak_memory_stats()
    free, total = cuda.mem_get_info()
    assert 0 < free <= total
    cuda.nvtx.range_push("x")
    cuda.nvtx.range_pop()
    with cuda.nvtx.range("y"), cuda.stream(cuda.Stream()), cuda.device(0):
        cuda.current_stream().synchronize()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True
    assert torch.backends.cudnn.benchmark and torch.backends.cudnn.version() > 0
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    assert {"torch.cuda.is_available", "torch.cuda.synchronize"} <= _apis()


def test_cuda_event_times_with_perf_counter(active):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    assert 15.0 <= start.elapsed_time(end) < 2000.0


def test_cuda_seeding_drives_the_cpu_generator(active):
    torch.cuda.manual_seed_all(3)
    a = torch.randn(4, device="cuda")
    torch.manual_seed(3)
    assert torch.equal(a, torch.randn(4))
    state = torch.cuda.get_rng_state()
    b = torch.rand(2, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(b, torch.rand(2))


def test_internal_torch_calls_are_not_recorded(active):
    torch.manual_seed(0)  # calls torch.cuda.manual_seed_all internally
    assert "torch.cuda.manual_seed_all" not in _apis()


def test_records_user_call_site(active):
    torch.cuda.synchronize()
    line = sys._getframe().f_lineno - 1
    entry = next(e for e in shim.intercepted() if e["api"] == "torch.cuda.synchronize")
    assert (entry["file"], entry["line"], entry["count"]) == (__file__, line, 1)


# --- amp ----------------------------------------------------------------------------------


def test_autocast_is_fp32_and_silent(active):
    a, b = torch.randn(4, 4, device="cuda"), torch.randn(4, 4, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast("cuda", dtype=torch.float16):
            assert (a @ b).dtype == torch.float32
        with torch.amp.autocast(device_type="cuda"):
            assert (a @ b).dtype == torch.float32
        with torch.cuda.amp.autocast():
            assert (a @ b).dtype == torch.float32
    assert isinstance(torch.cuda.amp.autocast(), torch.autocast)


@pytest.mark.parametrize(
    "make", [lambda: torch.cuda.amp.GradScaler(), lambda: torch.amp.GradScaler("cuda")]
)
def test_grad_scaler_disabled_but_working(active, make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaler = make()
    assert isinstance(scaler, torch.amp.GradScaler) and not scaler.is_enabled()
    model = nn.Linear(3, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    loss = model(torch.ones(2, 3, device="cuda")).sum()
    assert scaler.scale(loss) is loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1.0
    assert not torch.equal(before, model.weight)


# --- distributed ----------------------------------------------------------------------


def test_nccl_falls_back_to_gloo(active, tmp_path):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch built without distributed")
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        assert dist.get_backend() == "gloo"
        t = torch.ones(2, device="cuda")
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0]
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(2, 2).cuda(), device_ids=[0])
        assert ddp(torch.ones(1, 2, device="cuda")).shape == (1, 2)
    finally:
        dist.destroy_process_group()


FSDP_PROGRAM = """\
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
dist.init_process_group("nccl")
device = torch.device(torch.cuda.current_device())  # a CUDA machine: cuda:0
model = FSDP(
    torch.nn.Linear(4, 2).cuda(), device_id=torch.cuda.current_device(), sync_module_states=True
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(8, 4).to(device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("STEP", step, device, flush=True)
"""


def test_a_bare_device_index_is_the_cuda_device_it_names_on_a_cuda_machine(active):
    assert torch.device(0) == torch.device("cuda", 0)
    assert torch.device(torch.cuda.current_device()).type == "cuda"
    assert torch.device("cpu", 0) == torch.device("cpu", 0)  # only a bare index is CUDA's


@pytest.mark.slow
def test_fsdp_on_the_current_cuda_device_trains_on_the_reference(tmp_path):
    import socket

    from torchport.sandbox.harness import RunSpec, run

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    (tmp_path / "main.py").write_text(FSDP_PROGRAM.replace('os.environ["PORT"]', repr(port)))
    result = run(RunSpec(root=tmp_path, command=["python", "main.py"], mode="reference"))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "STEP 1 cuda:0" in result.stdout_tail


# --- activate / deactivate ------------------------------------------------------------


def test_deactivate_restores_torch():
    shim.activate()
    shim.deactivate()
    assert not shim.is_active()
    assert not torch.cuda.is_available()
    assert torch.Generator is torch._C.Generator
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1, device="cuda")


# --- launcher -------------------------------------------------------------------------


def _run_shim(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 120):
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [PYTHON, "-m", "torchport.sandbox.shim", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_launcher_runs_script_like_python(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "prog.py").write_text(
        textwrap.dedent(
            """
            import sys, torch, helper
            x = torch.ones(2, device="cuda")
            torch.cuda.synchronize()
            print(__name__, sys.argv[1:], helper.VALUE, x.device.type)
            """
        )
    )
    report = tmp_path / "report.json"
    result = _run_shim(["prog.py", "--flag", "v"], tmp_path, {"TORCHPORT_SHIM_REPORT": str(report)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "__main__ ['--flag', 'v'] 7 cpu\n"
    entries = json.loads(report.read_text())["intercepted"]
    sites = {(e["api"], Path(e["file"]).name, e["line"]) for e in entries}
    assert ("torch.ones(device=cuda)", "prog.py", 3) in sites
    assert ("torch.cuda.synchronize", "prog.py", 4) in sites


def test_launcher_runs_module_and_propagates_exit(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import sys, torch\nprint(__name__, sys.argv[1:], torch.cuda.device_count())\nsys.exit(3)\n"
    )
    report = tmp_path / "r.json"
    result = _run_shim(["-m", "pkg", "a"], tmp_path, {"TORCHPORT_SHIM_REPORT": str(report)})
    assert (result.returncode, result.stdout) == (3, "__main__ ['a'] 2\n")
    assert json.loads(report.read_text())["intercepted"][0]["api"] == "torch.cuda.device_count"


# --- acceptance: corpus programs, unmodified ----------------------------------------------


@pytest.fixture(scope="module")
def corpus_runs(tmp_path_factory):
    """Every acceptance program, each in its own subprocess, run concurrently to save time.
    Their temporary files (checkpoint_gpu's ckpt_gpu_*) go under the test's folder."""
    scratch = tmp_path_factory.mktemp("corpus-tmp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(scratch)}
    procs = {}
    for rel in ACCEPTANCE:
        script = CORPUS / rel
        procs[rel] = subprocess.Popen(
            [PYTHON, "-m", "torchport.sandbox.shim", script.name],
            cwd=script.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results = {}
    for rel, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results[rel] = (proc.returncode, out, err)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("rel", ACCEPTANCE)
def test_corpus_program_runs_unmodified(corpus_runs, rel):
    code, out, err = corpus_runs[rel]
    assert code == 0, err[-3000:]
    assert out.strip()
    assert "CUDA is not available" not in err and "not compiled with CUDA" not in err


@pytest.mark.slow
def test_shimmed_losses_equal_hand_ported_cpu_version(corpus_runs, tmp_path):
    source = (CORPUS / "mnist_basic" / "train.py").read_text()
    ported = tmp_path / "train.py"
    ported.write_text(source.replace("cuda", "cpu"))
    assert "cuda" not in ported.read_text()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cpu = subprocess.run(
        [PYTHON, str(ported)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert cpu.returncode == 0, cpu.stderr
    code, shimmed, _ = corpus_runs["mnist_basic/train.py"]
    assert code == 0
    losses = [line for line in shimmed.splitlines() if "loss" in line]
    assert len(losses) >= 4
    assert shimmed == cpu.stdout


def test_data_parallel_over_the_reference_gpus_trains_like_the_module(active):
    torch.manual_seed(0)
    plain = torch.nn.Linear(4, 1)
    wrapped = torch.nn.DataParallel(torch.nn.Linear(4, 1).cuda())  # device_count() == 2
    wrapped.module.load_state_dict(plain.state_dict())
    x = torch.randn(8, 4)
    assert torch.equal(wrapped(x.cuda()), plain(x))
    assert "torch.nn.DataParallel.forward" in _apis()


@pytest.mark.slow
def test_torch_compile_reduce_overhead_runs_on_the_reference(tmp_path):
    """Inductor asks the CUDA caching allocator about CUDA graphs whenever CUDA is
    available, through a binding a CPU build lacks; the compiled model computes the same."""
    (tmp_path / "prog.py").write_text(
        textwrap.dedent(
            """
            import torch
            torch.manual_seed(0)
            layers = [torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1)]
            model = torch.nn.Sequential(*layers)
            model = model.cuda()
            compiled = torch.compile(model, mode="reduce-overhead")
            x = torch.randn(3, 4).cuda()
            torch.testing.assert_close(compiled(x), model(x))
            print("same")
            """
        )
    )
    result = _run_shim(["prog.py"], tmp_path, timeout=240)
    assert result.returncode == 0 and result.stdout == "same\n", result.stderr[-2000:]
