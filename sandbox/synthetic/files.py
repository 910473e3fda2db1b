"""Synthetic data *files*: image folders, token files and text, written where a run may write.

The harness writes these into the scratch copy for paths named in the command (see
``sandbox.commandline``); the launcher writes token files for ``np.memmap``/``np.fromfile``
of a missing file (see ``sandbox.synthetic.numpy_files``). Contents are deterministic (the
same bytes for the original and the migrated run) and learnable (class patterns, English-ish
text), so losses go down. Stand-ins are only ever written under ``root``: a path that would
leave it is redirected into ``root/STANDIN_DIR``, and one that leaves it through a symlink
of the repository's is refused (``standin_path``).
"""

from __future__ import annotations

import json
import os
import re
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchport.sandbox.safepath import Refused, confined

from . import data

if TYPE_CHECKING:  # imported where images are drawn: the sandbox imports this module
    import torch  # for its paths alone, and torch's start-up is seconds

STANDIN_DIR = ".torchport-data"
TOKENS = 1 << 16  # enough for a block of 1024 tokens and a batch of them
LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_INTS = 20240520, 1, 256
# split -> images per class at least; the classes and image side below. A user's folder holds
# thousands of images, and programs check for a floor before they train (a diffusion
# trainer asserts 100): 128 training images (and 32 to validate) pass such checks and cost
# well under a second to write.
IMAGE_SPLITS = {"train": 32, "val": 8}
IMAGE_LIMIT = 8192  # images a split holds at most, however large the program's batch
IMAGE_CLASSES = ("class_a", "class_b", "class_c", "class_d")
IMAGE_SIDE = 32


def standin_path(root: Path, requested: str, in_place: bool = True) -> Path:
    """Where a stand-in for ``requested`` goes: the path itself when it lies inside ``root``
    (and ``in_place``), else an entry of ``root/STANDIN_DIR`` named after it, so nothing is
    ever written outside ``root``.

    The path is resolved, the repository's own symlinks followed: one that leads out of
    ``root`` (``escape/x.txt`` with ``escape -> /etc``, or a committed ``.torchport-data``
    link) is ``Refused``, and no stand-in is made. What is returned has no symlink in the
    part that exists, so a writer that only creates what is not there yet (see
    ``sandbox.commandline``) stays inside ``root``."""
    base = root.resolve()
    wanted = Path(os.path.normpath(base / requested))
    if not (in_place and wanted != base and wanted.is_relative_to(base)):
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", requested).strip("._") or "data"
        wanted = base / STANDIN_DIR / slug
    target = confined(base, wanted.relative_to(base), "the run's copy of the program")
    if target == base:
        raise Refused(requested, "is the run's folder itself")
    return target


def corpus(size: int, *key: object) -> bytes:
    """``size`` bytes of deterministic English-ish text (sentences of a tiny vocabulary)."""
    gen = data.generator("corpus", *key)
    out = bytearray()
    while len(out) < size:
        out += " ".join(data.sentences(data.labels(64, 2, gen), gen)).encode() + b"\n"
    return bytes(out[:size])


def write_text(path: Path, size: int = 1 << 16) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(corpus(size, path.name))
    return size


def write_tokens(path: Path, dtype: str, count: int = TOKENS, offset: int = 0) -> int:
    """Raw tokens of numpy ``dtype`` (nanoGPT's ``train.bin``): the corpus's bytes as ids,
    valid for any vocabulary of 256 or more, after ``offset`` zero bytes."""
    import numpy as np

    tokens = np.frombuffer(corpus(count, path.name), dtype=np.uint8).astype(dtype)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(bytes(offset))
        f.write(tokens.tobytes())
    return count


def write_llmc_shard(path: Path, count: int = TOKENS) -> int:
    """llm.c's ``.bin`` shard: 256 int32 header (magic, version, token count), uint16 tokens."""
    header = array("i", [LLMC_MAGIC, LLMC_VERSION, count] + [0] * (LLMC_HEADER_INTS - 3))
    tokens = array("H", list(corpus(count, path.name)))  # one uint16 per byte
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        header.tofile(f)
        tokens.tofile(f)
    return count


def images_per_class(batch: int | None) -> dict[str, int]:
    """Images per class of each split: :data:`IMAGE_SPLITS`, or, for a program whose batch
    size is ``batch``, enough for a few batches of it (``data.BATCHES``: a ``drop_last``
    loader over fewer images than one batch has none), at most :data:`IMAGE_LIMIT`."""
    if not batch:
        return dict(IMAGE_SPLITS)
    classes = len(IMAGE_CLASSES)
    wanted = {"train": data.BATCHES[True] * batch, "val": data.BATCHES[False] * batch}
    return {
        split: max(IMAGE_SPLITS[split], -(-min(n, IMAGE_LIMIT) // classes))
        for split, n in wanted.items()
    }


# The image files a program's code names (``exts = ['jpg', 'png']``, ``glob("*.JPEG")``,
# ``endswith(".png")``): a string literal that is an image suffix, with or without "*." or
# ".". A hand-written glob is case-sensitive, so the stand-in's files are named as the code
# names them; ImageNet's ".JPEG" where it names none (torchvision's ImageFolder takes any).
IMAGE_SUFFIX = re.compile(r"""(['"])(?:\*?\.)?(jpe?g|JPE?G|png|PNG)\1""")
DEFAULT_IMAGE_SUFFIX = ".JPEG"
# How much of a program is read for them: its Python files, each up to this many bytes.
SUFFIX_SCAN_FILES, SUFFIX_SCAN_BYTES = 2000, 1 << 20


def image_suffix(program: Path | None) -> str:
    """The image suffix the program's Python files under ``program`` name most (the first
    named, on a tie), else :data:`DEFAULT_IMAGE_SUFFIX`. The stand-ins folder is skipped."""
    if program is None or not program.is_dir():
        return DEFAULT_IMAGE_SUFFIX
    counts: dict[str, int] = {}
    for i, path in enumerate(sorted(program.rglob("*.py"))):
        if i >= SUFFIX_SCAN_FILES:
            break
        if STANDIN_DIR in path.relative_to(program).parts or not path.is_file():
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(SUFFIX_SCAN_BYTES)
        except OSError:
            continue
        for m in IMAGE_SUFFIX.finditer(text):
            counts["." + m.group(2)] = counts.get("." + m.group(2), 0) + 1
    return max(counts, key=counts.__getitem__) if counts else DEFAULT_IMAGE_SUFFIX


def write_image_folder(root: Path, batch: int | None = None, program: Path | None = None) -> int:
    """``root/{train,val}/<class>/<n>.JPEG``: small RGB images with a pattern per class (the
    ImageFolder layout), a few batches of ``batch`` where given, named with the suffix the
    code under ``program`` names (:func:`image_suffix`). Returns how many were written."""
    import torch
    from PIL import Image

    suffix = image_suffix(program)
    written = 0
    for split, per_class in images_per_class(batch).items():
        gen = data.generator("imagefolder", split)
        classes = len(IMAGE_CLASSES)
        targets = torch.arange(classes).repeat_interleave(per_class)
        pixels = data.images(len(targets), (IMAGE_SIDE, IMAGE_SIDE, 3), targets, classes, gen)
        for i, (img, target) in enumerate(zip(pixels, targets.tolist(), strict=True)):
            folder = root / split / IMAGE_CLASSES[target]
            folder.mkdir(parents=True, exist_ok=True)
            # the format follows the suffix (JPEG or PNG), as a user's files are
            Image.fromarray(img.numpy()).save(folder / f"{i:05d}{suffix}", quality=95)
            written += 1
    return written


# COCO: split -> images; the categories (COCO's own ids and names, a few of them) and the
# images' size (width, height; not square, as COCO's are not)
COCO_SPLITS = {"train2017": 8, "val2017": 4}
COCO_CATEGORIES = {1: "person", 3: "car", 17: "cat", 18: "dog"}
COCO_SIZE = (64, 48)
COCO_OBJECTS = 3  # at most, per image


def _coco_objects(gen: torch.Generator) -> list[tuple[int, list[int]]]:
    """(category id, [x, y, w, h]) for one to COCO_OBJECTS boxes inside the image."""
    import torch

    width, height = COCO_SIZE
    ids = list(COCO_CATEGORIES)
    objects = []
    for _ in range(int(torch.randint(1, COCO_OBJECTS + 1, (), generator=gen))):
        w, h = (int(torch.randint(8, s // 2, (), generator=gen)) for s in (width, height))
        x = int(torch.randint(0, width - w, (), generator=gen))
        y = int(torch.randint(0, height - h, (), generator=gen))
        objects.append((ids[int(torch.randint(0, len(ids), (), generator=gen))], [x, y, w, h]))
    return objects


def write_coco(root: Path) -> int:
    """The COCO detection layout: ``root/{train2017,val2017}/<id>.jpg`` and
    ``root/annotations/instances_{train2017,val2017}.json`` (images, annotations with bbox,
    area, iscrowd, category_id and a polygon segmentation, categories). Each object is a
    box filled with its category's colour on a noisy background, so a detector can learn
    it. Returns how many images were written."""
    import torch
    from PIL import Image

    width, height = COCO_SIZE
    colours = {c: data.generator("coco", "colour", c) for c in COCO_CATEGORIES}
    colour = {c: (torch.rand(3, generator=g) * 255).to(torch.uint8) for c, g in colours.items()}
    categories = [{"id": i, "name": n, "supercategory": n} for i, n in COCO_CATEGORIES.items()]
    written = 0
    for split, count in COCO_SPLITS.items():
        gen = data.generator("coco", split)
        images: list[dict[str, Any]] = []
        annotations: list[dict[str, Any]] = []
        for image_id in range(1, count + 1):
            name = f"{image_id:012d}.jpg"
            pixels = (torch.rand((height, width, 3), generator=gen) * 80).to(torch.uint8)
            for category, (x, y, w, h) in _coco_objects(gen):
                pixels[y : y + h, x : x + w] = colour[category]
                polygon = [x, y, x + w, y, x + w, y + h, x, y + h]
                annotations.append(
                    {
                        "id": len(annotations) + 1,
                        "image_id": image_id,
                        "category_id": category,
                        "bbox": [x, y, w, h],
                        "area": w * h,
                        "iscrowd": 0,
                        "segmentation": [polygon],
                    }
                )
            (root / split).mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.numpy()).save(root / split / name, quality=95)
            images.append({"id": image_id, "file_name": name, "width": width, "height": height})
            written += 1
        instances = {
            "info": {"description": "torchport synthetic COCO stand-in"},
            "licenses": [],
            "images": images,
            "annotations": annotations,
            "categories": categories,
        }
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(instances))
    return written
