"""COCO-layout stand-ins for a placeholder given to a COCO option (detr's ``--coco_path
/path/to/coco``): images and instances files as pycocotools and torchvision's CocoDetection
read them, the same bytes in every copy, and visible to the program inside the sandbox."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from torchport.sandbox.commandline import rewrite
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.synthetic import files

Image = pytest.importorskip("PIL.Image")


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "args",
    [
        ["--coco_path", "/path/to/coco"],
        ["--coco-path=<coco>"],
        ["--data-path", "/path/to/coco"],
        ["--coco_path", "data/coco"],  # missing from the copy: written where it is looked for
    ],
)
def test_a_coco_placeholder_gets_the_coco_detection_layout(tmp_path, args):
    fitted = rewrite(args, tmp_path)
    (standin,) = fitted.standins
    root = tmp_path / standin["path"]
    assert "COCO" in standin["dataset"] and standin["size"] == sum(files.COCO_SPLITS.values())
    assert sorted(p.name for p in root.iterdir()) == ["annotations", "train2017", "val2017"]
    for split, count in files.COCO_SPLITS.items():
        coco = json.loads((root / "annotations" / f"instances_{split}.json").read_text())
        assert len(coco["images"]) == count and coco["annotations"]
        categories = {c["id"] for c in coco["categories"]}
        images = {i["id"]: i for i in coco["images"]}
        for ann in coco["annotations"]:
            image = images[ann["image_id"]]
            x, y, w, h = ann["bbox"]
            assert x >= 0 and x + w <= image["width"] and y >= 0 and y + h <= image["height"]
            assert ann["area"] == w * h and ann["iscrowd"] == 0
            assert ann["segmentation"] == [[x, y, x + w, y, x + w, y + h, x, y + h]]
            assert ann["category_id"] in categories
        with Image.open(root / split / images[1]["file_name"]) as img:
            assert img.size == (images[1]["width"], images[1]["height"])
    assert len({a["id"] for a in coco["annotations"]}) == len(coco["annotations"])


def test_other_folders_stay_image_folders_and_coco_is_the_same_in_every_copy(tmp_path):
    imagenet = rewrite(["--data-path", "/path/to/imagenet"], tmp_path / "a")
    assert "ImageFolder" in imagenet.standins[0]["dataset"]
    copies = [tmp_path / "orig", tmp_path / "port"]
    made = [rewrite(["--coco_path", "/path/to/coco"], c).standins[0]["path"] for c in copies]
    assert _tree(copies[0] / made[0]) == _tree(copies[1] / made[1])


# what pycocotools' COCO and torchvision's CocoDetection do, with json and PIL only: each
# box is drawn in its category's colour, so its crop tells the category apart
DETECTION = """\
import argparse, json, os
import numpy as np
import torch
from PIL import Image

p = argparse.ArgumentParser()
p.add_argument("--coco_path")
args = p.parse_args()
coco = json.load(open(os.path.join(args.coco_path, "annotations", "instances_train2017.json")))
ids = sorted({c["id"] for c in coco["categories"]})
crops, labels = [], []
for image in coco["images"]:
    pixels = np.asarray(Image.open(os.path.join(args.coco_path, "train2017", image["file_name"])))
    for ann in coco["annotations"]:
        if ann["image_id"] == image["id"]:
            x, y, w, h = ann["bbox"]
            crop = pixels[y + h // 2, x + w // 2].astype("float32") / 255
            crops.append(torch.from_numpy(crop))
            labels.append(ids.index(ann["category_id"]))
x, y = torch.stack(crops), torch.tensor(labels)
model = torch.nn.Linear(3, len(ids))
opt = torch.optim.SGD(model.parameters(), lr=1.0)
for _ in range(4):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_a_detection_program_reads_the_coco_stand_in_in_the_sandbox(tmp_path):
    root = tmp_path / "prog"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent(DETECTION))
    command = ["python", "train.py", "--coco_path", "/path/to/coco"]
    spec = RunSpec(root=root, command=command, steps=3)
    result = run(spec)
    assert result.status == "ok" and result.steps == 3, (result.error, result.stderr_tail)
    assert result.command_rewrites[0]["after"] == ".torchport-data/path_to_coco"
    assert "COCO" in result.synthetic_data[0]["dataset"]
    assert result.losses[-1] < result.losses[0]
