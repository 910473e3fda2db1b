"""Data the programs ask for: placeholder paths and huge arguments in the command, token
files read with numpy, tiktoken offline, and HF datasets beyond text classification. The
sandboxed runs use the default isolation: the stand-ins must be visible inside it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torchport.agents.data_notes import data_notes
from torchport.sandbox.commandline import rewrite
from torchport.sandbox.harness import RunSpec, run, split_program_args
from torchport.sandbox.synthetic import files, hf, numpy_files, tokenizer

np = pytest.importorskip("numpy")


def _program(tmp_path: Path, text: str, then: str = "") -> Path:
    """train.py: ``text``, then ``then`` (each dedented on its own)."""
    root = tmp_path / "prog"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent(text) + textwrap.dedent(then))
    return root


def _run(root: Path, *args: str, steps: int = 3) -> object:
    spec = RunSpec(root=root, command=["python", "train.py", *args], steps=steps, timeout_s=120)
    return run(spec)


# -- the command -----------------------------------------------------------------------


def test_huge_arguments_are_made_small_and_listed(tmp_path):
    args = ["--epochs", "300", "-b", "256", "--workers=16", "--input-size", "3", "224", "224"]
    args += ["--lr", "0.5", "--amp"]
    args += ["--world-size", "8", "--dist-url", "tcp://224.66.41.62:23456", "--seed", "7"]
    fitted = rewrite(args, tmp_path, devices=1)
    assert fitted.args == [
        *["--epochs", "1", "-b", "8", "--workers=1", "--input-size", "3", "64", "64"],
        *["--lr", "0.5", "--amp"],
        *["--world-size", "2", "--dist-url", "tcp://127.0.0.1:23456", "--seed", "7"],
    ]
    changed = {(r.argument, r.before, r.after) for r in fitted.rewrites}
    assert ("--epochs", "300", "1") in changed and ("--workers", "16", "1") in changed
    assert len(fitted.rewrites) == 7  # the two 224s, not the channel count, not --lr/--seed
    assert list(tmp_path.iterdir()) == []  # no data argument: nothing written


def test_small_values_and_loopback_rendezvous_are_left_alone(tmp_path):
    args = ["--epochs", "1", "--batch-size", "4", "--dist-url", "tcp://localhost:1234"]
    assert rewrite(args, tmp_path).rewrites == []


def test_a_placeholder_data_path_gets_an_image_folder_inside_the_copy(tmp_path):
    pytest.importorskip("PIL")
    args = ["/path/to/imagenet", "--data", "<data>", "--out", "$OUT", "--lr", "$LR"]
    fitted = rewrite(args, tmp_path)
    folder = tmp_path / fitted.args[0]
    assert fitted.args[0] == ".torchport-data/path_to_imagenet"
    assert sorted(p.name for p in folder.iterdir()) == ["train", "val"]
    assert len(list((folder / "train").iterdir())) == len(files.IMAGE_CLASSES)
    assert len(list(folder.rglob("*.JPEG"))) == 4 * (32 + 8)
    assert fitted.args[2] == ".torchport-data/data"
    assert fitted.args[3:] == ["--out", "$OUT", "--lr", "$LR"]  # not input data: left alone
    assert not Path("/path/to/imagenet").exists()
    # the same command gets the same rewrite in another copy (original and migration)
    other = tmp_path / "other"
    other.mkdir()
    assert rewrite(["/path/to/imagenet"], other).args == fitted.args[:1]


def test_an_image_folder_is_named_as_the_programs_code_names_images(tmp_path):
    pytest.importorskip("PIL")
    (tmp_path / "data.py").write_text("EXTS = ['png', 'jpg']\nx = glob('*.png')\n")
    assert files.image_suffix(tmp_path) == ".png"
    assert files.image_suffix(tmp_path / "nowhere") == files.DEFAULT_IMAGE_SUFFIX
    fitted = rewrite(["/path/to/images"], tmp_path)
    written = list((tmp_path / fitted.args[0]).rglob("*.*"))
    assert written and {p.suffix for p in written} == {".png"}


def test_a_missing_llmc_token_shard_is_written_where_the_glob_looks(tmp_path):
    fitted = rewrite(["--input_bin", "dev/data/fineweb_train_*.bin"], tmp_path)
    assert fitted.args == ["--input_bin", "dev/data/fineweb_train_*.bin"]  # found in place
    (shard,) = (tmp_path / "dev" / "data").glob("fineweb_train_*.bin")
    with open(shard, "rb") as f:  # as llm.c's _load_data_shard reads it
        header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    assert header[:3].tolist() == [20240520, 1, len(tokens)] and tokens.max() < 256
    assert fitted.standins[0]["path"] == "dev/data/fineweb_train_0.bin"


def test_existing_data_and_paths_outside_the_copy_are_never_written(tmp_path):
    (tmp_path / "mydata").mkdir()
    fitted = rewrite(["--data", "mydata", "--data-dir", "../../elsewhere/x"], tmp_path)
    assert fitted.args[:2] == ["--data", "mydata"] and fitted.standins[0]["path"].startswith(
        ".torchport-data/"
    )
    assert list((tmp_path / "mydata").iterdir()) == []
    assert not (tmp_path.parent.parent / "elsewhere").exists()


def test_the_program_arguments_are_split_from_the_launcher_and_script():
    assert split_program_args(["python", "train.py", "--epochs", "9"]) == (
        ["python", "train.py"],
        ["--epochs", "9"],
    )
    assert split_program_args(["python", "-m", "pkg.train", "-b", "64"])[1] == ["-b", "64"]
    command = ["torchrun", "--nproc_per_node", "2", "train.py", "--epochs", "9"]
    assert split_program_args(command) == (command[:4], ["--epochs", "9"])


# -- in-process stand-ins --------------------------------------------------------------


def test_np_memmap_of_a_missing_token_file_reads_a_stand_in_and_an_existing_one_as_is(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    real = tmp_path / "real.bin"
    np.arange(10, dtype=np.uint16).tofile(real)
    numpy_files.install(tmp_path)
    try:
        fake = np.memmap("data/shakespeare/train.bin", dtype=np.uint16, mode="r")
        kept = np.memmap(real, dtype=np.uint16, mode="r")
        outside = np.fromfile("/nonexistent/val.bin", dtype=np.int32, count=100)
    finally:
        numpy_files.uninstall()
    assert isinstance(fake, np.memmap) and fake.dtype == np.uint16
    assert len(fake) == files.TOKENS and bytes(fake[:40].astype(np.uint8)).isascii()
    assert kept.tolist() == list(range(10))
    assert outside.shape == (100,) and (tmp_path / ".torchport-data").is_dir()
    with pytest.raises(FileNotFoundError):  # uninstalled: numpy is numpy again
        np.memmap("missing.bin", dtype=np.uint16, mode="r")


def test_the_tiktoken_stand_in_has_gpt2s_interface_and_sizes():
    enc = tokenizer.get_encoding("gpt2")
    assert (enc.n_vocab, enc.eot_token, enc.max_token_value) == (50257, 50256, 50256)
    text = "Hello, world!\n"
    assert enc.decode(enc.encode_ordinary(text)) == text
    ids = enc.encode("a<|endoftext|>b", allowed_special={"<|endoftext|>"})
    assert ids == [97, 50256, 98] and enc.decode(ids) == "a<|endoftext|>b"
    with pytest.raises(ValueError, match="disallowed special token"):
        enc.encode("a<|endoftext|>b")
    assert tokenizer.encoding_for_model("gpt-4").n_vocab == 100277
    with pytest.raises(ValueError):
        tokenizer.get_encoding("no-such-encoding")


def test_hf_image_and_language_model_datasets_have_their_columns():
    cifar = hf.load_dataset("uoft-cs/cifar10", split="train")
    assert cifar.column_names == ["img", "label"] and len(cifar) == 512
    image = cifar[0]["img"]
    assert (image.size if hasattr(image, "size") else tuple(image.shape[:2])) == (32, 32)
    owt = hf.load_dataset("Skylion007/openwebtext")
    assert list(owt) == ["train"] and owt["train"].column_names == ["text"]
    assert list(hf.load_dataset("ILSVRC/imagenet-1k")) == ["train", "validation", "test"]


def test_an_unknown_hf_dataset_has_the_columns_the_program_reads():
    """A dataset known by no name is an image dataset for a program that reads an image
    column (``examples["image"]``), a text classification set for one that reads none."""
    reads = hf.columns_read(['imgs = [tf(im) for im in examples["image"]]', "y = b['labels']"])
    assert reads == ["image", "labels"]
    schema = hf.from_program(reads)
    assert (schema.image, schema.label, schema.texts) == ("image", "labels", ())
    assert hf.from_program(["text", "label"]).image is None
    reviews = hf.from_program(["sentence", "labels"])
    assert (reviews.image, reviews.texts, reviews.label) == (None, ("sentence",), "labels")
    assert hf.from_program([]).texts == ("text",)
    assert hf.from_program(["text", "labels", "label"]).label == "label"  # read, and written
    captioned = hf.from_program(["image", "caption"])
    assert (captioned.image, captioned.label, captioned.texts) == ("image", "label", ("caption",))
    folder = hf.load_dataset("imagefolder", data_dir="never/read", split="train")
    assert folder.column_names == ["image", "label"]


def test_the_report_says_a_standin_datasets_columns_and_whence_they_came():
    served = {"library": "datasets", "dataset": "someone/photos", "size": 512, "split": "train"}
    served |= {"columns": ["image", "label"], "columns_from": "the columns the program reads"}
    assert data_notes({"synthetic_data": [served]}) == [
        "synthetic data used instead of the real data: datasets someone/photos (512 items, "
        "train, columns image label, from the columns the program reads)"
    ]


def test_the_report_names_the_stand_ins_and_the_rewrites():
    notes = data_notes(
        {
            "synthetic_data": [{"library": "tiktoken", "dataset": "gpt2", "size": 50257}],
            "command_rewrites": [
                {"argument": "--epochs", "before": "90", "after": "1", "why": "epochs"}
            ],
        }
    )
    assert notes == [
        "synthetic data used instead of the real data: tiktoken gpt2 (50257 items)",
        "arguments rewritten in the command (both runs, not the code): --epochs 90 -> 1 (epochs)",
    ]


# -- sandboxed runs ---------------------------------------------------------------------

IMAGEFOLDER = """\
import argparse, os
import torch
from torchvision import datasets, transforms

p = argparse.ArgumentParser()
p.add_argument("data")
p.add_argument("--epochs", type=int, default=90)
p.add_argument("-j", "--workers", type=int, default=8)
args = p.parse_args()
assert args.epochs == 1 and args.workers == 1, args
tf = transforms.Compose([transforms.RandomResizedCrop(16), transforms.ToTensor()])
train = datasets.ImageFolder(os.path.join(args.data, "train"), tf)
assert len(train.classes) == 4, train.classes
loader = torch.utils.data.DataLoader(train, batch_size=8, shuffle=True, num_workers=args.workers)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(args.epochs):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


@pytest.mark.slow
def test_imagefolder_on_a_placeholder_path_trains_in_the_sandbox(tmp_path):
    pytest.importorskip("PIL")
    root = _program(tmp_path, IMAGEFOLDER)
    result = _run(root, "/path/to/imagenet", "--epochs", "90", "-j", "8")
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 3
    assert [(r["argument"], r["after"]) for r in result.command_rewrites] == [
        ("argument", ".torchport-data/path_to_imagenet"),
        ("--epochs", "1"),
        ("-j", "1"),
    ]
    assert result.synthetic_data[0]["path"] == ".torchport-data/path_to_imagenet"
    assert not (root / ".torchport-data").exists()  # the scratch copy, never the original


HF_IMAGES = """\
import torch
from datasets import load_dataset

dataset = load_dataset("someone/flower-photos", split="train")


def pixels(im):
    raw = im.convert("RGB").resize((8, 8)).tobytes()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(8, 8, 3).permute(2, 0, 1) / 255


def transform(examples):
    return {"input": [pixels(im) for im in examples["image"]]}


dataset.set_transform(transform)
loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)
model = torch.nn.Conv2d(3, 3, 3, padding=1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:
    x = batch["input"]
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_an_hf_image_dataset_the_program_reads_by_column_trains_in_the_sandbox(tmp_path):
    """An image dataset of the Hub whose name torchport does not know: the program reads
    ``examples["image"]`` (PIL images) through ``set_transform``; the stand-in has it."""
    pytest.importorskip("PIL")
    result = _run(_program(tmp_path, HF_IMAGES))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 3
    served = [r for r in result.synthetic_data if r["library"] == "datasets"]
    assert served[0]["columns"] == ["image", "label"], served


FOLDER_FLOOR = """\
import sys
from pathlib import Path

import torch
from PIL import Image

exts = ["jpg", "jpeg", "png"]  # a case-sensitive glob, as users' files are named
paths = [p for ext in exts for p in Path(sys.argv[1]).glob(f"**/*.{ext}")]
assert len(paths) >= 100, "you should have at least 100 images in your folder"
model = torch.nn.Conv2d(3, 3, 3, padding=1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for path in paths[:8]:
    raw = Image.open(path).convert("RGB").resize((8, 8)).tobytes()
    x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(1, 8, 8, 3)
    x = x.permute(0, 3, 1, 2) / 255
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_an_image_folder_stand_in_holds_what_a_program_checks_for(tmp_path):
    """A user's folder of images holds thousands, named as the code globs them (``*.jpg``);
    a program (or its library) may refuse fewer than 100 before training: the stand-in
    holds more than such a floor, with the suffix the program's code names."""
    pytest.importorskip("PIL")
    result = _run(_program(tmp_path, FOLDER_FLOOR), "path/to/your/images")
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 3 and result.synthetic_data[0]["size"] >= 128


NANOGPT = """\
import os
import numpy as np
import tiktoken
import torch

data_dir = os.path.join("data", "openwebtext")
enc = tiktoken.get_encoding("gpt2")
train = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
assert enc.decode(train[:64].tolist()).isascii()
block, vocab = 32, enc.n_vocab
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, vocab))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(0)
for it in range(1000):
    ix = torch.randint(len(train) - block - 1, (4,), generator=gen)
    x = torch.stack([torch.from_numpy(train[i : i + block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(train[i + 1 : i + 1 + block].astype(np.int64)) for i in ix])
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab), y.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_a_nanogpt_style_memmap_and_tiktoken_script_trains_offline(tmp_path):
    if "tiktoken" in sys.modules:
        pytest.skip("a real tiktoken was imported in this process")
    root = _program(tmp_path, NANOGPT)
    result = _run(root, steps=2)
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 2 and len(result.losses) == 2
    libraries = {(d["library"], d["dataset"]) for d in result.synthetic_data}
    assert libraries == {("tiktoken", "gpt2"), ("numpy", "data/openwebtext/train.bin")}


# A torchvision whose compiled operators did not load (PyPI's wheels are CUDA builds):
# its __init__ registers fake kernels for nms and qnms without asking, as 0.28 does.
BROKEN_TORCHVISION = {
    "torchvision/__init__.py": """\
        import torch
        from torchvision import extension
        from torchvision.ops import nms

        for op in ("nms", "qnms"):
            torch.library.register_fake("torchvision::" + op)(lambda d, s, t: d.new_empty(0))
        """,
    "torchvision/extension.py": """\
        def _has_ops():
            return False

        def _assert_has_ops():
            raise RuntimeError("Couldn't load custom C++ ops.")
        """,
    "torchvision/ops.py": """\
        import torch
        from torchvision.extension import _assert_has_ops

        def nms(boxes, scores, iou_threshold):
            _assert_has_ops()
            return torch.ops.torchvision.nms(boxes, scores, iou_threshold)
        """,
}


def test_torchvision_without_its_compiled_operators_imports_and_has_nms(tmp_path):
    """``import torchvision`` works and ``nms`` computes torchvision's greedy suppression;
    the stand-in is recorded."""
    for rel, text in BROKEN_TORCHVISION.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    code = textwrap.dedent(
        """\
        import json, torch
        from torchport.sandbox import synthetic
        synthetic.install()
        import torchvision
        boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10.0]])
        scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
        kept = torchvision.nms(boxes, scores, 0.5).tolist()
        loose = torchvision.nms(boxes, scores, 0.99).tolist()
        print(json.dumps([kept, loose, synthetic.records()]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kept, loose, records = json.loads(done.stdout.splitlines()[-1])
    # box 3 (0.95) suppresses its twin box 0 and box 1 (IoU 0.68); box 2 overlaps nothing
    assert kept == [3, 2]
    assert loose == [3, 1, 2]  # the twins' IoU is 1.0 > 0.99; box 1 (0.68) survives
    assert any(r["library"] == "torchvision" and "nms" in r.get("standin", "") for r in records)


# ten optimizer steps of a one-layer model, to follow a program's own first lines
TINY_TRAINING = """\
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(10):
            loss = model(torch.ones(4, 2)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


@pytest.mark.slow
def test_torch_hub_list_offline_is_an_empty_list_recorded(tmp_path):
    """dino asks torch.hub.list for extra architectures while building its parser: in the
    sandbox (no network) that is an empty list, recorded, and the program trains."""
    from torchport.sandbox.isolation import choose_backend

    if choose_backend("auto") == "process":
        pytest.skip("only the process backend is here: it would reach the network")
    root = _program(
        tmp_path,
        """\
        import torch
        archs = ["vit_small", *torch.hub.list("facebookresearch/xcit:main")]
        assert archs == ["vit_small"], archs
        """,
        then=TINY_TRAINING,
    )
    result = run(RunSpec(root=root, command=["python", "train.py"], mode="tpu", steps=2))
    assert result.status == "ok" and result.steps == 2, (result.error, result.stderr_tail)
    assert any(r["library"] == "torch.hub" for r in result.synthetic_data), result.synthetic_data


@pytest.mark.slow
def test_wandb_absent_is_a_logger_that_records_nothing(tmp_path):
    """Pytorch-UNet logs to wandb (its pin has no wheel): the program trains, the stand-in
    is named, and wandb.run / wandb.config follow the run as wandb's do."""
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here: the stand-in is for its absence")
    root = _program(
        tmp_path,
        """\
        import argparse
        import torch
        import wandb
        opt = argparse.Namespace(batch_size=8)  # yolov5: wandb.init(config=opt)
        assert wandb.init(config=opt).config.batch_size == 8
        run = wandb.init(project="U-Net", resume="allow", anonymous="must")
        run.config.update(dict(epochs=1, lr=0.1), allow_val_change=True)
        assert wandb.run is run and wandb.config.lr == 0.1
        """,
        then=TINY_TRAINING
        + """\
            run.log({"loss": loss.item(), "images": wandb.Image(torch.zeros(3, 4, 4))})
        wandb.finish()
        """,
    )
    result = _run(root, steps=2)
    assert result.status == "ok" and result.steps == 2, (result.error, result.stderr_tail)
    assert any(r["library"] == "wandb" for r in result.synthetic_data), result.synthetic_data


def test_torch_six_serves_the_aliases_old_pinned_libraries_import():
    """timm 0.3.2 (deit's pin) does ``from torch._six import container_abcs``."""
    code = textwrap.dedent(
        """\
        import collections.abc, json, math
        from torchport.sandbox import synthetic
        synthetic.install()
        from torch._six import container_abcs, inf, int_classes, string_classes
        assert container_abcs is collections.abc and inf == math.inf and int_classes is int
        assert isinstance("x", string_classes)
        print(json.dumps(synthetic.records()))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert any(r["dataset"] == "_six" for r in json.loads(done.stdout.splitlines()[-1]))
