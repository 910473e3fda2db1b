"""Stand-ins as faithful as what they replace (issue 31): torchvision's dataset contract
(root made, download honoured, real types, split sizes), sizes that hold a few batches of
the batch size the program uses, a stand-in torchvision that is a package with the
submodules libraries import, and positional data paths that do not exist. Each pattern is
a small program of its own; the sandboxed runs use the default isolation."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torchport.sandbox.commandline import rewrite
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.synthetic import data, finder

np = pytest.importorskip("numpy")

if importlib.util.find_spec("torchvision") is not None:
    pytest.skip(
        "torchvision is installed here: these tests are for its stand-in", allow_module_level=True
    )


def _in_process(tmp_path: Path, code: str, *argv: str) -> object:
    """``code`` run by a fresh interpreter with the stand-ins installed (as a sandboxed run
    has them), in ``tmp_path``; what it prints last, as JSON."""
    prelude = "import json, os, sys, torch\nfrom torchport.sandbox import synthetic\n"
    prelude += "synthetic.install()\n"
    script = tmp_path / "probe.py"
    script.write_text(prelude + textwrap.dedent(code))
    env = {**os.environ, "HOME": str(tmp_path)}  # ``~`` roots stay inside tmp_path
    done = subprocess.run(
        [sys.executable, str(script), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _program(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "prog"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent(text))
    return root


# -- the dataset contract --------------------------------------------------------------


def test_download_makes_root_and_download_false_stands_in_for_a_local_copy(
    tmp_path,
):
    out = _in_process(
        tmp_path,
        """\
        from torchvision import datasets
        seen = {}
        # a local copy the user keeps at root: the sandbox has none, the stand-in stands in
        seen["local"] = len(datasets.CIFAR10("~/data", train=False, download=False))
        seen["local_root"] = os.path.isdir(os.path.expanduser("~/data/cifar-10-batches-py"))
        datasets.CIFAR10("ckpt", train=True, download=True)
        torch.save({"epoch": 0}, os.path.join("ckpt", "last.pt"))  # into root, as programs do
        seen["test"] = len(datasets.CIFAR10("ckpt", train=False, download=False))
        seen["folders"] = sorted(os.listdir("ckpt"))
        datasets.MNIST("~/mnist_root", download=True)
        seen["mnist"] = os.path.isdir(os.path.expanduser("~/mnist_root/MNIST/raw"))
        print(json.dumps(seen))
        """,
    )
    assert out["local"] == data.TEST_SIZE and out["local_root"]
    assert out["folders"] == ["cifar-10-batches-py", "last.pt"]
    assert out["test"] == data.TEST_SIZE and out["mnist"]


def test_datasets_have_the_real_classes_types_and_split_sizes(tmp_path):
    out = _in_process(
        tmp_path,
        """\
        import numpy as np
        from torchvision import datasets, transforms
        seen = {}
        half = (0.5, 0.5, 0.5)
        tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize(half, half)])
        for cls in (datasets.CIFAR10, datasets.CIFAR100):
            plus = lambda t: t + 1000
            train = cls("d", train=True, download=True, transform=tf, target_transform=plus)
            test = cls("d", train=False, download=True)
            x, y = train[0]
            seen[cls.__name__] = {
                "data": [type(train.data).__module__, str(train.data.dtype)],
                "shape": list(train.data.shape),
                "targets": [type(train.targets).__name__, type(train.targets[0]).__name__],
                "classes": [type(train.classes).__name__, type(train.classes[0]).__name__],
                "sizes": [len(train), len(test)],
                "sample": [list(x.shape), str(x.dtype), y == train.targets[0] + 1000],
                "stacked": list(torch.tensor(train.data).permute(0, 3, 1, 2).shape),
            }
        mnist = datasets.FashionMNIST("d", train=True, download=True)
        seen["mnist"] = [type(mnist.data).__name__, str(mnist.data.dtype), str(mnist.targets.dtype)]
        svhn = datasets.SVHN("d", split="test", download=True)
        seen["svhn"] = [list(svhn.data.shape[1:]), type(svhn.labels).__module__, len(svhn)]
        print(json.dumps(seen))
        """,
    )
    for name in ("CIFAR10", "CIFAR100"):
        got = out[name]
        assert got["data"] == ["numpy", "uint8"]
        assert got["shape"] == [data.TRAIN_SIZE, 32, 32, 3]
        assert got["targets"] == ["list", "int"] and got["classes"] == ["list", "str"]
        assert got["sizes"] == [data.TRAIN_SIZE, data.TEST_SIZE]
        assert got["sample"] == [[3, 32, 32], "torch.float32", True]
        assert got["stacked"] == [data.TRAIN_SIZE, 3, 32, 32]
    assert out["mnist"] == ["Tensor", "torch.uint8", "torch.int64"]
    assert out["svhn"] == [[3, 32, 32], "numpy", data.TEST_SIZE]


# -- sizes that fit the program's batch size -------------------------------------------


def test_the_batch_size_is_read_from_the_command_and_the_source():
    from torchport.sandbox.synthetic import batch

    assert batch.from_command(
        ["-b", "8", "--lr", "3", "--batch-size=16", "--batch_size", "32"]
    ) == [
        8,
        16,
        32,
    ]
    source = textwrap.dedent(
        """\
        parser.add_argument("-b", "--batch-size", type=int,
                            default=256, help="mini-batch size (default: 256)")
        parser.add_argument("--epochs", default=90)
        loader = DataLoader(ds, batch_size=2048, shuffle=True, drop_last=True)
        hyp = {"opt": {"batch_size": 1024}}
        total_batch_size = 524288  # tokens per step (a GPT-2 reproduction's), not samples
        if batch_size == 3:
            pass
        """
    )
    assert sorted(batch.from_source(source)) == [256, 1024, 2048]
    assert sorted(batch.from_source(source, defaults=False)) == [1024, 2048]  # a command's -b wins


SPEEDRUN = """\
import torch
import torchvision
import torchvision.transforms as T

BATCH = dict(batch_size=2048)
train = torchvision.datasets.CIFAR10("data", train=True, download=True, transform=T.ToTensor())
test = torchvision.datasets.CIFAR10("data", train=False, download=True, transform=T.ToTensor())
loader = torch.utils.data.DataLoader(train, shuffle=True, drop_last=True, **BATCH)
test_loader = torch.utils.data.DataLoader(test, batch_size=2048, drop_last=True)
assert len(test_loader) >= 1, len(test)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0.0
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    total += loss.item()
print("mean loss", total / len(loader))
"""


@pytest.mark.slow
def test_a_drop_last_loader_of_a_large_hard_coded_batch_gets_full_batches(tmp_path):
    """A speed-run script's batch of 2048 over the default 512 stand-in images was zero
    batches (ZeroDivisionError in the program's own mean): now a few batches of it."""
    root = _program(tmp_path, SPEEDRUN)
    result = run(RunSpec(root=root, command=["python", "train.py"], steps=2, timeout_s=300))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 2
    sizes = {r["split"]: r["size"] for r in result.synthetic_data if r["dataset"] == "CIFAR10"}
    assert sizes == {"train": 4 * 2048, "test": 3 * 2048}


# -- the stand-in torchvision is a package ---------------------------------------------


def test_the_stand_in_torchvision_has_the_submodules_libraries_import(tmp_path):
    """What image and model libraries import once they find torchvision importable."""
    out = _in_process(
        tmp_path,
        """\
        import importlib.util
        import torchvision
        import torchvision.transforms.functional as F
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.functional import InterpolationMode as Again
        from torchvision.transforms import v2
        from torchvision.transforms.v2 import functional as F2
        from torchvision.datasets.folder import ImageFolder, default_loader, IMG_EXTENSIONS
        from torchvision.datasets.vision import VisionDataset
        from torchvision.ops import nms, box_iou
        from torchvision.io import read_image
        from torchvision.utils import make_grid
        import torchvision.models
        img = torch.randint(0, 256, (6, 8, 3), dtype=torch.uint8)  # HxWxC, as PIL hands it
        x = F.to_tensor(img)
        pipeline = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
        try:
            torchvision.models.resnet50
            missing = ""
        except AttributeError as exc:
            missing = str(exc)
        boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11.0]])
        print(json.dumps({
            "version": torchvision.__version__,
            "spec": importlib.util.find_spec("torchvision.transforms.functional") is not None,
            "packages": [hasattr(m, "__path__") for m in (torchvision, torchvision.transforms, v2)],
            "enum": [InterpolationMode.BICUBIC.value, Again is InterpolationMode],
            "to_tensor": [list(x.shape), str(x.dtype)],
            "flip": bool((F.hflip(x) == x.flip(-1)).all()),
            "size": F.get_image_size(img),
            "v2": torch.equal(pipeline(img), x),
            "f2": F2.normalize is not None,
            "nms": nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist(),
            "grid": list(make_grid(torch.rand(5, 3, 8, 8), nrow=2).shape),
            "missing": missing,
            "marked": [n for n, m in sys.modules.items() if getattr(m, synthetic.finder.MARK, 0)],
        }))
        """,
    )
    minor = int(__import__("torch").__version__.split(".")[1])
    assert out["version"].startswith(f"0.{minor + 15}.")  # the torchvision built for this torch
    assert out["spec"] and out["packages"] == [True, True, True]
    assert out["enum"] == ["bicubic", True]
    assert out["to_tensor"] == [[3, 6, 8], "torch.float32"] and out["flip"]
    assert out["size"] == [8, 6] and out["v2"] and out["f2"]
    assert out["nms"] == [0]
    assert out["grid"] == [3, 32, 22]  # torchvision's tiling: 3 rows, 2 columns, padding 2
    assert "torchvision.models.resnet50" in out["missing"] and "--deps" in out["missing"]
    # the run's record of the stand-in modules served (session.standin_modules) reads the mark
    assert {"torchvision", "torchvision.transforms.functional", "torchvision.ops"} <= set(
        out["marked"]
    )


def test_every_stand_in_torchvision_module_is_built():
    """The finder's list of names (kept there: importing the sandbox must not import
    torch) and the builders agree."""
    from torchport.sandbox.synthetic import vision_modules

    assert set(finder.TORCHVISION) == set(vision_modules.MODULES)


# -- positional data paths --------------------------------------------------------------


def test_a_missing_positional_data_folder_gets_a_stand_in_but_an_output_folder_does_not(
    tmp_path,
):
    pytest.importorskip("PIL")
    fitted = rewrite(["/data/imagenet", "-b", "64", "runs/exp1", "train"], tmp_path)
    assert fitted.args == [".torchport-data/data_imagenet", "-b", "8", "runs/exp1", "train"]
    assert (tmp_path / ".torchport-data/data_imagenet/train").is_dir()
    assert [s["path"] for s in fitted.standins] == [".torchport-data/data_imagenet"]
    assert not (tmp_path / "runs").exists()


IMAGENET_POSITIONAL = """\
import argparse
import os
import torch
import torchvision.datasets as datasets
import torchvision.transforms as transforms

parser = argparse.ArgumentParser()
parser.add_argument("data", metavar="DIR")
parser.add_argument("-b", "--batch-size", type=int, default=256)
args = parser.parse_args()
train = datasets.ImageFolder(os.path.join(args.data, "train"), transforms.ToTensor())
loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(len(train.classes)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_a_program_given_a_missing_data_root_positionally_trains_on_a_stand_in(tmp_path):
    pytest.importorskip("PIL")
    root = _program(tmp_path, IMAGENET_POSITIONAL)
    command = ["python", "train.py", "/data/imagenet", "-b", "256"]
    result = run(RunSpec(root=root, command=command, steps=2, timeout_s=300))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 2
    assert result.synthetic_data[0]["path"] == ".torchport-data/data_imagenet"


@pytest.mark.slow
def test_a_stand_in_folder_holds_a_few_batches_of_the_scripts_batch_size(tmp_path):
    """A hard-coded ``batch_size=512`` with ``drop_last`` over the default 128 images was no
    batch at all. An argparse default is the batch size unless the command gives one; the
    command's is lowered first (``-b 512`` runs with 8), and the folder sized by that."""
    pytest.importorskip("PIL")
    (tmp_path / "train.py").write_text(
        "loader = DataLoader(ImageFolder(sys.argv[1]), batch_size=512, drop_last=True)\n"
    )
    rewrite(["/data/imagenet"], tmp_path, script=tmp_path / "train.py")
    folder = tmp_path / ".torchport-data/data_imagenet"
    assert len(list((folder / "train").rglob("*.JPEG"))) == 4 * 512
    assert len(list((folder / "val").rglob("*.JPEG"))) == 3 * 512
    for name, command, images in (("default", [], 4 * 512), ("given", ["-b", "512"], 128)):
        other = tmp_path / name
        other.mkdir()
        (other / "train.py").write_text(
            'parser.add_argument("-b", "--batch-size", type=int, default=512)\n'
            "loader = DataLoader(ds, batch_size=args.batch_size, drop_last=True)\n"
        )
        rewrite(["/data/imagenet", *command], other, script=other / "train.py")
        train = other / ".torchport-data/data_imagenet/train"
        assert len(list(train.rglob("*.JPEG"))) == images, name
