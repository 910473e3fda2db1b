"""Migrate and verify public CUDA training repositories, rules only, and print one row each.

Not part of ``make test``: it needs the repositories of ``shared/REALWORLD.md`` fetched
first (DEVELOPERS.md says how) and takes many minutes. Each repository is extracted at its
pinned commit from the fetched snapshot into a scratch folder (never into this checkout:
their code is not ours to commit), given the data its entry command needs when torchport
cannot be expected to make it (a file the repository itself ships elsewhere, a folder of
images in a layout only its README describes), then migrated to the target with
``torchport migrate --llm none`` and verified with a small step budget.

    python benchmarks/realworld.py                       # every repository, target tpu
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
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIRRORS = Path(os.environ.get("TORCHPORT_MIRRORS", "/work/.mirror"))


@dataclass(frozen=True)
class Prepare:
    """One step of data the benchmark provides: ``copy`` a file the repository ships
    elsewhere, ``images`` (N small images in a folder, named by a pattern), ``json``
    (a file listing the images of a folder)."""

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


def extract(gitdir: Path, commit: str, dest: Path) -> list[str]:
    """Write the tree of ``commit`` under ``dest``; returns the paths the snapshot lacks
    (it keeps no file of 4 MiB or more). Symlinks are left out: nothing here follows one."""
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
    for record in filter(None, listing.split(b"\0")):
        meta, raw_path = record.split(b"\t", 1)
        mode, kind, sha = meta.split()
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
        shutil.copyfile(repo_root / step.source, target)
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
    else:
        raise ValueError(f"unknown preparation {step.kind!r}")


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
    missing = extract(gitdir, repo.commit, root)
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
    if repo.deps:
        requirements = work / "deps" / f"{slug}.txt"
        requirements.parent.mkdir(parents=True, exist_ok=True)
        requirements.write_text("\n".join(repo.deps) + "\n")
        command += ["--deps", str(requirements)]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=repo.budget_s)
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
    wanted = [w.strip().lower() for w in options.only.split(",") if w.strip()]
    repos = [
        r for r in REPOS if not wanted or any(w in f"{r.name} {r.title}".lower() for w in wanted)
    ]
    rows = []
    for repo in repos:
        print(f"{repo.title}: migrating and verifying ...", file=sys.stderr, flush=True)
        row = run_one(
            repo,
            options.mirrors,
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
