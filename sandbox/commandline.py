"""The program's arguments, made fit for a short sandboxed run.

A launch line copied from a README asks for things a verification cannot give: a dataset
at ``/path/to/imagenet``, 300 epochs of 224-pixel images in batches of 256 on 8 workers, a
rendezvous at a public address. Before both runs (the original and the migration get the
same result) the harness passes the program's arguments through :func:`rewrite`, which

- points data arguments that are placeholders, or that name a path missing from the tree,
  at synthetic stand-ins it writes into the scratch copy (an ImageFolder tree, an llm.c
  token shard, a text file; see ``sandbox.synthetic.files``), only ever creating them: a
  path that leads out of the copy through one of the repository's symlinks, or one the
  repository already has, gets none (the program runs as it would without it, and the
  record says why), and
- shrinks size and time arguments to small values (a table, below), within what the
  program's own parser accepts (``sandbox.program_options``): a value outside an option's
  ``choices`` is never given; the smallest choice below the original is, or none. A user
  who wants the command as written turns this off (``lower=False``: ``--keep-args``), and
  a lowering the program refused at run time (argparse's exit 2) is ``withdrawn``.

Only the command changes, never the code; every change, and every lowering not made and
why, is returned for the report.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from torchport.sandbox.safepath import Refused

from .program_options import Option
from .synthetic import batch, files

# Devices a run may assume when the command asks for more ranks than it was given: the
# emulator's (and the reference shim's) default device count.
DEFAULT_DEVICES = 2


@dataclass(frozen=True)
class Rewrite:
    """One argument changed: the option (or ``argument N`` for a positional), why."""

    argument: str
    before: str
    after: str
    why: str


@dataclass
class Rewritten:
    args: list[str]
    rewrites: list[Rewrite] = field(default_factory=list)
    standins: list[dict[str, Any]] = field(default_factory=list)  # as synthetic_data records
    # lowerings not made: ``after`` is what the table would have given, ``why`` why not
    kept: list[Rewrite] = field(default_factory=list)
    lowered: list[Rewrite] = field(default_factory=list)  # the size and time ones of rewrites

    def rewrites_json(self) -> list[dict[str, str]]:
        return [asdict(r) for r in self.rewrites]

    def kept_json(self) -> list[dict[str, str]]:
        return [asdict(r) for r in self.kept]


def _names(*spellings: str) -> frozenset[str]:
    return frozenset(spellings)


# Size and time options (spelled without dashes, ``-`` as ``_``, lower case) -> the value a
# short run uses and what it controls. A value is only ever lowered, never raised.
SMALL_VALUES: dict[frozenset[str], tuple[int, str]] = {
    _names(
        "epochs",
        "epoch",
        "num_epochs",
        "n_epochs",
        "nepochs",
        "max_epochs",
        "train_epochs",
        "total_epochs",
    ): (1, "epochs"),
    batch.OPTIONS: (8, "batch size"),  # the spellings the stand-ins size themselves by
    _names(
        "workers",
        "num_workers",
        "n_workers",
        "nworkers",
        "j",
        "dataloader_num_workers",
        # one, not none: loaders with persistent_workers or prefetch_factor (timm's) need one
    ): (1, "data loader workers"),
    _names(
        "img_size",
        "image_size",
        "input_size",
        "crop_size",
        "resolution",
        "imgsz",
        "img",
        "train_crop_size",
        "val_crop_size",
        "val_resize_size",
    ): (64, "image size"),
    _names(
        "block_size",
        "seq_len",
        "seq_length",
        "sequence_length",
        "context_length",
        "max_seq_length",
        "max_seq_len",
        "max_length",
        "ctx_len",
        "n_ctx",
    ): (64, "sequence length"),
    _names("eval_iters", "val_max_steps"): (2, "evaluation batches"),
}
# Options that may take several numbers (``--input-size 3 224 224``): each is lowered.
MANY_VALUES = frozenset({"image size"})
# Options that count ranks: capped at the devices a run has.
RANK_COUNTS = _names("world_size", "gpus", "ngpus", "n_gpu", "n_gpus", "num_gpus", "nprocs")
# Options whose value is where ranks meet: a non-loopback host becomes 127.0.0.1.
RENDEZVOUS = _names("dist_url", "init_method", "master_addr", "master_address")
LOOPBACK = ("localhost", "127.", "::1", "0.0.0.0")
# Options naming a dataset folder (an ImageFolder root) and a token file.
DATA_DIRS = _names(
    "data",
    "data_path",
    "data_dir",
    "data_root",
    "dataroot",
    "datadir",
    "dataset_path",
    "dataset_dir",
    "dataset_root",
    "imagenet",
    "imagenet_path",
    "image_dir",
    "images_dir",
    "img_dir",
    "train_dir",
    "coco_path",
    "coco_dir",
    "coco_root",
)
TOKEN_FILES = _names("input_bin", "input_val_bin", "train_bin", "val_bin", "data_bin")
# Words of an option's name that say its placeholder value is input data (and output).
INPUT_WORDS = frozenset(
    {
        "data",
        "dataset",
        "dir",
        "path",
        "root",
        "bin",
        "input",
        "folder",
        "imagenet",
        "coco",
        "images",
        "train",
        "val",
    }
)
OUTPUT_WORDS = frozenset({"out", "output", "save", "log", "ckpt", "checkpoint", "resume"})
# Folder names that say a positional path is where the program writes, not data.
OUTPUT_FOLDERS = OUTPUT_WORDS | {
    "outputs",
    "logs",
    "runs",
    "checkpoints",
    "ckpts",
    "results",
    "exp",
    "experiments",
    "work_dirs",
}
# What a placeholder is: ``/path/to/x``, ``path/to/x``, ``$DATA``, ``${DATA_DIR}``, ``<data>``.
PLACEHOLDER = re.compile(r"(^|/)path/to(/|$)|^\$\{?[A-Za-z_]\w*\}?(/|$)|^<[^<>/]+>(/|$)")
GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Maker:
    """A kind of stand-in: what the report calls it, and what writes it at a path (the
    number of items written)."""

    kind: str
    write: Callable[..., int]
    # ``write`` takes ``batch=``, the program's batch size (or None), and ``program=``, the
    # copy of the program (whose code says how its files are named)
    sized: bool = False


IMAGE_FOLDER = Maker(
    "image folder (ImageFolder layout: train/ and val/)", files.write_image_folder, sized=True
)
# A stand-in's kind by the path's suffix ("" for a folder); other suffixes are left alone.
MAKERS: dict[str, Maker] = {
    "": IMAGE_FOLDER,
    ".bin": Maker("token shard (llm.c .bin: int32 header, uint16 tokens)", files.write_llmc_shard),
    ".txt": Maker("text file", files.write_text),
}
# A folder's layout by a word in the option's name or the folder's own name (``--coco_path``,
# ``--data-path /path/to/coco``); any other folder is an ImageFolder.
FOLDER_LAYOUTS: dict[str, Maker] = {
    "coco": Maker(
        "image folder (COCO detection layout: train2017/, val2017/, annotations/instances_*.json)",
        files.write_coco,
    )
}


def normalized(option: str) -> str:
    return option.lstrip("-").replace("-", "_").lower()


def _is_number(token: str) -> bool:
    return re.fullmatch(r"-?\d+", token) is not None


def _suffix(value: str) -> str:
    return "" if value.endswith("/") else Path(value).suffix.lower()


def fillable(option: str | None, value: str) -> bool:
    """Whether ``value`` (of ``option``, None for a positional) is data a stand-in can be
    made for: a placeholder for an input path, or a path given to a data option."""
    suffix = _suffix(value)
    if suffix not in MAKERS:
        return False
    name = normalized(option or "")
    if name in TOKEN_FILES:
        return suffix == ".bin"
    if PLACEHOLDER.search(value):
        words = set(name.split("_"))
        path_like = "path/to" in value  # a flag's option may be followed by a positional
        return not words & OUTPUT_WORDS and (
            option is None or path_like or bool(words & INPUT_WORDS)
        )
    if option is None:  # ``train.py /data/imagenet``: a folder path, unless it reads as output
        words = set(re.split(r"[/_.\-]+", value.lower()))
        return suffix == "" and "/" in value.strip("/") and not words & OUTPUT_FOLDERS
    return name in DATA_DIRS and ("/" in value or suffix != "")


def _maker(option: str | None, value: str) -> Maker:
    suffix = _suffix(value)
    if suffix == "":
        names = f"{normalized(option or '')} {Path(value).name.lower()}"
        layout = next((make for word, make in FOLDER_LAYOUTS.items() if word in names), None)
        if layout is not None:
            return layout
    return MAKERS[suffix]


def _many_values(option: str) -> bool:
    name = normalized(option)
    return any(name in names and why in MANY_VALUES for names, (_, why) in SMALL_VALUES.items())


def _missing(root: Path, value: str) -> bool:
    where = str(root / value)
    return not glob.glob(where) if GLOB.search(value) else not Path(where).exists()


def _numbers(choices: tuple[str, ...]) -> list[int]:
    return sorted(int(c) for c in choices if _is_number(c))


def _fitting(declared: Option, value: int, small: int) -> str | None:
    """The choice to lower ``value`` to when ``small`` is not one: the smallest choice at
    least ``small`` and below ``value``, else the largest below ``small``; None if none is
    below ``value``."""
    below = [c for c in _numbers(declared.choices or ()) if c < value]
    if not below:
        return None
    at_least = [c for c in below if c >= small]
    return str(min(at_least) if at_least else max(below))


def _listed(choices: tuple[str, ...]) -> str:
    shown = ", ".join(choices[:8])
    return shown + (f", ... ({len(choices)} in all)" if len(choices) > 8 else "")


class _Rewriter:
    def __init__(
        self,
        root: Path,
        devices: int,
        options: dict[str, Option] | None = None,
        lower: bool = True,
        withdrawn: dict[str, str] | None = None,
    ) -> None:
        self.root, self.devices = root, max(devices, DEFAULT_DEVICES)
        self.options, self.lower = options or {}, lower
        self.withdrawn = withdrawn or {}  # option as typed -> why the program refused it
        self.kept: list[Rewrite] = []
        self.lowered: list[Rewrite] = []
        self.rewrites: list[Rewrite] = []
        self.standins: list[dict[str, Any]] = []
        # a stand-in asked for twice is made once, after the pass (``write``)
        self.made: dict[Path, Maker] = {}
        self.entries: list[tuple[dict[str, Any], Path]] = []

    def number(self, option: str, value: str) -> str:
        name = normalized(option)
        small: int | None
        if name in RANK_COUNTS:
            small, why = self.devices, "ranks (the devices a run has)"
        else:
            small, why = next((v for names, v in SMALL_VALUES.items() if name in names), (None, ""))
        if small is None or not _is_number(value) or int(value) <= small:
            return value
        if name in RANK_COUNTS:
            return self._changed(option, value, str(small), why)
        return self._lowered(option, value, small, why)

    def _lowered(self, option: str, value: str, small: int, why: str) -> str:
        """``value`` lowered toward ``small`` where the program takes it (module doc)."""
        if not self.lower:
            return value  # --keep-args: the command as the user wrote it
        if option in self.withdrawn:
            return self._keep(option, value, str(small), self.withdrawn[option])
        declared = self.options.get(option)
        if declared is None or declared.accepts(str(small)):
            return self._lower(option, value, str(small), why)
        choices = f"choices ({_listed(declared.choices or ())}) at {declared.where}"
        fitting = _fitting(declared, int(value), small)
        if fitting is None:
            return self._keep(
                option,
                value,
                str(small),
                f"{small} is not among the option's {choices}, and none is below {value}",
            )
        return self._lower(
            option, value, fitting, f"{why}: the option's {choices} do not include {small}"
        )

    def _lower(self, option: str, before: str, after: str, why: str) -> str:
        self.lowered.append(Rewrite(option, before, after, why))
        return self._changed(option, before, after, why)

    def _keep(self, option: str, value: str, lowered: str, why: str) -> str:
        self.kept.append(Rewrite(option, value, lowered, why))
        return value

    def rendezvous(self, option: str, value: str) -> str:
        if normalized(option) not in RENDEZVOUS:
            return value
        host = urlsplit(value).hostname if "://" in value else value
        if not host or host.startswith(LOOPBACK) or value.startswith(("env:", "file:")):
            return value
        after = value.replace(host, "127.0.0.1", 1)
        return self._changed(option, value, after, "rendezvous off the machine (no network)")

    def data(self, option: str | None, value: str) -> str:
        """A stand-in for a placeholder, or for a data option's missing path."""
        placeholder = PLACEHOLDER.search(value) is not None
        if not (fillable(option, value) and (placeholder or _missing(self.root, value))):
            return value
        name = GLOB.sub("0", value)
        in_place = not (placeholder or value.startswith("~"))
        make = _maker(option, value)
        try:
            target = self._place(name, in_place)
        except Refused as exc:
            # not made: the program runs as it would without it, and the report says why
            refused = {"dataset": make.kind, "size": 0, "path": value, "refused": exc.strerror}
            self.standins.append({"library": "torchport", **refused})
            return value
        self.made.setdefault(target, make)
        kind, where = make.kind, target.relative_to(self.root.resolve()).as_posix()
        entry = {"library": "torchport", "dataset": kind, "size": 0, "path": where}
        self.standins.append(entry)
        self.entries.append((entry, target))
        if Path(where).parts[0] != files.STANDIN_DIR:
            return value  # written where the program looks: the command is unchanged
        return self._changed(option or "argument", value, where, f"synthetic {kind}")

    def write(self, batch_size: int | None) -> None:
        """Write the stand-ins, once the command is final: a folder holds a few batches of
        ``batch_size`` (``synthetic.batch``), the batch the rewritten command runs with."""
        sizes = {
            target: make.write(
                target, **({"batch": batch_size, "program": self.root} if make.sized else {})
            )
            for target, make in self.made.items()
        }
        for entry, target in self.entries:
            entry["size"] = sizes[target]

    def _place(self, name: str, in_place: bool) -> Path:
        """Where the stand-in for ``name`` goes (``files.standin_path``): a path that leads
        out of the copy, or one the repository already has there, is Refused. A stand-in
        is only ever written where nothing is, so it never writes through a symlink."""
        target = files.standin_path(self.root, name, in_place=in_place)
        if target not in self.made and (target.exists() or target.is_symlink()):
            raise Refused(name, "already exists in the repository; a stand-in only creates")
        return target

    def _changed(self, option: str, before: str, after: str, why: str) -> str:
        self.rewrites.append(Rewrite(option, before, after, why))
        return after

    def value(self, option: str, value: str) -> str:
        value = self.number(option, value)
        value = self.rendezvous(option, value)
        return self.data(option, value)


def rewrite(
    args: list[str],
    root: Path,
    devices: int = 1,
    options: dict[str, Option] | None = None,
    lower: bool = True,
    withdrawn: dict[str, str] | None = None,
    script: Path | None = None,
) -> Rewritten:
    """``args`` (what follows the script) rewritten, with the stand-ins written under
    ``root`` (the scratch copy the program runs in). ``options``: what the program's
    parser declares (``program_options``); ``lower``: False leaves size and time
    arguments as given; ``withdrawn``: options whose lowering the program refused (the
    option as typed -> why), left as given. ``script``: the program's entry file, whose
    batch size (when the command gives none) sizes the stand-in folders."""
    r = _Rewriter(root, devices, options, lower, withdrawn)
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        option, eq, inline = token.partition("=")
        if not token.startswith("-") or _is_number(token):
            out.append(r.data(None, token))
        elif eq:
            out.append(f"{option}={r.value(option, inline)}")
        else:
            out.append(token)
            many = _many_values(option)
            first = True
            while i + 1 < len(args) and (
                (first and (not args[i + 1].startswith("-") or _is_number(args[i + 1])))
                or (many and _is_number(args[i + 1]))
            ):
                i, first = i + 1, False
                out.append(r.value(option, args[i]))
        i += 1
    r.write(program_batch(out, script))
    return Rewritten(out, r.rewrites, r.standins, r.kept, r.lowered)


def program_batch(args: list[str], script: Path | None) -> int | None:
    """The batch size the program runs with: the rewritten command's, else the largest its
    entry file states (``synthetic.batch``); None where neither says."""
    given = batch.from_command(args)
    if not given and script is not None and script.is_file():
        given = batch.from_source(script.read_text(encoding="utf-8", errors="replace"))
    return min(max(given), batch.LIMIT) if given else None


# argparse's last line on a refused command: "PROG: error: MESSAGE" (after its usage lines),
# then exit status 2.
USAGE_ERROR = re.compile(r"^\S[^\n]*?: error: (?P<message>[^\n]*)$", re.MULTILINE)
USAGE_EXIT = 2


def refused(exit_code: int | None, stderr: str, lowered: list[Rewrite]) -> dict[str, str]:
    """The ``lowered`` options a program's parser refused: it exited 2 with argparse's
    usage error naming them (``argument --img-size/-s: invalid choice: '64'``, or the
    program's own ``parser.error("--epochs must be ...")``). Option as typed -> why."""
    if exit_code != USAGE_EXIT or "usage:" not in stderr:
        return {}
    errors = list(USAGE_ERROR.finditer(stderr))
    if not errors:
        return {}
    message = errors[-1].group("message").strip()
    found = {}
    for change in lowered:
        spelled = re.compile(rf"(?<![\w-]){re.escape(change.argument)}(?![\w-])")
        if spelled.search(message):
            found[change.argument] = (
                f"the program refused {change.after} ({message[:200]}, exit {USAGE_EXIT}): "
                f"run again with {change.before} as given"
            )
    return found
