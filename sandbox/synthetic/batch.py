"""The batch size the program uses, so that a stand-in dataset holds a few batches of it.

A stand-in dataset smaller than one batch gives a ``drop_last`` loader no batch at all
(a speed-run script's batch of 1024 over 512 images: ``ZeroDivisionError`` in the
program's own averaging), and the verdict would blame the program. The sandbox knows the
batch size nowhere else, so it is read where the program states it, in the process that
builds the dataset:

- the command (``sys.argv``, after the harness lowered it): ``-b 8``, ``--batch-size=8``,
  ``--batch_size 8`` and the other spellings of :data:`OPTIONS`;
- the program's source (its script, and the file that builds the dataset): literals given
  to a batch-size name (``batch_size=2048`` in a ``DataLoader`` call, ``bs = 1024``,
  ``"batch_size": 512`` in a dict) and, when the command gives no batch option, argparse
  defaults of a batch option (``add_argument("--batch-size", type=int, default=256)``).

The largest value found is the hint; none found is ``None`` (the default sizes stand).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterable
from types import FrameType

# Option names (no dashes, ``-`` as ``_``, lower case) that give a batch size.
OPTIONS = frozenset(
    {
        "b",
        "bs",
        "batch_size",
        "batchsize",
        "train_batch_size",
        "per_device_train_batch_size",
        "batch_size_per_gpu",
        "micro_batch_size",
        "eval_batch_size",
        "test_batch_size",
        "val_batch_size",
        "per_device_eval_batch_size",
    }
)
# ``batch_size=2048``, ``bs = 1024``, ``"batch_size": 512`` (not ``batch_size == 3``)
LITERAL = re.compile(
    r"""(?<!\w)['"]?(\w*batch_?size\w*|bs)['"]?\s*(?:=(?!=)|:)\s*(\d+)\b""", re.IGNORECASE
)
# Words of a batch-size name that make it count tokens or a whole step across ranks and
# accumulation (a GPT-2 reproduction's ``total_batch_size = 524288``), not samples.
NOT_SAMPLES = ("total", "token", "global")
# an ``add_argument(`` call's option strings and its ``default=N``
ARGUMENT = re.compile(r"add_argument\(((?:(?!add_argument)[\s\S]){0,600})")
OPTION_STRING = re.compile(r"""['"](-{1,2}[\w-]+)['"]""")
DEFAULT = re.compile(r"\bdefault\s*=\s*(\d+)\b")
# The largest batch a hint may ask for: a stand-in never outgrows memory on a typo.
LIMIT = 4096


def normalized(option: str) -> str:
    return option.lstrip("-").replace("-", "_").lower()


def from_command(args: Iterable[str]) -> list[int]:
    """Batch sizes given on the command (``-b 8``, ``--batch-size=8``)."""
    found, pending = [], False
    for token in args:
        if pending and token.isdigit():
            found.append(int(token))
        option, eq, value = token.partition("=")
        pending = not eq and token.startswith("-") and normalized(token) in OPTIONS
        if eq and token.startswith("-") and normalized(option) in OPTIONS and value.isdigit():
            found.append(int(value))
    return found


def from_source(text: str, defaults: bool = True) -> list[int]:
    """Batch-size literals in a program's source; argparse defaults when ``defaults``."""
    found = [
        int(m.group(2))
        for m in LITERAL.finditer(text)
        if not any(word in m.group(1).lower() for word in NOT_SAMPLES)
    ]
    if defaults:
        for call in ARGUMENT.finditer(text):
            options = {normalized(o) for o in OPTION_STRING.findall(call.group(1)[:200])}
            default = DEFAULT.search(call.group(1))
            if options & OPTIONS and default is not None:
                found.append(int(default.group(1)))
    return found


@functools.lru_cache(maxsize=32)
def program_source(path: str) -> str:
    """A program file's text (its first MiB; "" when unreadable), read once per run."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""


_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the sandbox package


def caller() -> str:
    """The file of the innermost frame that is not the sandbox's: the program's code that
    builds the dataset (where its loader's batch size is usually written too)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((_OWN, "<")):
            return name
        frame = frame.f_back
    return ""


def hint(files: Iterable[str] = ()) -> int | None:
    """The program's batch size: the largest on its command or in its script, the file
    that called into the stand-in, or ``files`` (capped at :data:`LIMIT`), or None where
    none is stated."""
    command = from_command(sys.argv[1:])
    script = sys.argv[0] if sys.argv and sys.argv[0].endswith(".py") else ""
    paths = dict.fromkeys(os.path.abspath(p) for p in (script, caller(), *files) if p)
    found = list(command)
    for path in paths:
        found += from_source(program_source(path), defaults=not command)
    found = [n for n in found if n > 0]
    return min(max(found), LIMIT) if found else None
