"""The run harness: a step budget that stops programs cleanly, loss capture, output
summaries for inference, error classification, limits. Mode "plain" (no device
activation) keeps these tests independent of the emulator and the shim."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from torchport.sandbox.harness import (
    STANDALONE,
    Distributed,
    RunError,
    RunSpec,
    run,
    torchrun_parts,
)

TRAIN = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 4), torch.randn(32, 1)
for step in range(1000):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("finished all steps")
"""


def _program(tmp_path: Path, text: str, name: str = "main.py") -> Path:
    root = tmp_path / "prog"
    root.mkdir(exist_ok=True)
    (root / name).write_text(textwrap.dedent(text))
    return root


def _run(root: Path, *command: str, **spec) -> object:
    spec.setdefault("isolation", "process")
    return run(RunSpec(root=root, command=["python", *command], timeout_s=120, **spec))


@pytest.mark.slow
def test_the_step_budget_stops_training_cleanly_and_losses_are_captured(tmp_path):
    result = _run(_program(tmp_path, TRAIN), "main.py", steps=5)
    assert result.status == "ok", result.stderr_tail
    assert result.steps == 5 and len(result.losses) == 5
    assert result.losses[-1] < result.losses[0]
    assert "budget reached" in result.stopped
    assert "finished all steps" not in result.stdout_tail


@pytest.mark.slow
def test_a_stop_at_the_budget_ends_an_executor_left_running(tmp_path):
    """A ThreadPoolExecutor never shut down (its idle worker is a non-daemon thread) ends
    as at a normal exit; joining the threads before threading's exit hooks waited on it
    until the time limit."""
    program = TRAIN.replace(
        "torch.manual_seed(0)",
        "from concurrent.futures import ThreadPoolExecutor\n"
        "pool = ThreadPoolExecutor(max_workers=1)\n"
        "pool.submit(print, 'warm')\n"
        "torch.manual_seed(0)",
    )
    spec = RunSpec(
        root=_program(tmp_path, program), command=["python", "main.py"], timeout_s=120,
        isolation="process", steps=3,
    )  # fmt: skip
    result = run(spec)
    assert result.status == "ok" and result.steps == 3, result.stderr_tail
    # it ended by itself: a hung teardown lasts until the run's time limit ends it
    assert result.elapsed_s < spec.timeout_s - 10, result.phases


@pytest.mark.slow
def test_progress_reports_every_step_while_the_program_runs(tmp_path):
    import threading

    seen: list[tuple[dict, str]] = []
    slow = TRAIN.replace("    opt.step()\n", "    opt.step()\n    __import__('time').sleep(0.3)\n")

    def report(event: dict) -> None:
        seen.append((event, threading.current_thread().name))

    result = _run(_program(tmp_path, slow), "main.py", steps=4, progress=report)
    assert result.status == "ok", result.stderr_tail
    assert [e["step"] for e, _ in seen] == [1, 2, 3, 4]
    assert [e["loss"] for e, _ in seen] == result.losses
    # live: at least one step arrived from the watcher thread, before the run ended
    assert any(name != threading.main_thread().name for _, name in seen)


@pytest.mark.slow
def test_same_seed_same_losses_and_the_program_dir_is_not_touched(tmp_path):
    root = _program(
        tmp_path, TRAIN.replace("torch.manual_seed(0)\n", "") + "open('out.txt', 'w').write('x')\n"
    )
    first = _run(root, "main.py", steps=3, seed=7)
    second = _run(root, "main.py", steps=3, seed=7)
    assert first.losses == second.losses
    assert not (root / "out.txt").exists()  # runs happen in a scratch copy


@pytest.mark.slow
def test_a_training_program_reaches_its_steps_past_transforms_losses_and_two_models(tmp_path):
    """A GAN step calls two models before its first optimizer step, and an augmentation and
    a loss are Modules too: with a forward budget as small as the step budget, the run
    still ends on optimizer steps (losses compared), not on forward calls."""
    root = _program(
        tmp_path,
        """\
        import torch
        torch.manual_seed(0)
        aug = torch.nn.Dropout(0.0)  # a transform: a Module without weights
        g, d = torch.nn.Linear(2, 4), torch.nn.Linear(4, 1)
        crit = torch.nn.MSELoss()
        opt = torch.optim.SGD([*g.parameters(), *d.parameters()], lr=0.1)
        for _ in range(100):
            fake = g(aug(torch.randn(8, 2)))
            loss = crit(d(fake), torch.ones(8, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        """,
    )
    result = _run(root, "main.py", steps=2, forwards=2)
    assert result.status == "ok" and result.steps == 2, (result.stopped, result.error)
    assert len(result.losses) == 2 and "optimizer steps" in (result.stopped or "")


def test_inference_programs_report_output_summaries(tmp_path):
    root = _program(
        tmp_path,
        """\
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        with torch.no_grad():
            for _ in range(100):
                out = model(torch.ones(2, 4))
        """,
    )
    result = _run(root, "main.py", forwards=3)
    assert result.status == "ok" and result.forwards == 3 and result.steps == 0
    assert result.outputs[0]["shape"] == [2, 8]


def test_errors_are_classified_with_the_users_frame(tmp_path):
    root = _program(
        tmp_path,
        """\
        import torch

        def build():
            return torch.zeros(2).cuda()

        build()
        """,
    )
    result = _run(root, "main.py")
    assert result.status == "failed"
    assert result.error["type"] in ("AssertionError", "RuntimeError")
    assert result.error["frame"]["function"] == "build"
    assert result.error["frame"]["line"] == 4


@pytest.mark.slow
def test_exit_codes_and_modules(tmp_path):
    root = _program(tmp_path, "import sys\nsys.exit(3)\n")
    assert _run(root, "main.py").exit_code == 3
    pkg = tmp_path / "prog" / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint('module', sys.argv[1:])\n")
    result = _run(tmp_path / "prog", "-m", "pkg", "a")
    assert result.status == "ok" and "module ['a']" in result.stdout_tail


def test_a_sleeping_program_is_stopped_at_the_time_limit(tmp_path):
    root = _program(tmp_path, "import time\ntime.sleep(60)\n")
    result = run(
        RunSpec(root=root, command=["python", "main.py"], timeout_s=3, isolation="process")
    )
    assert result.status == "timeout" and result.elapsed_s < 30


def test_bad_commands_are_refused(tmp_path):
    root = _program(tmp_path, "pass\n")
    with pytest.raises(RunError, match="only python programs"):
        run(RunSpec(root=root, command=["bash", "x.sh"]))
    with pytest.raises(RunError, match="unknown sandbox backend"):
        run(RunSpec(root=root, command=["python", "main.py"], isolation="chroot"))
    with pytest.raises(RunError, match="unknown mode"):
        run(RunSpec(root=root, command=["python", "main.py"], mode="gpu"))


MNIST = """\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
train = datasets.MNIST("data", train=True, download=True, transform=tf)
loader = DataLoader(train, batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    for x, y in loader:
        assert x.shape == (32, 1, 28, 28) and x.dtype == torch.float32, x.shape
        assert y.dtype == torch.int64
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_torchvision_datasets_are_synthetic_and_recorded(tmp_path):
    result = _run(_program(tmp_path, MNIST), "main.py", steps=8)
    assert result.status == "ok", result.stderr_tail
    assert result.steps == 8 and result.losses[-1] < result.losses[0]
    assert result.synthetic_data == [
        {"library": "torchvision", "dataset": "MNIST", "size": 512, "split": "train"}
    ]


@pytest.mark.slow
def test_hf_load_dataset_text_is_synthetic(tmp_path):
    root = _program(
        tmp_path,
        """\
        import torch
        from datasets import load_dataset

        imdb = load_dataset("imdb")
        train = imdb["train"].shuffle(seed=0)
        assert set(train.column_names) == {"text", "label"}
        assert isinstance(train[0]["text"], str) and train[0]["label"] in (0, 1)
        vocab = {}

        def encode(batch):
            words = [t.split()[:16] for t in batch["text"]]
            ids = [[vocab.setdefault(w, len(vocab)) % 512 for w in row] for row in words]
            return {"ids": [row + [0] * (16 - len(row)) for row in ids]}

        train = train.map(encode, batched=True, remove_columns=["text"])
        train.set_format("torch", columns=["ids", "label"])
        loader = torch.utils.data.DataLoader(train, batch_size=16)
        model = torch.nn.EmbeddingBag(512, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch["ids"]), batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
        """,
    )
    result = _run(root, "main.py", steps=4)
    assert result.status == "ok", result.stderr_tail
    assert result.steps == 4
    served = {"library": "datasets", "dataset": "imdb", "size": 512, "split": "train"}
    columns = {"columns": ["text", "label"], "columns_from": "the dataset's features"}
    assert {**served, **columns} in result.synthetic_data


def test_torchrun_commands_are_taken_apart():
    parts = torchrun_parts(["torchrun", "--nproc_per_node", "2", "train.py", "--lr", "1"])
    assert parts == Distributed(
        [*STANDALONE, "--nproc_per_node", "2"], ["train.py", "--lr", "1"], 2
    )
    parts = torchrun_parts(
        ["python", "-m", "torch.distributed.run", "--master_port=1234", "-m", "pkg.train", "-x"]
    )
    assert parts == Distributed(["--master_port=1234"], ["-m", "pkg.train", "-x"], 1)
    assert torchrun_parts(["python", "-m", "pkg"]) is None
    assert torchrun_parts(["python", "train.py"]) is None


DDP = """\
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(rank)
x, y = torch.randn(32, 4, generator=gen), torch.randn(32, 1, generator=gen)
for step in range(1000):
    if step == 2 and "--fail" in sys.argv and rank == 1:
        raise ValueError("rank one gave up")
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_torchrun_ddp_runs_every_rank_through_the_launcher(tmp_path):
    root = _program(tmp_path, DDP)
    command = ["torchrun", "--nproc_per_node", "2", "main.py"]
    spec = RunSpec(root=root, command=command, steps=3, timeout_s=180, isolation="process")
    result = run(spec)
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 3 and len(result.losses) == 3
    assert [r["rank"] for r in result.ranks] == [0, 1]
    assert all(r["status"] == "ok" and r["steps"] == 3 for r in result.ranks)


@pytest.mark.slow
def test_a_failing_rank_fails_the_torchrun_run(tmp_path):
    root = _program(tmp_path, DDP)
    command = ["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "main.py", "--fail"]
    result = run(RunSpec(root=root, command=command, timeout_s=180, isolation="process"))
    assert result.status == "failed"
    assert result.error["rank"] == 1 and result.error["type"] == "ValueError"
    assert result.error["frame"]["line"] == 14


def test_installed_libraries_get_their_dataset_entry_points_patched(tmp_path, monkeypatch):
    from torchport.sandbox import synthetic

    (tmp_path / "torchvision" / "datasets").mkdir(parents=True)
    (tmp_path / "torchvision" / "__init__.py").write_text("from . import datasets\nREAL = 1\n")
    (tmp_path / "torchvision" / "datasets" / "__init__.py").write_text(
        "class MNIST:\n    def __init__(self, *a, **k):\n        raise OSError('network')\n"
    )
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "__init__.py").write_text(
        "class Dataset(dict):\n"
        "    @classmethod\n"
        "    def from_dict(cls, cols):\n        return cls(cols)\n"
        "class DatasetDict(dict):\n    pass\n"
        "def load_dataset(*a, **k):\n    raise OSError('network')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("torchvision", "torchvision.datasets", "datasets"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    synthetic.install()
    try:
        import datasets
        import torchvision

        assert torchvision.REAL == 1  # the real package, not the stand-in
        image, label = torchvision.datasets.MNIST("data", download=True)[0]
        # a PIL image where Pillow is installed (as torchvision gives), else a tensor
        dims = tuple(image.shape) if hasattr(image, "shape") else image.size[::-1]
        assert dims == (28, 28) and isinstance(label, int)
        split = datasets.load_dataset("imdb", split="test")
        assert type(split) is datasets.Dataset and len(split["text"]) == 128
    finally:
        synthetic.uninstall()
        for name in ("torchvision", "torchvision.datasets", "datasets"):
            sys.modules.pop(name, None)


@pytest.mark.slow
def test_a_notebook_runs_cell_by_cell_with_magics_skipped(tmp_path):
    import json

    def cell(*lines):
        return {"cell_type": "code", "metadata": {}, "outputs": [], "source": list(lines)}

    notebook = {
        "cells": [
            cell("!nvidia-smi\n", "import torch\n", "%matplotlib inline\n"),
            {"cell_type": "markdown", "metadata": {}, "source": ["# train\n"]},
            cell("%%timeit\n", "this is not python\n"),
            cell(
                "model = torch.nn.Linear(2, 1)\n",
                "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
                "for _ in range(5):\n",
                "    loss = model(torch.ones(4, 2)).pow(2).mean()\n",
                "    opt.zero_grad(); loss.backward(); opt.step()\n",
            ),
            cell("raise ValueError('after the budget: never reached')\n"),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "explore.ipynb").write_text(json.dumps(notebook))
    result = run(
        RunSpec(tmp_path, ["python", "explore.ipynb"], steps=3, timeout_s=120, isolation="process")
    )
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 3 and len(result.losses) == 3
    (tmp_path / "explore.ipynb").write_text(
        json.dumps({**notebook, "cells": [cell("import torch\n", "x = 1 / 0\n")]})
    )
    failed = run(RunSpec(tmp_path, ["python", "explore.ipynb"], timeout_s=120, isolation="process"))
    assert failed.error["type"] == "ZeroDivisionError"
    assert failed.error["frame"]["file"].endswith("explore.ipynb#cell1")
    assert failed.error["frame"]["line"] == 2


@pytest.mark.slow
def test_the_loss_recorded_under_a_grad_scaler_is_the_programs_loss(tmp_path):
    """backward() sees loss x scale; the reference (scaler disabled) sees the loss."""
    program = textwrap.dedent(
        """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", enabled=ENABLED)
        for _ in range(5):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        """
    )
    losses = {}
    for enabled in (True, False):
        (tmp_path / "train.py").write_text(program.replace("ENABLED", str(enabled)))
        result = run(
            RunSpec(tmp_path, ["python", "train.py"], steps=3, timeout_s=120, isolation="process")
        )
        assert result.status == "ok", result.stderr_tail
        losses[enabled] = result.losses
    assert len(losses[True]) == 3
    assert losses[True] == pytest.approx(losses[False], rel=1e-6)
    assert losses[True][0] < 100  # not 65536 x the loss
