"""Benchmark tasks: a CUDA project, what a correct port reaches, and golden ports.

A suite is a folder of task folders (layout in ``evals/suite/README.md``);
``builtin`` is the one shipped with torchport. Task files are validated when
loaded, so a typo in a suite is an error naming the file, not a wrong score.
"""

from __future__ import annotations

import importlib.resources
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from torchport.agents.verdicts import Verdict
from torchport.tools.catalogue import TARGETS

DIFFICULTIES = ("easy", "medium", "hard", "control")


KERNEL_TAG = "custom-kernel"


class SuiteError(ValueError):
    """A suite or task file is malformed; the message names the file."""


@dataclass(frozen=True)
class Task:
    name: str
    root: Path  # the task folder
    title: str
    difficulty: str
    entry: tuple[str, ...]
    constructs: tuple[str, ...]
    expected: dict[str, str]
    tags: tuple[str, ...] = field(default=())

    @property
    def family(self) -> str:
        """``kernels`` for a project built around its own CUDA or Triton kernels (the tag
        ``custom-kernel``), whose port needs an LLM or a human; ``libraries`` otherwise:
        CUDA-only libraries and runtime features that the catalogue ports as data."""
        return "kernels" if KERNEL_TAG in self.tags else "libraries"

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    def golden(self, target: str) -> Path:
        return self.root / "golden" / target


def builtin_suite() -> Path:
    return Path(str(importlib.resources.files("torchport.evals").joinpath("suite")))


def load_task(folder: Path) -> Task:
    path = folder / "task.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SuiteError(f"{path}: {exc}") from exc

    def need(key: str) -> object:
        if key not in data:
            raise SuiteError(f"{path}: missing {key!r}")
        return data[key]

    difficulty = str(need("difficulty"))
    if difficulty not in DIFFICULTIES:
        raise SuiteError(f"{path}: difficulty {difficulty!r} is not one of {DIFFICULTIES}")
    expected = need("expected")
    if not isinstance(expected, dict):
        raise SuiteError(f"{path}: expected is not a table of target = verdict")
    for target, verdict in expected.items():
        if target not in TARGETS or verdict not in Verdict.judged():
            raise SuiteError(f"{path}: expected {target} = {verdict!r} is not a target/verdict")
    if not (folder / "repo").is_dir():
        raise SuiteError(f"{folder}: no repo/ folder")
    try:
        entry = tuple(shlex.split(str(need("entry"))))
    except ValueError as exc:
        raise SuiteError(f"{path}: entry does not parse: {exc}") from exc
    return Task(
        name=str(data.get("name", folder.name)),
        root=folder,
        title=str(data.get("title", folder.name)),
        difficulty=difficulty,
        entry=entry,
        constructs=tuple(data.get("constructs", ())),
        expected=expected,
        tags=tuple(data.get("tags", ())),
    )


def load_suite(spec: str | Path, names: list[str] | None = None) -> list[Task]:
    """``builtin`` or a folder of task folders; ``names`` keeps only those tasks."""
    root = builtin_suite() if str(spec) == "builtin" else Path(spec)
    if not root.is_dir():
        raise SuiteError(f"no suite folder at {root}")
    tasks = [load_task(d) for d in sorted(root.iterdir()) if (d / "task.toml").is_file()]
    if not tasks:
        raise SuiteError(f"{root} holds no task folders (each needs a task.toml)")
    if names:
        unknown = set(names) - {t.name for t in tasks}
        if unknown:
            raise SuiteError(f"unknown tasks: {', '.join(sorted(unknown))}")
        tasks = [t for t in tasks if t.name in names]
    return tasks
