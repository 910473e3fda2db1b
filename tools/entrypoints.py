"""Guess how a repository is run, ranked by likelihood, so the verifier can run it.

Evidence is additive: a ``__main__`` guard, a training-ish file name, argparse,
a ``.backward()`` call, being named by a launch line (``torchrun``, ``python
x.py``, ``python -m pkg``) in a script or README, or by a console-script entry.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field

from .findings import EntryPoint

_LAUNCH = re.compile(
    r"(?P<cmd>(?:torchrun|python3?\s+-m\s+torch\.distributed\.(?:launch|run)|python3?"
    r"|accelerate\s+launch|deepspeed)"
    r"(?:\s+--?[\w-]+(?:[= ][^\s]+)?)*\s+"
    r"(?:-m\s+(?P<module>[\w.]+)|(?P<script>[\w./-]+\.py))[^\n`]*)"
)
_TRAIN_NAME = re.compile(r"(^|/)(train|finetune|pretrain|fit)[\w-]*\.py$")
_MAIN_GUARD = re.compile(r"^if\s+__name__\s*==\s*[\"']__main__[\"']\s*:", re.MULTILINE)
_MAIN_NAME = re.compile(r"(^|/)(main|run|__main__|cli|app|infer|inference|eval|evaluate)\.py$")


@dataclass
class _Candidate:
    path: str
    kind: str = "script"
    command: str = ""
    score: int = 0
    reasons: list[str] = field(default_factory=list)

    def add(self, points: int, reason: str) -> None:
        if reason not in self.reasons:
            self.score += points
            self.reasons.append(reason)


def may_be_entry_point(rel: str, text: str) -> bool:
    """Whether a Python file can be an entry point at all (the scanner keeps only these)."""
    return (
        rel.endswith("__main__.py")
        or _TRAIN_NAME.search(rel) is not None
        or _MAIN_GUARD.search(text) is not None
    )


class EntryPointFinder:
    def __init__(self) -> None:
        self.candidates: dict[str, _Candidate] = {}

    def _get(self, path: str) -> _Candidate:
        if path not in self.candidates:
            self.candidates[path] = _Candidate(path, command=f"python {path}")
        return self.candidates[path]

    def python_file(self, rel: str, text: str) -> None:
        if not may_be_entry_point(rel, text):
            return
        has_main = _MAIN_GUARD.search(text) is not None
        is_pkg_main = rel.endswith("/__main__.py")
        cand = self._get(rel)
        if has_main:
            cand.add(3, "__main__ guard")
        if is_pkg_main:
            package = rel.rsplit("/", 1)[0].replace("/", ".")
            cand.kind, cand.command = "module", f"python -m {package}"
            cand.add(3, "package __main__")
        if _TRAIN_NAME.search(rel):
            cand.add(3, "training script name")
        elif _MAIN_NAME.search(rel):
            cand.add(1, "entry-point file name")
        if "argparse" in text or "click" in text or "fire." in text:
            cand.add(1, "command-line arguments")
        if ".backward(" in text:
            cand.add(2, "trains (calls .backward())")
        if rel.count("/"):
            cand.add(-rel.count("/"), "depth")

    def launch_lines(self, rel: str, text: str, known: set[str]) -> None:
        """Scripts, Makefiles and READMEs that run a Python file name it as an entry point."""
        base = rel.rsplit("/", 1)[0] + "/" if "/" in rel else ""
        for m in _LAUNCH.finditer(text):
            target = m.group("script")
            if target:
                target = target.removeprefix("./")
                path = target if target in known else base + target
                if path not in known:
                    continue
                cand = self._get(path)
            else:
                module_path = m.group("module").replace(".", "/")
                path = next(
                    (p for p in (f"{module_path}/__main__.py", f"{module_path}.py") if p in known),
                    None,
                )
                if path is None:
                    continue
                cand = self._get(path)
                cand.kind = "module"
            cand.add(2, f"launched in {rel}")
            command = " ".join(m.group("cmd").split())
            if "torchrun" in command or "torch.distributed" in command:
                cand.kind = "torchrun"
            if not cand.command or (
                cand.command.startswith("python ") and len(command) > len(cand.command)
            ):
                cand.command = command

    def console_scripts(self, rel: str, text: str, known: set[str]) -> None:
        try:
            scripts = tomllib.loads(text).get("project", {}).get("scripts", {})
        except tomllib.TOMLDecodeError:
            return
        for name, target in scripts.items():
            module = str(target).split(":", 1)[0].replace(".", "/")
            path = next((p for p in (f"{module}.py", f"{module}/__init__.py") if p in known), None)
            if path:
                cand = self._get(path)
                cand.kind, cand.command = "console-script", name
                cand.add(2, f"console script '{name}'")

    def ranked(self) -> list[EntryPoint]:
        ordered = sorted(self.candidates.values(), key=lambda c: (-c.score, c.path))
        return [
            EntryPoint(
                c.path, c.kind, c.command, c.score, tuple(r for r in c.reasons if r != "depth")
            )
            for c in ordered
            if c.score > 0
        ]
