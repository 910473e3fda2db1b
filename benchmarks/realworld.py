"""Migrate and verify public CUDA training repositories, rules only, and print one row each.

Not part of ``make test``: it needs the repositories of ``REPOS`` below (the three tables
of docs/benchmarks/realworld.md; the third, repositories with Triton or CUDA C++ kernels)
fetched first (DEVELOPERS.md says how) and takes many minutes. Each repository is extracted at its
pinned commit from the fetched snapshot into a scratch folder (never into this checkout:
their code is not ours to commit), given the data its entry command needs when torchport
cannot be expected to make it (a file the repository itself ships elsewhere, a folder of
images in a layout only its README describes), then migrated to the target with
``torchport migrate --llm none`` and verified with a small step budget.

    export TORCHPORT_MIRRORS=DIR                         # where the snapshots are fetched
    python benchmarks/realworld.py                       # every table, target tpu
    python benchmarks/realworld.py --table 2             # the second table only
    python benchmarks/realworld.py --only llm.c,dcgan    # names or owner/name parts
    python benchmarks/realworld.py --mirrors DIR --work DIR --target neuron --json out.json

Every row: verdict, its reason, constructs found = converted + left for a human +
performance advisories, what was compared (steps or outputs), both precision checks of a
tpu port (agents/precision_check.py: (a) the port with exact float32 matmuls against the
original, (b) at the TPU's default arithmetic against (a), each its max rel deviation and
result, (b) with the wall time of its extra run), wall time. A repository
that goes past its time budget is stopped and shown as ``timeout``; one whose snapshot
is missing is ``not fetched``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Where the fetched snapshots are (OWNER+NAME/repo, bare git directories): --mirrors, or this
# environment variable; no default, since where they are is one machine's choice.
MIRRORS_ENV = "TORCHPORT_MIRRORS"
MIRRORS = Path(os.environ[MIRRORS_ENV]) if os.environ.get(MIRRORS_ENV) else None
NO_MIRRORS = (
    f"where are the fetched snapshots? give --mirrors DIR or set {MIRRORS_ENV} "
    "(DEVELOPERS.md says how to fetch them)"
)


def mirrors_of(given: Path | None) -> Path:
    """The snapshots' folder the user named, or a clear refusal."""
    if given is None:
        raise SystemExit(NO_MIRRORS)
    return given


@dataclass(frozen=True)
class Prepare:
    """One step of data the benchmark provides: ``copy`` a file (or folder) the repository
    ships elsewhere, ``images`` (N small images in a folder, named by a pattern), ``json``
    (a file listing the images of a folder), ``write`` (a short launcher the README has its
    user write: ``source`` is its text, composed by this benchmark from the README's example,
    never the repository's code), ``imagenet-extra`` (dinov2's ImageNet metadata files for
    split ``pattern``: ``count`` entries cycling over the images under ``source``)."""

    kind: str
    target: str
    source: str = ""
    count: int = 8
    size: int = 64
    pattern: str = "{i:03d}.jpg"
    mode: str = "RGB"


@dataclass(frozen=True)
class Repo:
    name: str  # owner/name, as fetched
    commit: str
    entry: str  # the command, run in ``folder``
    folder: str = "."  # what is migrated: the repository or one of its folders
    prepare: tuple[Prepare, ...] = ()
    budget_s: int = 900  # the whole migrate (two runs and the rest)
    memory_mb: int = 4096  # per run
    # requirements the repository states only in prose (INSTALL.md), given as a user
    # following it would: ``--deps FILE``
    deps: tuple[str, ...] = ()
    label: str = ""  # a short name when one repository has several entries
    # folders of the snapshot a user installs from source (``pip install .``): built as
    # wheels into a folder that pip sees through PIP_FIND_LINKS, named in ``deps``
    wheels: tuple[str, ...] = ()
    # requirements the repository's README installs (``pip install -r requirements.txt``) that
    # the index has as source distributions only: pip builds them on the user's machine, and
    # torchport installs wheels only, so the benchmark builds them (``pip wheel --no-binary``)
    # into the same PIP_FIND_LINKS folder, as that user's pip would
    sdists: tuple[str, ...] = ()
    table: int = 1  # the table of docs/benchmarks/realworld.md the repository is in
    # the README clones with --recursive: each git submodule is extracted at the commit the
    # tree pins, from its own fetched snapshot (a GitHub URL's owner/name under --mirrors)
    recursive: bool = False

    @property
    def title(self) -> str:
        return self.label or self.name.split("/")[1]


REPOS: tuple[Repo, ...] = (
    Repo("karpathy/ng-video-lecture", "52201428ed7b46804849dea0b3ccf0de9df1a5c3", "python gpt.py"),
    Repo(
        "karpathy/llm.c",
        "f1e2ace651495b74ae22d45d1723443fd00ecd3a",
        "python train_gpt2.py --input_bin dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
        " --model d12 --batch_size 2 --sequence_length 32"
        " --total_batch_size 64 --num_iterations 4 --write_tensors 0",
    ),
    Repo(
        "rasbt/LLMs-from-scratch",
        "28c65cdfbc3338e2e040016eea4b7fdf556e4d57",
        "python gpt_train.py",
        folder="ch05/01_main-chapter-code",
        memory_mb=8192,  # GPT-2 small (124M parameters) and Adam's state
        # the script downloads the text the repository keeps in chapter 2
        prepare=(
            Prepare("copy", "the-verdict.txt", source="ch02/01_main-chapter-code/the-verdict.txt"),
        ),
    ),
    Repo(
        "akamaster/pytorch_resnet_cifar10",
        "d5489e8995e81e91ce6b1d69dcc98ad579b0b153",
        "python trainer.py --arch resnet20 --epochs 1 -b 16 -j 0",
    ),
    Repo(
        "eriklindernoren/PyTorch-GAN",
        "36d3c77e5ff20ebe0aeefd322326a134a279b93e",
        "python dcgan.py --n_epochs 1 --batch_size 8 --n_cpu 0",
        folder="implementations/dcgan",
        label="PyTorch-GAN dcgan",
    ),
    Repo(
        "eriklindernoren/PyTorch-GAN",
        "36d3c77e5ff20ebe0aeefd322326a134a279b93e",
        "python wgan_gp.py --n_epochs 1 --batch_size 8 --n_cpu 0",
        folder="implementations/wgan_gp",
        label="PyTorch-GAN wgan_gp",
    ),
    Repo(
        "milesial/Pytorch-UNet",
        "21d7850f2af30a9695bbeea75f3136aa538cfc4a",
        "python train.py --epochs 1 --batch-size 2 --scale 0.5 --validation 25",
        # Carvana's layout: data/imgs/NAME.jpg with data/masks/NAME_mask.gif
        prepare=(
            Prepare("images", "data/imgs", count=8, size=64, pattern="car{i:03d}.jpg"),
            Prepare(
                "images", "data/masks", count=8, size=64, pattern="car{i:03d}_mask.gif", mode="1"
            ),
        ),
    ),
    Repo(
        "sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning",
        "cc9c7e2f4017938d414178d3781fed8dbe442852",
        "python train.py",
    ),
    Repo(
        "sgrvinod/a-PyTorch-Tutorial-to-Super-Resolution",
        "c30556bc79a9d43539f2d658722bcb7ff5011ddb",
        "python train_srresnet.py",
        # create_data_lists.py's output: a JSON list of training images of at least 96 px
        prepare=(
            Prepare("images", "images", count=8, size=128),
            Prepare("json", "train_images.json", source="images"),
        ),
    ),
    Repo(
        "facebookresearch/dino",
        "7c446df5b9f45747937fb0d72314eb9f7b66930a",
        "python main_dino.py --arch vit_tiny --patch_size 16 --data_path /path/to/imagenet/train"
        " --batch_size_per_gpu 2 --epochs 1 --num_workers 0 --local_crops_number 2"
        " --output_dir out --use_fp16 true --warmup_epochs 0 --warmup_teacher_temp_epochs 0",
    ),
    Repo(
        "facebookresearch/deit",
        "7e160fe43f0252d17191b71cbb5826254114ea5b",
        "python main.py --model deit_tiny_patch16_224 --data-path /path/to/imagenet"
        " --batch-size 2 --epochs 1 --num_workers 0 --output_dir out",
    ),
    Repo(
        "facebookresearch/ConvNeXt",
        "048efcea897d999aed302f2639b6270aedf8d4c8",
        "python main.py --model convnext_tiny --data_path /path/to/imagenet --batch_size 2"
        " --epochs 1 --warmup_epochs 0 --num_workers 0 --output_dir out",
        deps=("timm==0.3.2", "tensorboardX", "six"),  # INSTALL.md
    ),
    Repo(
        "facebookresearch/detr",
        "29901c51d7fe8712168b8d0d64351170bc0f83e0",
        "python main.py --coco_path /path/to/coco --batch_size 1 --epochs 1 --num_workers 0"
        " --output_dir out",
    ),
    Repo(
        "huggingface/pytorch-image-models",
        "aa4b5850c1543fa488abf260f18390eda46cf85d",
        "python train.py --data-dir /path/to/imagenet --model resnet18 --epochs 1 -b 2"
        " --workers 1 --img-size 64",
        label="timm",
    ),
    Repo(
        "ultralytics/yolov5",
        "5081342f04fb287fc2e5f2b5a4e06752b7937b1c",
        "python train.py --data coco128.yaml --weights '' --cfg yolov5n.yaml --img 64"
        " --epochs 1 --batch-size 2 --workers 0",
        label="yolov5 (stretch)",
    ),
)

# Launchers the README has its user write (``Prepare("write")``): composed by this benchmark
# from the README's example, in its own wording; each says so in its first line.
DDPM_TRAINER = """\
# Written by torchport's benchmark from the README's Trainer example (not the repository's code).
import sys

from denoising_diffusion_pytorch import GaussianDiffusion, Trainer, Unet

unet = Unet(dim=16, dim_mults=(1, 2), flash_attn=True)
diffusion = GaussianDiffusion(unet, image_size=32, timesteps=100, sampling_timesteps=10)
trainer = Trainer(
    diffusion,
    sys.argv[1],  # the folder of images
    train_batch_size=8,
    gradient_accumulate_every=2,  # the Trainer asks for an effective batch of 16 or more
    train_lr=8e-5,
    train_num_steps=4,
    ema_decay=0.995,
    amp=True,
    calculate_fid=False,  # FID downloads Inception weights
    num_samples=4,
)
trainer.train()
"""
CLIP_ZERO_SHOT = """\
# Written by torchport's benchmark from the README's usage example (not the repository's code).
import clip
import torch
from PIL import Image

device = "cuda" if torch.cuda.is_available() else "cpu"
model, preprocess = clip.load("ViT-B/32", device=device)
labels = ["a diagram", "a dog", "a cat"]
image = preprocess(Image.open("CLIP.png")).unsqueeze(0).to(device)
text = clip.tokenize(labels).to(device)
with torch.no_grad():
    logits_per_image, _ = model(image, text)
    probs = logits_per_image.softmax(dim=-1).cpu().tolist()[0]
print("label probabilities:", dict(zip(labels, probs)))
"""
# dinov2 reads its ImageNet through metadata files sized to the real split (50,000 entries for
# VAL); the README's own recipe (dump_extra) needs all 50,000 images. Tiny sizes go on the
# command line as OmegaConf ``key=value`` overrides of the repository's own yaml.
DINOV2_TINY = (
    " train.dataset_path=ImageNet:split=VAL:root=data/imagenet:extra=data/imagenet-extra"
    " student.arch=vit_small train.batch_size_per_gpu=2 train.num_workers=0"
    " train.OFFICIAL_EPOCH_LENGTH=4 optim.epochs=1 optim.warmup_epochs=0"
    " teacher.warmup_teacher_temp_epochs=0 crops.global_crops_size=64 crops.local_crops_size=32"
    " crops.local_crops_number=2 dino.head_n_prototypes=256 ibot.head_n_prototypes=256"
    " dino.head_hidden_dim=64 ibot.head_hidden_dim=64 dino.head_bottleneck_dim=32"
    " ibot.head_bottleneck_dim=32"
)

SECOND: tuple[Repo, ...] = (
    Repo(
        "openai/guided-diffusion",
        "22e0df8183507e13a7813f8d38d51b072ca1e67c",
        # improved-diffusion's training line (the README points there), tiny model and schedule
        "python scripts/image_train.py --data_dir /path/to/images --image_size 64"
        " --num_channels 32 --num_res_blocks 1 --attention_resolutions 16 --diffusion_steps 100"
        " --noise_schedule linear --lr 1e-4 --batch_size 2 --lr_anneal_steps 4 --use_fp16 True",
        table=2,
    ),
    Repo(
        "facebookresearch/mixup-cifar10",
        "eaff31ab397a90fbc0a4aac71fb5311144b3608b",
        "python train.py --lr=0.1 --seed=20170922 --decay=1e-4 --model LeNet --batch-size 16"
        " --epoch 1",
        table=2,
    ),
    Repo(
        "lucidrains/denoising-diffusion-pytorch",
        "faed4db28e724735323fa91c70aa9b28a6e1cbac",
        "python train.py path/to/your/images",
        prepare=(Prepare("write", "train.py", source=DDPM_TRAINER),),
        table=2,
    ),
    Repo(
        "facebookresearch/dinov2",
        "b8931f7bf91576930313be2c6d6af376033b35f0",
        "python -m dinov2.train.train --config-file dinov2/configs/train/vitl16_short.yaml"
        " --output-dir out" + DINOV2_TINY,
        memory_mb=8192,
        # requirements.txt's fvcore and iopath are published as sdists only
        sdists=("fvcore", "iopath"),
        prepare=(
            # ImageNet's val layout: val/CLASS/ILSVRC2012_val_NNNNNNNN.JPEG
            Prepare(
                "images",
                "data/imagenet/val/n01440764",
                count=4,
                size=64,
                pattern="ILSVRC2012_val_{i:08d}.JPEG",
            ),
            Prepare(
                "images",
                "data/imagenet/val/n01443537",
                count=4,
                size=64,
                pattern="ILSVRC2012_val_{i:08d}.JPEG",
            ),
            Prepare(
                "imagenet-extra",
                "data/imagenet-extra",
                source="data/imagenet/val",
                count=50_000,
                pattern="VAL",
            ),
        ),
        table=2,
    ),
    Repo(
        "jadore801120/attention-is-all-you-need-pytorch",
        "132907dd272e2cc92e3c10e6c4e783a87ff8893d",
        # the README's line less ``-log`` (train.py has no such option) and at tiny sizes
        "python train.py -data_pkl m30k_deen_shr.pkl -embs_share_weight -proj_share_weight"
        " -label_smoothing -output_dir output -b 8 -warmup 10 -epoch 1 -d_model 32"
        " -d_inner_hid 64 -d_k 16 -d_v 16 -n_head 2 -n_layers 1",
        label="attention-is-all-you-need",
        table=2,
    ),
    Repo(
        "bearpaw/pytorch-classification",
        "24f1c456f48c78133088c4eefd182ca9e6199b03",
        "python cifar.py -a resnet --depth 20 --epochs 1 --schedule 81 122 --gamma 0.1"
        " --wd 1e-4 --checkpoint checkpoints/cifar10/resnet-20 --train-batch 16"
        " --test-batch 16 -j 0",
        recursive=True,  # README: git clone --recursive (utils/progress is verigak/progress)
        table=2,
    ),
    Repo(
        "openai/CLIP",
        "d05afc436d78f1c48dc0dbf8e5980a9d471f35f6",
        "python zero_shot.py",
        prepare=(Prepare("write", "zero_shot.py", source=CLIP_ZERO_SHOT),),
        table=2,
    ),
    Repo(
        "huggingface/diffusers",
        "58eb52c0803ea9af3abec60841c2a093bdf1f951",
        "python train_unconditional.py --dataset_name=huggan/flowers-102-categories"
        " --resolution=32 --center_crop --random_flip --output_dir=ddpm-ema-flowers-32"
        " --train_batch_size=2 --num_epochs=1 --gradient_accumulation_steps=1 --use_ema"
        " --learning_rate=1e-4 --lr_warmup_steps=0 --mixed_precision=no",
        folder="examples/unconditional_image_generation",
        memory_mb=8192,  # the script's UNet2DModel (about 110M parameters) and Adam's state
        # the examples README: install diffusers from this source (the script checks for
        # its .dev0 version), then the example's requirements.txt; tensorboard for the
        # script's default --logger (its own error asks for it)
        wheels=(".",),
        deps=(
            "diffusers==0.40.0.dev0",
            "accelerate>=0.16.0",
            "torchvision",
            "datasets",
            "tensorboard",
        ),
        table=2,
    ),
)
# Third table (issue 34): repositories whose training path runs custom kernels, Triton or
# CUDA C++, that torchport ports without a fallback of the author's (TPK003: the kernel runs
# through the shipped Triton-on-torch runtime; TPK002: the extension builds from the CPU
# runner's host translation).
LIGER_TINY = """\
# Written by torchport's benchmark from the README's "Compose Your Own Model" example (not the
# repository's code): a tiny model of Liger modules, trained a few steps.
from types import SimpleNamespace

import torch
import torch.nn as nn
from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss, LigerRMSNorm, LigerSwiGLUMLP

torch.manual_seed(0)
config = SimpleNamespace(hidden_size=64, intermediate_size=128, hidden_act="silu")


class TinyModel(nn.Module):
    def __init__(self, vocab=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, config.hidden_size)
        self.norm = LigerRMSNorm(config.hidden_size)
        self.mlp = LigerSwiGLUMLP(config)
        self.lm_head = nn.Linear(config.hidden_size, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        return x + self.mlp(self.norm(x))


model = TinyModel().cuda()
loss_fn = LigerFusedLinearCrossEntropyLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(256, (4, 16), device="cuda")
for step in range(4):
    hidden = model(tokens[:, :-1]).reshape(-1, config.hidden_size)
    loss = loss_fn(model.lm_head.weight, hidden, tokens[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
"""
# The README: "JIT-compile C++ and/or CUDA extensions by going into the cpp/ or cuda/ folder
# and calling python jit.py"; the module it builds is the one cuda/lltm.py imports (what
# ``python setup.py install`` would have installed), trained as the README's benchmark times it.
LLTM_JIT = """\
# Written by torchport's benchmark from the README's JIT usage (`python jit.py` builds the
# extension) and its benchmark's LLTM forward and backward (not the repository's code).
import sys

import torch
from torch.utils.cpp_extension import load

lltm_cuda = load("lltm_cuda", ["lltm_cuda.cpp", "lltm_cuda_kernel.cu"], verbose=True)
sys.modules["lltm_cuda"] = lltm_cuda  # the name `python setup.py install` would install
from lltm import LLTM  # noqa: E402

device = torch.device("cuda")
X = torch.randn(16, 32, device=device)
h = torch.randn(16, 128, device=device)
C = torch.randn(16, 128, device=device)
rnn = LLTM(32, 128).to(device)
optimizer = torch.optim.SGD(rnn.parameters(), lr=1e-3)
for step in range(4):
    optimizer.zero_grad()
    new_h, new_C = rnn(X, (h, C))
    loss = new_h.sum() + new_C.sum()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.6f}")
"""

THIRD: tuple[Repo, ...] = (
    Repo(
        "pytorch/extension-cpp",
        # the last commit with the JIT path (cuda/jit.py: load(sources=[.cpp, .cu])); the
        # next one (ec66d01) rewrote the repository as a setup.py-built package
        "1031028f3b048fdea84372f3b81498db53d64d98",
        "python train_lltm.py",
        folder="cuda",
        prepare=(Prepare("write", "train_lltm.py", source=LLTM_JIT),),
        label="extension-cpp (LLTM, CUDA C++)",
        table=3,
    ),
    Repo(
        "linkedin/Liger-Kernel",
        "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c",
        "python train_tiny.py",
        folder="src",  # the package (src/liger_kernel) and the launcher beside it
        prepare=(Prepare("write", "train_tiny.py", source=LIGER_TINY),),
        label="Liger-Kernel (Triton)",
        table=3,
    ),
)
REPOS = REPOS + SECOND + THIRD
TABLES = {"1": (1,), "2": (2,), "3": (3,), "all": (1, 2, 3)}


def _submodule_urls(gitdir: Path, commit: str) -> dict[str, str]:
    """path -> URL of each submodule the tree's ``.gitmodules`` declares."""
    text = subprocess.run(
        ["git", f"--git-dir={gitdir}", "config", "--blob", f"{commit}:.gitmodules", "--list"],
        capture_output=True,
        text=True,
    ).stdout
    entries = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {
        value: entries.get(key[: -len(".path")] + ".url", "")
        for key, value in entries.items()
        if key.endswith(".path")
    }


def _submodule_mirror(url: str, mirrors: Path) -> Path | None:
    """The fetched snapshot of a GitHub URL (``https://github.com/OWNER/NAME.git``)."""
    found = re.match(r"^(?:https://|git@)github\.com[/:]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", url)
    if found is None:
        return None
    gitdir = mirrors / f"{found.group(1)}+{found.group(2)}" / "repo"
    return gitdir if gitdir.is_dir() else None


def extract(gitdir: Path, commit: str, dest: Path, mirrors: Path | None = None) -> list[str]:
    """Write the tree of ``commit`` under ``dest``; returns the paths the snapshot lacks
    (it keeps no file of 4 MiB or more, and a submodule is not fetched). Symlinks are left
    out: nothing here follows one. With ``mirrors``, each submodule is extracted too, at
    the commit the tree pins (``git clone --recursive``)."""
    listing = subprocess.run(
        ["git", f"--git-dir={gitdir}", "ls-tree", "-r", "-z", commit],
        capture_output=True,
        check=True,
    ).stdout
    reader = subprocess.Popen(
        ["git", f"--git-dir={gitdir}", "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert reader.stdin is not None and reader.stdout is not None
    missing = []
    urls = _submodule_urls(gitdir, commit) if mirrors is not None else {}
    for record in filter(None, listing.split(b"\0")):
        meta, raw_path = record.split(b"\t", 1)
        mode, kind, sha = meta.split()
        if kind == b"commit" and mirrors is not None:
            path = os.fsdecode(raw_path)
            inner = _submodule_mirror(urls.get(path, ""), mirrors)
            if inner is None:
                missing.append(f"{path} (submodule {urls.get(path) or '?'}: not fetched)")
                continue
            missing += [f"{path}/{m}" for m in extract(inner, sha.decode(), dest / path, mirrors)]
            continue
        if kind != b"blob" or mode == b"120000":
            continue
        reader.stdin.write(sha + b"\n")
        reader.stdin.flush()
        header = reader.stdout.readline().split()
        if header[1] == b"missing":
            missing.append(os.fsdecode(raw_path))
            continue
        data = reader.stdout.read(int(header[2]))
        reader.stdout.read(1)
        target = dest / os.fsdecode(raw_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if mode == b"100755":
            target.chmod(0o755)
    reader.stdin.close()
    reader.wait()
    return missing


def prepare(step: Prepare, repo_root: Path, folder: Path) -> None:
    from PIL import Image  # torchport's environment has pillow

    target = folder / step.target
    if step.kind == "copy":
        target.parent.mkdir(parents=True, exist_ok=True)
        if (repo_root / step.source).is_dir():
            shutil.copytree(repo_root / step.source, target)
        else:
            shutil.copyfile(repo_root / step.source, target)
    elif step.kind == "write":
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(step.source)
    elif step.kind == "images":
        target.mkdir(parents=True, exist_ok=True)
        for i in range(step.count):
            colour = (i * 37 % 256, i * 91 % 256, i * 53 % 256)
            image = Image.new("RGB", (step.size, step.size), colour)
            for x in range(0, step.size, 8):  # some structure, not a flat colour
                image.putpixel((x, x), (255 - colour[0], 255, 0))
            image.convert(step.mode).save(target / step.pattern.format(i=i))
    elif step.kind == "json":
        # relative to the program's folder: the run sees a copy, not this one
        images = sorted(str(p.relative_to(folder)) for p in (folder / step.source).iterdir())
        target.write_text(json.dumps(images))
    elif step.kind == "imagenet-extra":
        _imagenet_extra(folder / step.source, target, step.pattern, step.count)
    else:
        raise ValueError(f"unknown preparation {step.kind!r}")


def _imagenet_extra(images: Path, extra: Path, split: str, count: int) -> None:
    """dinov2's ImageNet metadata for ``split``: entries (actual index, class index, class id,
    class name) cycling over the images of ``images/CLASS/*_NNNNNNNN.JPEG`` up to ``count``
    (the split's real length, which the dataset asserts), and the class ids and names."""
    import numpy as np  # torchport's environment has numpy

    classes = sorted(p.name for p in images.iterdir() if p.is_dir())
    found = [
        (int(f.stem.rsplit("_", 1)[1]), index, name, name)
        for index, name in enumerate(classes)
        for f in sorted((images / name).iterdir())
    ]
    width = max(len(c) for c in classes)
    dtype = [
        ("actual_index", "<u4"),
        ("class_index", "<u4"),
        ("class_id", f"U{width}"),
        ("class_name", f"U{width}"),
    ]
    entries = np.array([found[i % len(found)] for i in range(count)], dtype=dtype)
    extra.mkdir(parents=True, exist_ok=True)
    np.save(extra / f"entries-{split}.npy", entries)
    np.save(extra / f"class-ids-{split}.npy", np.array(classes, dtype=f"U{width}"))
    np.save(extra / f"class-names-{split}.npy", np.array(classes, dtype=f"U{width}"))


def selected(table_choice: str, only: str) -> list[Repo]:
    """The repositories of ``--table`` (1, 2, 3 or all) whose owner/name or title contains one
    of ``--only``'s comma-separated parts (every one when ``only`` is empty)."""
    tables = TABLES[table_choice]
    wanted = [w.strip().lower() for w in only.split(",") if w.strip()]
    return [
        r
        for r in REPOS
        if r.table in tables
        and (not wanted or any(w in f"{r.name} {r.title}".lower() for w in wanted))
    ]


@dataclass
class Row:
    title: str
    verdict: str
    reason: str = ""
    constructs: int = 0
    converted: int = 0
    left: int = 0
    advisories: int = 0
    compared: str = ""
    wall_s: float = 0.0
    missing_files: list[str] = field(default_factory=list)
    # verification.json's ``precision``: check (a) "highest", check (b) "default"
    highest: dict[str, Any] = field(default_factory=dict)
    default: dict[str, Any] = field(default_factory=dict)
    default_s: float | None = None  # the wall time of (b)'s run, where it ran

    def checks(self) -> tuple[str, str]:
        """The two checks as table cells: max rel and result, or why (b) did not run."""
        a, b = self.highest, self.default
        first = (
            f"{a['max_rel']:.3g} {'holds' if a.get('holds') else 'fails'}"
            if a.get("steps")
            else "—"
        )
        if not b.get("ran"):
            return first, f"not run: {b.get('why', '')}" if b else "—"
        said = {True: "holds", False: "fails", None: "compared nothing"}[b.get("holds")]
        return first, f"{b.get('max_rel', 0.0):.3g} {said} (+{self.default_s or 0:g} s)"


def run_one(
    repo: Repo, mirrors: Path, work: Path, target: str, steps: int, torchport: list[str]
) -> Row:
    gitdir = mirrors / repo.name.replace("/", "+") / "repo"
    if not gitdir.is_dir():
        return Row(repo.title, "not fetched", f"no snapshot at {gitdir}")
    slug = repo.title.replace("/", "-").replace(" ", "-")
    root = work / "src" / slug
    out = work / "out" / f"{slug}-{target}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    missing = extract(gitdir, repo.commit, root, mirrors if repo.recursive else None)
    folder = root / repo.folder
    for step in repo.prepare:
        prepare(step, root, folder)
    command = [
        *torchport,
        "migrate",
        str(folder),
        "--target",
        target,
        "--out",
        str(out),
        "--entry",
        repo.entry,
        "--steps",
        str(steps),
        "--llm",
        "none",
        "--timeout",
        str(repo.budget_s // 2),
        "--memory",
        str(repo.memory_mb),
        "--format",
        "json",
        "--quiet",
    ]
    env = None
    if repo.wheels or repo.sdists:
        wheels = work / "wheels" / slug
        shutil.rmtree(wheels, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels)]
        builds = [[str(root / where)] for where in repo.wheels]
        builds += [["--no-binary", ":all:", name] for name in repo.sdists]
        for what in builds:
            built = subprocess.run([*pip, *what], capture_output=True, text=True)
            if built.returncode != 0:
                why = (built.stderr.strip().splitlines() or ["no output"])[-1]
                return Row(repo.title, "error", f"could not build a wheel of {what[-1]}: {why}")
        env = {**os.environ, "PIP_FIND_LINKS": str(wheels)}
    if repo.deps:
        requirements = work / "deps" / f"{slug}.txt"
        requirements.parent.mkdir(parents=True, exist_ok=True)
        requirements.write_text("\n".join(repo.deps) + "\n")
        command += ["--deps", str(requirements)]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=repo.budget_s, env=env
        )
    except subprocess.TimeoutExpired:
        return Row(
            repo.title, "timeout", f"past its {repo.budget_s} s budget", wall_s=repo.budget_s
        )
    wall = round(time.monotonic() - started, 1)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return Row(repo.title, "error", f"exit {done.returncode}: {tail[0][:200]}", wall_s=wall)
    summary = report.get("summary") or {}
    verification = (report.get("verification") or {}).get("verification") or {}
    parity = verification.get("parity") or {}
    compared = f"{parity.get('steps', 0)} {parity.get('compared', '')}".strip() if parity else ""
    precision = verification.get("precision") or {}
    again = (verification.get("timings") or {}).get("default_precision") or {}
    return Row(
        repo.title,
        verification.get("verdict", "?"),
        verification.get("reason", "")[:300],
        summary.get("constructs_found", 0),
        summary.get("converted", 0),
        summary.get("left_for_humans", 0),
        summary.get("advisories", 0),
        compared,
        wall,
        missing,
        precision.get("highest") or {},
        precision.get("default") or {},
        again.get("seconds"),
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| repository | verdict | constructs | converted | left | advisory | compared "
        "| (a) highest vs original | (b) TPU default vs (a) | wall s | reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reason = r.reason.replace("|", "\\|").replace("\n", " ")
        first, second = (c.replace("|", "\\|") for c in r.checks())
        lines.append(
            f"| {r.title} | {r.verdict} | {r.constructs} | {r.converted} | {r.left} "
            f"| {r.advisories} | {r.compared} | {first} | {second} "
            f"| {r.wall_s:g} | {reason} |"
        )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    lines.append("")
    lines.append(", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="tpu", choices=("tpu", "neuron", "accelerator"))
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per run")
    parser.add_argument("--only", default="", help="comma-separated parts of repository names")
    parser.add_argument(
        "--table",
        default="all",
        choices=tuple(TABLES),
        help="which table of docs/benchmarks/realworld.md",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/torchport-realworld"))
    parser.add_argument(
        "--mirrors", type=Path, default=MIRRORS, help="where fetch put the snapshots"
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--torchport",
        default=f"{shlex.quote(sys.executable)} -m torchport.cli",
        help="the command that runs torchport",
    )
    options = parser.parse_args(argv)
    repos = selected(options.table, options.only)
    rows = []
    for repo in repos:
        print(f"{repo.title}: migrating and verifying ...", file=sys.stderr, flush=True)
        row = run_one(
            repo,
            mirrors_of(options.mirrors),
            options.work,
            options.target,
            options.steps,
            shlex.split(options.torchport),
        )
        print(
            f"  {row.verdict} ({row.wall_s:g} s): {row.reason[:160]}", file=sys.stderr, flush=True
        )
        rows.append(row)
    print(table(rows))
    if options.json:
        options.json.write_text(json.dumps([r.__dict__ for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
