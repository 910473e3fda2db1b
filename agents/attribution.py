"""Whether something torchport put on a failing run's path caused the failure.

The verifier runs the original with torchport's stand-ins (datasets, weights, absent
libraries such as torchvision), with some arguments lowered for a short run, in torchport's
own environment and in a sandbox without a terminal or a network. A failure there is not
the original's until none of these was involved: "the original fails here too" about a
failure torchport caused tells a user that their repository is broken. ``attribute`` reads
a run's result (its error, the whole traceback the sandbox records, the stand-ins it served,
the arguments it lowered, stderr) and names what torchport did and the next step:

    found = attribute(result, imports=imported_names(texts))
    found.sentence()  # "torchport's stand-in for torchvision caused this, not the program: ..."

The structural checks are one function each, in one ordered table (``CHECKS``); the facts
of the sandbox that are told apart by text are data (``data/attribution.toml``).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from torchport.sandbox import astparse
from torchport.sandbox.launch import OWN_CODE

from .diagnose import traceback_exception
from .verdicts import FailureKind

# torchport's stand-in modules live here; a frame in them is a stand-in's code.
SYNTHETIC_DIR = os.path.join(OWN_CODE, "sandbox", "synthetic") + os.sep
# Which library each stand-in file stands in for.
STANDIN_FILES = {
    "vision": "torchvision's datasets and transforms",
    "vision_ops": "torchvision's operators",
    "audio": "torchaudio's datasets",
    "hf": "Hugging Face datasets",
    "tokenizer": "tiktoken",
    "weights": "pretrained weights",
    "hub": "torch.hub",
    "numpy_files": "numpy token files",
    "experiment_log": "wandb",
    "torch_compat": "torch._six",
    "files": "data files",
    "data": "datasets",
    "finder": "absent libraries",
}
# How many of the innermost frames count as "at the failure".
NEAR = 3
# Errors that a dataset with fewer samples than one batch ends in (zero batches).
EMPTY_LOADER = re.compile(
    r"^(?:ZeroDivisionError|StopIteration)\b|num_samples should be a positive integer"
)
# A program's own floor on its data (``assert len(images) >= 100, "you should have at least
# 100 images in your folder"``): the number, said of the items a dataset holds (not "an
# effective batch size of at least 16").
_ITEMS = r"(?:images?|samples?|files?|examples?|items?|pictures?|photos?|clips?|rows?|documents?)"
AT_LEAST = re.compile(
    rf"(?i)\b(?:at least|a minimum of|no fewer than)\s+(\d+)\s+(?:\w+\s+)?{_ITEMS}\b"
    rf"|\b(\d+)\s+or more\s+(?:\w+\s+)?{_ITEMS}\b"
)
# What a stand-in dataset's record says of columns it took from the real dataset's features
# (sandbox/synthetic/hf.py): a column missing there is missing in the real one too.
KNOWN_COLUMNS = "the dataset's features"
# The column a failing read asked for: ``KeyError: 'image'`` from a dict of columns, or the
# real datasets' ``Column image not in the dataset``.
_COLUMN = re.compile(r"^'(\w+)'$|Column '?(\w+)'? not in the dataset")
# The message of the target runs' hiding finder (sandbox.target_imports).
OWN_ONLY = "torchport has it only to run the original's code"
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_FROM_MODULE = re.compile(r"cannot import name '\w+' from '([\w.]+)'|module '([\w.]+)' has no")
_ARGPARSE = re.compile(r"^[^\n]*: error: ([^\n]*)$", re.MULTILINE)
KINDS = ("sandbox-start", "standin", "own-environment", "lowered-argument", "sandbox-fact")


@dataclass(frozen=True)
class Attribution:
    """What torchport put on the failing path (``kind``, one of ``KINDS``), said as the head
    of a reason (``cause``), the evidence for it, and what the user can do (``next_step``)."""

    kind: str
    cause: str
    evidence: str
    next_step: str

    def sentence(self) -> str:
        if self.kind == "sandbox-start":
            return f"{self.cause}: {self.evidence}; {self.next_step}"
        return f"{self.cause} caused this, not the program: {self.evidence}; {self.next_step}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Fact:
    """One entry of ``data/attribution.toml``."""

    id: str
    kind: str
    where: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    next: str
    types: tuple[str, ...] = ()
    next_url: str = ""


@functools.cache
def facts() -> tuple[Fact, ...]:
    text = resources.files(__package__).joinpath("data", "attribution.toml").read_text("utf-8")
    table = tomllib.loads(text)["fact"]
    return tuple(
        Fact(
            id=t["id"],
            kind=t["kind"],
            where=t["where"],
            patterns=tuple(re.compile(p, re.MULTILINE) for p in t["patterns"]),
            cause=t["cause"],
            next=t["next"],
            types=tuple(t.get("types", ())),
            next_url=t.get("next_url", ""),
        )
        for t in table
    )


# torchport's own folders in a message, as a reason shows them: a package of the dependency
# overlay (tools.depinstall: <cache>/envs/<key>/prefix/lib/pythonX.Y/site-packages/) where
# the user's own environment would have it, the program's scratch copy
# (<tmp>/torchport-run-XXXX/program/) as the repository's own path, torchport's code as
# ``torchport/``.
_OWN_PATHS = (
    (
        re.compile(r"/[^\s'\"()]*?/envs/[0-9a-f]+/prefix/lib/python3\.\d+/site-packages/"),
        "site-packages/",
    ),
    (re.compile(r"/[^\s'\"()]*?/torchport-run-[^/\s'\"]+/program/"), ""),
    (re.compile(re.escape(OWN_CODE + os.sep)), "torchport/"),
)


def shortened(text: str) -> str:
    """``text`` with torchport's own folders shortened (``_OWN_PATHS``)."""
    for pattern, short in _OWN_PATHS:
        text = pattern.sub(short, text)
    return text


def first_line(text: str, limit: int = 300) -> str:
    """A message's first non-empty line, at most ``limit`` characters: a reason is one line.
    A message that carries a traceback (a rank's failure, re-raised by ``mp.spawn`` or a
    launcher: "-- Process 0 terminated with the following error: Traceback ...") gives its
    exception line instead, which is what the run died of (the operator a backend lacks).
    torchport's own folders in it are shortened (``shortened``); the JSON keeps them."""
    text = str(text)
    line = traceback_exception(text) if "Traceback (most recent call last):" in text else None
    line = shortened(line or next((ln.strip() for ln in text.splitlines() if ln.strip()), ""))
    return line if len(line) <= limit else line[: limit - 1] + "…"


def imported_names(texts: Iterable[str]) -> frozenset[str]:
    """The top-level modules the program's own files import (``import a.b``, ``from a import
    b``; relative imports are its own). A file that does not parse adds nothing."""
    names: set[str] = set()
    for text in texts:
        try:
            tree = astparse.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.partition(".")[0])
    return frozenset(names)


def _error(result: Mapping[str, Any]) -> Mapping[str, Any]:
    error = result.get("error")
    return error if isinstance(error, Mapping) else {}


def _message(result: Mapping[str, Any]) -> str:
    error = _error(result)
    return f"{error.get('type') or 'Error'}: {error.get('message') or ''}"


def _frames(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    frames = _error(result).get("traceback")
    return [f for f in frames if isinstance(f, Mapping)] if isinstance(frames, list) else []


# An installed library's frame: the path inside site-packages (an overlay's or the
# interpreter's), e.g. ``timm/data/mixup.py``.
_INSTALLED = re.compile(r"[\\/](?:site|dist)-packages[\\/](.+)$")
# Libraries whose frames say nothing about who called them: torch raising for a call a
# library made, and torchport's own runtime around it.
_NOT_THE_CALLER = ("torch", "torchport", "_pytest", "typing_extensions")


def library_site(result: Mapping[str, Any]) -> str:
    """``timm/data/mixup.py:19`` when the failing run's innermost frame that is neither
    torch's nor torchport's is in an installed library rather than the program: the
    program's own frame (its reason's ``FILE:LINE``) only called into it, and no rewrite
    of the program's files reaches that line. "" when the program's code is innermost."""
    for frame in reversed(_frames(result)):
        path = str(frame.get("file") or "")
        if path.startswith(OWN_CODE + os.sep) or path.startswith("<"):
            continue
        installed = _INSTALLED.search(path)
        if installed is None:
            return ""
        inside = installed.group(1).replace("\\", "/")
        if inside.split("/", 1)[0] in _NOT_THE_CALLER:
            continue
        return f"{inside}:{frame.get('line')}"
    return ""


def _standin_frame(result: Mapping[str, Any], imports: frozenset[str] | None) -> Attribution | None:
    """A frame of torchport's stand-in modules at the failure."""
    for frame in reversed(_frames(result)[-NEAR:]):
        path = str(frame.get("file") or "")
        if path.startswith(SYNTHETIC_DIR):
            stem = os.path.splitext(os.path.basename(path))[0]
            what = STANDIN_FILES.get(stem, "a library")
            return Attribution(
                "standin",
                f"torchport's stand-in for {what}",
                f"it failed in the stand-in's own code ({os.path.relpath(path, OWN_CODE)}:"
                f"{frame.get('line')}, {frame.get('function')}): {first_line(_message(result))}",
                "install the real library (--deps auto with it in the requirements, or --deps "
                "FILE naming it) to run with it instead, and report the stand-in's failure",
            )
    return None


def _standin_module(
    result: Mapping[str, Any], imports: frozenset[str] | None
) -> Attribution | None:
    """A module torchport served in place of an absent library lacks what was imported
    from it (a library probing torchvision imports torchvision.transforms.functional)."""
    served = [str(m) for m in result.get("standin_modules") or []]
    message = str(_error(result).get("message") or "")
    found = _NO_MODULE.search(message) or _FROM_MODULE.search(message)
    if not served or found is None:
        return None
    module = next(g for g in found.groups() if g)
    parents = [m for m in served if module == m or module.startswith(m + ".")]
    if not parents:
        return None
    top = parents[0].partition(".")[0]
    return Attribution(
        "standin",
        f"torchport's stand-in for {top}",
        f"{top} is not installed here, so torchport served a small stand-in, which lacks "
        f"what the run imported: {first_line(_message(result))}",
        f"install the real {top} (--deps auto with it in the requirements, or --deps FILE "
        "naming it)",
    )


def _own_environment(
    result: Mapping[str, Any], imports: frozenset[str] | None
) -> Attribution | None:
    """A package of torchport's own environment, which the program never imports, found by
    a library's probe and then refused in a run on the emulated device."""
    error = _error(result)
    message = str(error.get("message") or "")
    found = _NO_MODULE.search(message)
    if error.get("type") != "ModuleNotFoundError" or found is None or OWN_ONLY not in message:
        return None
    top = found.group(1).partition(".")[0]
    if imports is None or top in imports:
        return None  # the program imports it itself: the port's to drop (TPP001)
    return Attribution(
        "own-environment",
        f"torchport's own environment (it has {top}, for the original's run)",
        f"the program never imports {top}, but a library it uses found it installed and "
        f"imported it, and the run on the emulated device refuses it: {first_line(message)}",
        "nothing in the program needs to change; report it to torchport (its environment "
        "should not show the package to the program's libraries)",
    )


def _lowered_argument(
    result: Mapping[str, Any], imports: frozenset[str] | None
) -> Attribution | None:
    """The program's argument parser refused the command after torchport changed it."""
    error = _error(result)
    rewrites = [r for r in result.get("command_rewrites") or [] if isinstance(r, Mapping)]
    if not rewrites or error.get("type") != "SystemExit" or str(error.get("message")) != "2":
        return None
    said = _ARGPARSE.findall(str(result.get("stderr_tail") or ""))
    complaint = said[-1] if said else ""
    named = [r for r in rewrites if complaint and str(r.get("argument")) in complaint]
    changed = ", ".join(
        f"{r.get('argument')} {r.get('before')} -> {r.get('after')}" for r in named or rewrites
    )
    why = f" ({complaint})" if complaint else ""
    return Attribution(
        "lowered-argument",
        f"torchport's lowered argument{'s' if len(named or rewrites) > 1 else ''} {changed}",
        f"the program's argument parser refused the command with exit status 2{why}",
        "rerun with --keep-args (torchport then passes the command as written), or give the "
        "option a value the program accepts that is small enough for a short run",
    )


def _sized(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        r
        for r in result.get("synthetic_data") or []
        if isinstance(r, Mapping) and isinstance(r.get("size"), int) and r["size"] > 0
    ]


def _standin_size(result: Mapping[str, Any], imports: frozenset[str] | None) -> Attribution | None:
    """A stand-in dataset smaller than one of the program's batches (zero batches), or
    than the floor the program (or a library it calls) checks for (``at least 100``)."""
    text = _message(result)
    sized = _sized(result)
    if not sized:
        return None
    small = min(sized, key=lambda r: r["size"])
    name = f"{small.get('library')} {small.get('dataset')}"
    if EMPTY_LOADER.search(text):
        return Attribution(
            "standin",
            f"torchport's stand-in for {name} ({small['size']} samples)",
            f"a loader over fewer samples than one batch has no batches: {first_line(text)}",
            f"pass a batch size below {small['size']} in --entry",
        )
    floors = [int(a or b) for a, b in AT_LEAST.findall(text)]
    datasets = [r for r in sized if not r.get("standin")]  # not a tokenizer's vocabulary
    if not floors or not datasets:
        return None
    small = min(datasets, key=lambda r: r["size"])
    name = f"{small.get('library')} {small.get('dataset')}"
    floor = max(floors)
    # at or above the floor, the run still counted fewer: it does not see the stand-in's
    # items (files named otherwise than it looks for them), the stand-in's failure too
    why = (
        f"the stand-in holds fewer samples than the run checks for ({floor})"
        if small["size"] < floor
        else f"the stand-in holds {small['size']}, yet the run counted fewer than {floor}: "
        "it does not find the stand-in's items (named otherwise than it looks for them?)"
    )
    return Attribution(
        "standin",
        f"torchport's stand-in for {name} ({small['size']} samples)",
        f"{why}: {first_line(text)}",
        "report it to torchport (a stand-in should hold what the program asks for, named as "
        "it looks for it), or give the program a real dataset of that size in --entry",
    )


def _standin_columns(
    result: Mapping[str, Any], imports: frozenset[str] | None
) -> Attribution | None:
    """A column read (``examples["image"]``) that a stand-in dataset lacks: the real
    dataset has it, the stand-in was not told."""
    error = _error(result)
    found = _COLUMN.search(str(error.get("message") or ""))
    if error.get("type") not in ("KeyError", "ValueError") or found is None:
        return None
    column = next(g for g in found.groups() if g)
    lacking = [
        r
        for r in result.get("synthetic_data") or []
        if isinstance(r, Mapping)
        and isinstance(r.get("columns"), list)
        and column not in r["columns"]
        and r.get("columns_from") != KNOWN_COLUMNS  # the real dataset lacks it too
    ]
    # a bare KeyError is a column's only where the failing line subscripts with its name;
    # the real library's message says so itself
    read = re.search(rf"""\[\s*['"]{column}['"]\s*\]""", _code(result))
    if not lacking or (found.group(1) and read is None):
        return None
    standin = lacking[0]
    have = ", ".join(str(c) for c in standin["columns"])
    return Attribution(
        "standin",
        f"torchport's stand-in for {standin.get('library')} {standin.get('dataset')} "
        f"(columns: {have})",
        f"the run read the column {column!r}, which the real dataset has and the stand-in "
        f"lacks: {first_line(_message(result))}",
        "report the dataset's columns to torchport (sandbox/data/hf_datasets.toml names the "
        "datasets it knows), or give the program local data in --entry",
    )


def _code(result: Mapping[str, Any]) -> str:
    frames = _frames(result)[-NEAR:]
    frame = _error(result).get("frame")
    if not frames and isinstance(frame, Mapping):
        frames = [frame]
    return "\n".join(str(f.get("code") or "") for f in frames)


_TEXTS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "message": _message,
    "stderr": lambda r: str(r.get("stderr_tail") or ""),
    "code": _code,
}


def _sandbox_fact(result: Mapping[str, Any], imports: frozenset[str] | None) -> Attribution | None:
    """A fact of the sandbox (``data/attribution.toml``) the failure matches."""
    kind = str(_error(result).get("type") or "")
    for fact in facts():
        if fact.types and kind not in fact.types:
            continue
        text = _TEXTS[fact.where](result)
        match = next((m for p in fact.patterns if (m := p.search(text))), None)
        if match is None:
            continue
        said = match.group(0) if fact.where == "stderr" else _message(result)
        cause = f"torchport's sandbox ({fact.cause})" if fact.kind == "sandbox-fact" else fact.cause
        evidence, step = first_line(said), fact.next
        urls = [str(r) for r in result.get("network") or [] if "://" in str(r)]
        if fact.next_url and urls:
            evidence += f" (it reached for {urls[0]})"
            step = fact.next_url.format(url=urls[0], call=program_call(result) or "its own code")
        return Attribution(fact.kind, cause, evidence, step)
    return None


def program_call(result: Mapping[str, Any]) -> str:
    """``zero_shot.py:7 (`model = clip.load("ViT-B/32")`)``: the outermost frame of the
    program's own files (a path relative to its folder), where it called what failed; ""
    when the traceback has none."""
    for frame in _frames(result):
        path = str(frame.get("file") or "")
        if path and not os.path.isabs(path) and not path.startswith("<"):
            code = str(frame.get("code") or "").strip()
            return f"{path}:{frame.get('line')}" + (f" (`{code}`)" if code else "")
    return ""


Check = Callable[[Mapping[str, Any], "frozenset[str] | None"], Attribution | None]
# In order: the first that finds torchport on the path says so.
CHECKS: tuple[tuple[str, Check], ...] = (
    ("sandbox-start", lambda r, i: _sandbox_fact(r, i) if _started_not(r) else None),
    ("standin-frame", _standin_frame),
    ("standin-module", _standin_module),
    ("own-environment", _own_environment),
    ("lowered-argument", _lowered_argument),
    ("standin-size", _standin_size),
    ("standin-columns", _standin_columns),
    ("sandbox-fact", _sandbox_fact),
)


def _started_not(result: Mapping[str, Any]) -> bool:
    return _error(result).get("type") in FailureKind.torchports()


def attribute(
    result: Mapping[str, Any] | None,
    imports: frozenset[str] | None = None,
    kinds: Iterable[str] = KINDS,
) -> Attribution | None:
    """What of torchport's was on ``result``'s failing path (a failed run's
    ``RunResult.to_json()``), or None when nothing was: the failure is the program's.
    ``imports``: the top-level modules the program imports itself (``imported_names``;
    None, unknown: a package of torchport's environment is never blamed). ``kinds``: the
    kinds of cause to consider."""
    if not result or result.get("status") == "ok":
        return None
    wanted = set(kinds)
    for _, check in CHECKS:
        found = check(result, imports)
        if found is not None and found.kind in wanted:
            return found
    return None
