"""Synthetic data *files*: image folders, token files and text, written where a run may write.

The harness writes these into the scratch copy for paths named in the command (see
``sandbox.commandline``); the launcher writes token files for ``np.memmap``/``np.fromfile``
of a missing file (see ``sandbox.synthetic.numpy_files``). Contents are deterministic (the
same bytes for the original and the migrated run) and learnable (class patterns, English-ish
text), so losses go down. Stand-ins are only ever written under ``root``: a path that would
leave it is redirected into ``root/STANDIN_DIR``.
"""

from __future__ import annotations

import os
import re
from array import array
from pathlib import Path

import torch

from . import data

STANDIN_DIR = ".torchport-data"
TOKENS = 1 << 16  # enough for a block of 1024 tokens and a batch of them
LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_INTS = 20240520, 1, 256
# split -> images per class; the classes and image side below
IMAGE_SPLITS = {"train": 16, "val": 4}
IMAGE_CLASSES = ("class_a", "class_b", "class_c", "class_d")
IMAGE_SIDE = 32


def standin_path(root: Path, requested: str, in_place: bool = True) -> Path:
    """Where a stand-in for ``requested`` goes: the path itself when it lies inside ``root``
    (and ``in_place``), else an entry of ``root/STANDIN_DIR`` named after it, so nothing is
    ever written outside ``root``."""
    root = root.resolve()
    wanted = Path(os.path.normpath(root / requested))
    if in_place and wanted != root and wanted.is_relative_to(root):
        return wanted
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", requested).strip("._") or "data"
    return root / STANDIN_DIR / slug


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


def write_image_folder(root: Path) -> int:
    """``root/{train,val}/<class>/<n>.JPEG``: small RGB images with a pattern per class (the
    ImageFolder layout). Returns how many images were written."""
    from PIL import Image

    written = 0
    for split, per_class in IMAGE_SPLITS.items():
        gen = data.generator("imagefolder", split)
        classes = len(IMAGE_CLASSES)
        targets = torch.arange(classes).repeat_interleave(per_class)
        pixels = data.images(len(targets), (IMAGE_SIDE, IMAGE_SIDE, 3), targets, classes, gen)
        for i, (img, target) in enumerate(zip(pixels, targets.tolist(), strict=True)):
            folder = root / split / IMAGE_CLASSES[target]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img.numpy()).save(folder / f"{i:05d}.JPEG", quality=95)
            written += 1
    return written
