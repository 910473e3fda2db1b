"""Verdicts never blame the original for a failure torchport's own sandbox, stand-ins,
environment or argument lowering caused (agents.attribution), on real sandboxed pairs of
runs where the pattern can be run here, and on the run results the sandbox reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.agents import attribution
from torchport.agents.verdicts import Reason
from torchport.agents.verifier import RunLimits, judge, policies, verify_tree

FP32 = policies()["fp32"]
_BUDGET = RunLimits(steps=2, timeout_s=120, memory_mb=2048)
_TRAIN = """import torch
device = torch.device("{device}")
model = torch.nn.Linear(4, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4).to(device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _pair(tmp_path: Path, head: str) -> tuple[Path, Path]:
    trees = []
    for name, device in (("original", "cuda"), ("port", "tpu")):
        root = tmp_path / name
        root.mkdir()
        (root / "train.py").write_text(head + _TRAIN.format(device=device))
        trees.append(root)
    return trees[0], trees[1]


@pytest.mark.slow
def test_a_terminal_query_at_import_is_the_sandboxs_not_the_originals(tmp_path: Path) -> None:
    """The sandbox answers ``stty size`` like a terminal (sandbox/terminal.py), but output
    into a pipe has no size: ``os.get_terminal_size()`` of stdout fails as on no terminal."""
    head = "import os\ncolumns, rows = os.get_terminal_size(1)\n"
    original, port = _pair(tmp_path, head)
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", _BUDGET, None)
    assert reference["error"]["type"] == "OSError", reference["error"]
    assert v.verdict == "not-runnable"
    assert "fails here too" not in v.reason
    assert v.reason.startswith("torchport's sandbox (the sandbox has no terminal"), v.reason
    assert (
        "caused this, not the program" in v.reason
        and "(the original failed at train.py:2)" in v.reason
    )
    assert "fallback" in v.next_step and v.attribution["kind"] == "sandbox-fact"


@pytest.mark.slow
def test_a_lowered_argument_the_parser_refuses_is_torchports(tmp_path: Path) -> None:
    """torchport lowers --image-size 224 to 64 for a short run; the program's own check
    refuses it through ``parser.error`` (exit 2) without naming the option, so the sandbox's
    retry with the value as given (sandbox/commandline.py) cannot tell which to withdraw."""
    head = (
        "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--image-size', type=int, default=224)\n"
        "args = parser.parse_args()\n"
        "if args.image_size < 128:\n    parser.error('the model needs at least 128 pixels')\n"
    )
    original, port = _pair(tmp_path, head)
    argv = ["python", "train.py", "--image-size", "224"]
    v, reference = verify_tree(original, port, argv, "tpu", _BUDGET, None)
    assert reference["error"] == {"type": "SystemExit", "message": "2", "frame": None}
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert v.reason.startswith("torchport's lowered argument --image-size 224 -> 64 caused this")
    assert "at least 128 pixels" in v.reason and "--keep-args" in v.next_step


def _failed(error: dict, **extra: object) -> dict:
    return {"status": "failed", "exit_code": 1, "losses": [], "error": error, **extra}


def _ok() -> dict:
    return {"status": "ok", "exit_code": 0, "losses": [1.0, 0.9], "counters": {"ops": 10}}


def test_a_sandbox_that_cannot_start_the_interpreter_is_never_the_originals() -> None:
    """A venv's bin/python that links into a folder the sandbox does not bind: bwrap cannot
    exec it, and the run reports no result."""
    stderr = "bwrap: execvp /home/u/.venv/bin/python: No such file or directory\n"
    error = {"type": "NoResult", "message": "the process ended before torchport could report"}
    reference = _failed({**error, "frame": None}, stderr_tail=stderr)
    v = judge(reference, reference, FP32, "tpu")
    assert v.verdict == "not-runnable"
    assert v.reason.startswith(
        "torchport could not run the original: the sandbox could not start the interpreter: "
        "bwrap: execvp /home/u/.venv/bin/python: No such file or directory; run with another "
        "--isolation"
    ), v.reason
    assert "fails here too" not in v.reason and "NoResult" not in v.reason


def test_a_module_torchport_served_for_an_absent_library_is_named() -> None:
    """A library probes torchvision, finds torchport's stand-in, and imports a submodule the
    stand-in lacks: the failure is the stand-in's, whatever line of the program started it."""
    message = (
        "No module named 'torchvision.transforms.functional'; 'torchvision.transforms' "
        "is not a package"
    )
    frame = {"file": "train.py", "line": 3, "function": "<module>", "code": "import timm"}
    error = {"type": "ModuleNotFoundError", "message": message, "frame": frame}
    served = ["torchvision", "torchvision.datasets", "torchvision.transforms"]
    v = judge(_failed(error, standin_modules=served), _failed(error), FP32, "tpu")
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert v.reason.startswith("torchport's stand-in for torchvision caused this, not the program")
    assert v.reason.endswith("(the original failed at train.py:3)")
    assert "install the real torchvision" in v.next_step


def test_a_frame_in_a_standin_module_at_the_failure_is_named() -> None:
    vision = attribution.SYNTHETIC_DIR + "vision.py"
    frames = [
        {"file": "/w/program/train.py", "line": 9, "function": "<module>", "code": "ds = CIFAR10"},
        {"file": vision, "line": 80, "function": "__init__", "code": "self.root.mkdir()"},
    ]
    error = {"type": "OSError", "message": "boom", "frame": None, "traceback": frames}
    v = judge(_failed(error), _failed(error), FP32, "tpu")
    assert v.reason.startswith(
        "torchport's stand-in for torchvision's datasets and transforms caused this"
    )
    assert "sandbox/synthetic/vision.py:80, __init__" in v.reason


def test_a_standin_dataset_smaller_than_a_batch_is_named() -> None:
    error = {"type": "ZeroDivisionError", "message": "division by zero", "frame": None}
    data = [{"library": "torchvision", "dataset": "CIFAR10", "size": 512, "split": "train"}]
    v = judge(_failed(error, synthetic_data=data), _failed(error), FP32, "tpu")
    assert v.reason.startswith("torchport's stand-in for torchvision CIFAR10 (512 samples)")
    assert v.next_step == "pass a batch size below 512 in --entry"


def test_a_standin_below_the_floor_the_program_checks_is_named() -> None:
    """A library asserts a minimum number of images in the folder the stand-in filled."""
    message = "you should have at least 100 images in your folder. at least 10k recommended"
    frame = {
        "file": "lib.py",
        "line": 9,
        "function": "__init__",
        "code": "assert len(paths) >= 100",
    }
    error = {"type": "AssertionError", "message": message, "frame": frame}
    folder = {"library": "torchport", "dataset": "image folder", "size": 88, "path": "imgs"}
    v = judge(_failed(error, synthetic_data=[folder]), _failed(error), FP32, "tpu")
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert v.reason.startswith(
        "torchport's stand-in for torchport image folder (88 samples) caused this, not the "
        "program: the stand-in holds fewer samples than the run checks for (100)"
    )
    assert "report it to torchport" in v.next_step
    # a stand-in as large as the floor that the run counted short: it missed the files
    big = [{**folder, "size": 160}]
    missed = judge(_failed(error, synthetic_data=big), _failed(error), FP32, "tpu")
    assert "fails here too" not in missed.reason
    assert "the stand-in holds 160, yet the run counted fewer than 100" in missed.reason
    # a floor on something other than the data (a batch size): the program's
    batch = {**error, "message": "your effective batch size should be at least 16 or above"}
    assert (
        judge(_failed(batch, synthetic_data=big), _failed(batch), FP32, "tpu").attribution is None
    )
    # a floor with no stand-in served: the program's own failure
    real = judge(_failed(error), _failed(error), FP32, "tpu")
    assert real.code == Reason.BOTH_FAIL and real.attribution is None


def test_a_column_a_standin_dataset_lacks_is_the_standins() -> None:
    """The program reads ``examples["image"]`` of a Hugging Face dataset the stand-in made
    without that column."""
    read = {
        "file": "train.py",
        "line": 12,
        "function": "tf",
        "code": 'for im in examples["image"]:',
    }
    error = {"type": "KeyError", "message": "'image'", "frame": read}
    data = [
        {"library": "datasets", "dataset": "someone/photos", "size": 512, "split": "train"}
        | {"columns": ["text", "label"]}
    ]
    v = judge(_failed(error, synthetic_data=data), _failed(error, synthetic_data=data), FP32, "tpu")
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert v.reason.startswith(
        "torchport's stand-in for datasets someone/photos (columns: text, label) caused this, "
        "not the program: the run read the column 'image'"
    )
    assert "hf_datasets.toml" in v.next_step and v.attribution["kind"] == "standin"
    # the real library's own message names the column wherever it is raised
    real = {"type": "KeyError", "message": '"Column image not in the dataset. Current columns'}
    v = judge(_failed(real, synthetic_data=data), _ok(), FP32, "tpu")
    assert v.reason.startswith("torchport's stand-in for datasets someone/photos"), v.reason
    # a dataset known offline has the real one's columns: one it lacks, the real one lacks
    known = [{**data[0], "columns_from": "the dataset's features"}]
    assert (
        judge(_failed(error, synthetic_data=known), _failed(error), FP32, "tpu").attribution is None
    )
    # a column the stand-in has, or a KeyError of another dict: the program's own
    has = [{**data[0], "columns": ["image", "label"]}]
    assert (
        judge(_failed(error, synthetic_data=has), _failed(error), FP32, "tpu").attribution is None
    )
    other = {**error, "frame": {**read, "code": "x = options[name]"}}
    assert (
        judge(_failed(other, synthetic_data=data), _failed(other), FP32, "tpu").attribution is None
    )


@pytest.mark.slow
def test_a_column_the_hf_standin_could_not_know_is_named_in_a_sandboxed_pair(tmp_path) -> None:
    """A Hub dataset torchport does not know, read by a column outside the vocabularies it
    guesses from: the stand-in lacks it, and the verdict says so instead of blaming the
    original (the real library is absent here: the stand-in module serves it)."""
    head = (
        "from datasets import load_dataset\n"
        'rows = load_dataset("someone/recordings", split="train")\n'
        'clip = rows[0]["waveform"]\n'
    )
    original, port = _pair(tmp_path, head)
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", _BUDGET, None)
    assert reference["error"]["type"] == "KeyError", reference["error"]
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert v.reason.startswith(
        "torchport's stand-in for datasets someone/recordings (columns: text, label) caused this"
    ), v.reason


def test_a_package_only_torchports_environment_has_is_not_the_ports_failure() -> None:
    """The original ran (torchport's environment has bitsandbytes for it); a library of the
    port probed for it and the target run refuses it. The program never imports it."""
    message = (
        "No module named 'bitsandbytes' (torchport: not importable in a run on the emulated "
        "tpu: bitsandbytes' kernels are CUDA-first, with none for the target; torchport has "
        "it only to run the original's code on the reference)"
    )
    error = {"type": "ModuleNotFoundError", "message": message, "frame": None}
    v = judge(_ok(), _failed(error), FP32, "tpu", imports=frozenset({"torch", "diffusers"}))
    assert v.verdict == "not-runnable"
    assert v.reason.startswith("torchport's own environment (it has bitsandbytes")
    assert "the program never imports bitsandbytes" in v.reason
    # a program that imports it itself: the port's to drop, its failure
    mine = judge(_ok(), _failed(error), FP32, "tpu", imports=frozenset({"bitsandbytes"}))
    assert mine.verdict == "failed" and mine.attribution is None


def test_a_failure_nothing_of_torchports_touched_is_still_the_originals() -> None:
    error = {"type": "KeyError", "message": "'lr'", "frame": {"file": "train.py", "line": 4}}
    v = judge(_failed(error), _failed(error), FP32, "tpu")
    assert v.code == Reason.BOTH_FAIL and v.reason.endswith(": train.py:4: KeyError: 'lr'")
    assert v.attribution is None and v.next_step  # the diagnosis's hint


def test_a_reason_is_one_line_with_the_exception_and_the_programs_frame() -> None:
    """The message's first line only; the whole message and traceback stay in the JSON."""
    message = "shapes do not match\n  expected (4, 2)\n  got (4, 3)"
    frame = {"file": "model.py", "line": 12, "function": "forward", "code": "x @ w"}
    error = {"type": "RuntimeError", "message": message, "frame": frame}
    v = judge(_failed(error), _failed(error), FP32, "tpu")
    assert v.reason == "the original fails here too: model.py:12: RuntimeError: shapes do not match"
    assert "\n" not in v.reason and v.reference["error"]["message"] == message
    port = judge(_ok(), _failed(error), FP32, "tpu")
    assert port.reason == "failed: model.py:12: RuntimeError: shapes do not match"


def test_every_verdict_short_of_verified_has_a_next_step() -> None:
    timeout = {"status": "timeout", "exit_code": None, "losses": [], "error": None}
    timeout["error"] = {"type": "timeout", "message": "the run was stopped: timeout"}
    cpu = {**_ok(), "counters": {"ops": 0}}
    cases = {
        "timeout": judge(_ok(), timeout, FP32, "tpu"),
        "on the cpu": judge(_ok(), cpu, FP32, "tpu"),
        "no original": judge(None, _ok(), FP32, "tpu"),
        "nothing compared": judge({**_ok(), "losses": []}, {**_ok(), "losses": []}, FP32, "tpu"),
        "mismatch": judge(_ok(), {**_ok(), "losses": [1.0, 5.0]}, FP32, "tpu"),
    }
    for name, v in cases.items():
        assert v.verdict != "verified" and v.next_step, name
    assert "--timeout" in cases["timeout"].next_step and "--steps" in cases["timeout"].next_step


def test_imported_names_are_the_programs_own_top_level_imports() -> None:
    texts = ["import os, torch.nn as nn\nfrom diffusers.models import Unet\nfrom . import x\n"]
    assert attribution.imported_names([*texts, "def (:"]) == {"os", "torch", "diffusers"}


@pytest.mark.slow
def test_migrate_prints_the_next_step_and_writes_it_to_verification_md(tmp_path, capsys) -> None:
    """A verdict short of verified tells the user what to do, on the terminal and in the
    report, not only in the JSON: here a data path the program needs and nobody made."""
    from torchport.cli.main import main

    repo = tmp_path / "repo"
    repo.mkdir()
    head = "import torch\ntorch.load('/srv/none/weights.pt')\n"
    (repo / "train.py").write_text(head + _TRAIN.format(device="cuda"))
    out = tmp_path / "out"
    args = ["-t", "tpu", "--llm", "none", "--steps", "2", "--out", str(out), "--exit-zero"]
    code = main(["migrate", str(repo), *args, "--entry", "python train.py"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    step = [line for line in printed.splitlines() if line.startswith("next step: ")]
    assert len(step) == 1 and len(step[0]) > len("next step: ") + 10, printed
    report = (out / "torchport-report" / "verification.md").read_text()
    assert "- next step: " in report and "data" in step[0], step


_LIBRARY = """import torch


def one_hot(target, classes):
    return torch.zeros(target.size(0), classes, device="cuda").scatter_(1, target[:, None], 1.0)
"""


@pytest.mark.slow
def test_a_cuda_default_inside_an_installed_library_is_named_with_its_line(tmp_path: Path) -> None:
    """The port fails in a library's ``device="cuda"`` (as timm 0.3.2's Mixup does): the
    reason names the library's line beside the program's, and the next step says that no
    codemod of the repository reaches it instead of "run the rules' codemods"."""
    head = (
        "import os, sys\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),"
        " 'lib', 'site-packages'))\n"
        "import mixlib\n"
    )
    body = "targets = mixlib.one_hot(torch.tensor([0, 1, 2, 3]), 4)\n"
    original, port = _pair(tmp_path, head)
    for root in (original, port):
        (root / "lib" / "site-packages").mkdir(parents=True)
        (root / "lib" / "site-packages" / "mixlib.py").write_text(_LIBRARY)
        (root / "train.py").write_text((root / "train.py").read_text().replace(
            "for step in range(3):\n", "for step in range(3):\n    " + body
        ))  # fmt: skip
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", _BUDGET, None)
    assert reference["status"] == "ok", reference.get("error")
    assert v.verdict == "failed", v.reason
    assert "train.py:9, in mixlib.py:5: " in v.reason, v.reason
    assert "installed library (mixlib.py:5)" in v.next_step, v.next_step
    assert "codemods" not in v.next_step


def test_library_site_skips_torch_and_stops_at_the_programs_own_frame() -> None:
    frame = {"file": "train.py", "line": 3}
    lib = {"file": "/env/lib/python3.11/site-packages/timm/data/mixup.py", "line": 19}
    torch_frame = {"file": "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py"}
    run = {"error": {"traceback": [frame, lib, torch_frame]}}
    assert attribution.library_site(run) == "timm/data/mixup.py:19"
    run = {"error": {"traceback": [lib, frame, torch_frame]}}
    assert attribution.library_site(run) == ""  # the program's own code is innermost


@pytest.mark.slow
def test_a_download_retried_until_the_timeout_is_the_sandboxs_network(tmp_path: Path) -> None:
    """A program that retries a download offline (yolov5's curl with back-off) runs out of
    time in both runs: the timeout is the sandbox's missing network, not the original's."""
    head = (
        # what curl prints offline; the test itself asks no resolver (no traffic at all)
        "import sys, time\n"
        "for attempt in range(100):\n"
        "    sys.stderr.write('curl: (6) Could not resolve host: github.com\\n')\n"
        "    sys.stderr.flush()\n"
        "    time.sleep(1)\n"
    )
    original, port = _pair(tmp_path, head)
    budget = RunLimits(steps=2, timeout_s=8, memory_mb=2048)
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", budget, None)
    assert reference["status"] == "timeout", reference.get("error")
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason, v.reason
    assert "kept retrying a download" in v.reason and "github.com" in v.reason, v.reason
    assert "locally" in v.next_step


_DOWNLOADER = """import os, urllib.request

def load(name, root):
    url = "https://weights.example.invalid/models/" + name + ".pt"
    path = os.path.join(root, name + ".pt")
    if not os.path.isfile(path):
        with urllib.request.urlopen(url) as source, open(path, "wb") as out:
            out.write(source.read())
    return path

"""


@pytest.mark.slow
def test_a_refused_download_names_its_url_and_where_the_program_asks_for_it(tmp_path):
    """A library's own loader downloads with urllib (no stand-in knows it): URLError names
    no file. The sandbox records the URL (an audit event), and the next step says which
    file to give locally and at which line the program asks for it."""
    original, port = _pair(tmp_path, "")
    for root in (original, port):
        (root / "weights.py").write_text(_DOWNLOADER)
        text = (root / "train.py").read_text()
        (root / "train.py").write_text(
            "import os, weights\nweights.load('vit', os.path.expanduser('~/.cache'))\n" + text
        )
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", _BUDGET, None)
    url = "https://weights.example.invalid/models/vit.pt"
    assert url in reference["network"], reference.get("network")
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert f"(it reached for {url})" in v.reason
    assert v.next_step.startswith(f"download {url} on a machine with a network")
    assert "train.py:2 (`weights.load('vit', os.path.expanduser('~/.cache'))`)" in v.next_step


def test_a_compiled_package_built_for_another_torch_is_the_environments() -> None:
    """A package's native library that does not load beside the runs' torch (an installed
    release built for an older torch) fails inside the package at its import: the
    environment's doing, not the program's."""
    frame = {"file": "train.py", "line": 3, "function": "<module>", "code": "import textlib"}
    message = "Could not load this library: /env/site-packages/textlib/lib/libtextlib.so"
    error = {"type": "OSError", "message": message, "frame": frame}
    v = judge(_failed(error), _failed(error), FP32, "tpu")
    assert v.verdict == "not-runnable" and "fails here too" not in v.reason
    assert v.reason.startswith("the environment the runs used (a compiled package")
    assert "--python" in v.next_step
    # the same error type from the program's own file, about something else: the program's
    other = {**error, "message": "[Errno 2] No such file or directory: 'data.bin'"}
    assert judge(_failed(other), _failed(other), FP32, "tpu").reason.startswith(
        "the original fails here too"
    )


@pytest.mark.slow
def test_a_device_check_the_reference_fails_is_the_references_not_the_originals(
    tmp_path: Path,
) -> None:
    """The reference shim's CUDA tensors are CPU tensors: ``assert x.is_cuda`` holds on a
    GPU and fails there. The verdict must not call that the original's failure."""
    trees = []
    for name, device, check in (
        ("original", "cuda", "x.is_cuda"),
        ("port", "tpu", 'x.device.type == "tpu"'),
    ):
        root = tmp_path / name
        root.mkdir()
        head = f'x = torch.zeros(2).to("{device}")\nassert {check}, "needs the device"\n'
        (root / "train.py").write_text("import torch\n" + head + _TRAIN.format(device=device))
        trees.append(root)
    v, reference = verify_tree(*trees, ["python", "train.py"], "tpu", _BUDGET, None)
    assert reference["error"]["type"] == "AssertionError", reference["error"]
    assert v.verdict == "not-runnable" and "fails here" not in v.reason, v.reason
    assert v.reason.startswith("torchport's sandbox (its CUDA reference runs"), v.reason
    assert "(the original failed at train.py:3)" in v.reason
    assert v.attribution["kind"] == "sandbox-fact" and "device check" in v.next_step


def test_a_device_check_that_is_not_on_the_failing_line_blames_nothing() -> None:
    """The fact reads the failing line: an assertion about shapes is the program's."""

    def failed_at(code: str) -> dict:
        frame = {"file": "train.py", "line": 3, "function": "<module>", "code": code}
        return _failed({"type": "AssertionError", "message": "", "frame": frame,
                        "traceback": [frame]})  # fmt: skip

    assert attribution.attribute(failed_at("assert x.shape[0] == 3")) is None
    found = attribution.attribute(failed_at("assert x.is_cuda"))
    assert found is not None and found.kind == "sandbox-fact" and "CPU tensors" in found.cause
