"""Codemods for non-Python files (shell, Make, YAML/JSON configs, Dockerfiles):
line edits inside the span a text rule matched, and nothing outside it."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..findings import Finding
from ..targets import profile
from .engine import Edit, SourceResult
from .launch_blocking import launch_blocking_text
from .torchbuild import torch_build_line
from .tpu_launch import LEFT as LAUNCH_LEFT
from .tpu_launch import launch_step_line
from .visible_devices import LEFT_FOR_TPU, visible_devices_line

PORTABLE_COUNT = '$(python -c "import torch; print(torch.accelerator.device_count())")'


def _device(match: str, target: str) -> str | None:
    found = profile(target)
    if found.device is None:
        return None
    if found.one_device_per_process:  # "cuda:1" names a device the process cannot see
        match = re.sub(r"(?i)(cuda):(?!0\b)\d+", r"\1", match, count=1)
    return re.sub(r"cuda", found.device, match, count=1, flags=re.IGNORECASE)


def _backend(match: str, target: str) -> str | None:
    backend = profile(target).dist_backend
    if backend is None:
        return None
    return re.sub(r"nccl", backend, match, count=1, flags=re.IGNORECASE)


def _nproc(match: str, target: str) -> str | None:
    # device-agnostic code: torchrun's "auto" counts through torch.accelerator, and on a
    # CPU-only host takes the CPUs where device_count() would start no process at all
    count = "auto" if profile(target).may_lack_device else PORTABLE_COUNT
    return re.sub(r"gpu\b", count, match)


# rule -> how the matched text becomes the target's (None: cannot, say so)
TEXT_FIXES: dict[str, Callable[[str, str], str | None]] = {
    "TPD002": _device,
    "TPN002": _backend,
    "TPN008": _nproc,
    "TPD025": launch_blocking_text,
}
LINE_REMOVALS = frozenset({"TPN006"})  # settings that mean nothing on the target
# rule -> how a whole line holding it becomes the target's (several lines, "" to remove it,
# None: cannot); run after the span fixes, once per line whatever its number of findings
LINE_FIXES: dict[str, Callable[[str, str, str], str | None]] = {
    "TPP003": torch_build_line,
    "TPD024": visible_devices_line,
    "TPN010": launch_step_line,
}
# every rule some text codemod handles (checked against the catalogue's kinds)
TEXT_CODEMODS = frozenset(TEXT_FIXES) | LINE_REMOVALS | frozenset(LINE_FIXES)
LINE_LEFT = {  # why a line LINE_FIXES could not rewrite is left for a human
    "TPP003": "no line rewrite for this form: change the pin by hand",
    "TPD024": f"this form, or {LEFT_FOR_TPU}",
    "TPN010": LAUNCH_LEFT,
}


def migrate_text(source: str, findings: list[Finding], target: str, path: str) -> SourceResult:
    lines = source.splitlines(keepends=True)
    edits: list[Edit] = []
    unapplied: list[tuple[Finding, str]] = []
    remove: set[int] = set()
    whole_lines = [f for f in findings if f.rule in LINE_FIXES]
    for f in sorted(findings, key=lambda f: (f.line, -f.col)):
        if f.rule in LINE_FIXES:
            continue
        if f.cell is not None or not 0 < f.line <= len(lines):
            unapplied.append((f, "no text codemod for notebook shell lines"))
            continue
        line = lines[f.line - 1]
        reason = f"{f.message}; {target}: {f.fix[target]['hint']}"
        if f.rule in LINE_REMOVALS:
            if _is_assignment_line(line):
                remove.add(f.line)
                edits.append(Edit(f.rule, path, f.line, f.line, line.rstrip("\n"), "", reason))
                continue
            new_line = _without_inline_setting(line)
            if new_line != line:
                lines[f.line - 1] = new_line
                edits.append(
                    Edit(
                        f.rule,
                        path,
                        f.line,
                        f.line,
                        line.rstrip("\n"),
                        new_line.rstrip("\n"),
                        reason,
                    )
                )
                continue
        fix = TEXT_FIXES.get(f.rule)
        span = line[f.col - 1 : f.end_col - 1]
        new_span = fix(span, target) if fix else None
        if new_span is None or new_span == span:
            unapplied.append((f, "no text codemod for this rule in this kind of file"))
            continue
        new_line = line[: f.col - 1] + new_span + line[f.end_col - 1 :]
        lines[f.line - 1] = new_line
        edits.append(
            Edit(f.rule, path, f.line, f.line, line.rstrip("\n"), new_line.rstrip("\n"), reason)
        )
    _fix_whole_lines(lines, whole_lines, target, path, edits, unapplied, remove)
    text = "".join(line for i, line in enumerate(lines, start=1) if i not in remove)
    return SourceResult(text, edits, unapplied)


def _fix_whole_lines(
    lines: list[str],
    findings: list[Finding],
    target: str,
    path: str,
    edits: list[Edit],
    unapplied: list[tuple[Finding, str]],
    remove: set[int],
) -> None:
    """LINE_FIXES: each line rewritten once; its other findings of the rule go with it."""
    done: dict[tuple[str, int], bool] = {}
    for f in sorted(findings, key=lambda f: (f.line, f.col)):
        key = (f.rule, f.line)
        if key not in done:
            ok = f.cell is None and 0 < f.line <= len(lines) and f.line not in remove
            line = lines[f.line - 1] if ok else ""
            new = LINE_FIXES[f.rule](line, target, path) if ok else None
            done[key] = new is not None
            if new is not None:
                lines[f.line - 1] = new
                if not new:
                    remove.add(f.line)
                reason = f"{f.message}; {target}: {f.fix[target]['hint']}"
                edits.append(
                    Edit(f.rule, path, f.line, f.line, line.rstrip("\n"), new.rstrip("\n"), reason)
                )
        if not done[key]:
            unapplied.append((f, LINE_LEFT[f.rule]))


_INLINE_SETTINGS = (
    re.compile(r",\s*\"NCCL_[A-Z0-9_]+\"\s*:\s*(\"[^\"]*\"|[\w.]+)"),  # , "NCCL_X": "1"
    re.compile(r"\"NCCL_[A-Z0-9_]+\"\s*:\s*(\"[^\"]*\"|[\w.]+)\s*,?\s*"),  # "NCCL_X": "1",
    re.compile(r"\bNCCL_[A-Z0-9_]+=\S*\s+"),  # NCCL_X=1 torchrun ...
)


def _without_inline_setting(line: str) -> str:
    """Drop one inline NCCL setting: a JSON pair, or an environment prefix of a command."""
    for rx in _INLINE_SETTINGS:
        new = rx.sub("", line, count=1)
        if new != line:
            return new
    return line


def _is_assignment_line(line: str) -> bool:
    """``export NCCL_X=1``, ``ENV NCCL_X 1``, ``NCCL_X: 1``: the whole line is the setting."""
    return bool(re.match(r"\s*(export\s+|ENV\s+|-\s*)?[\"']?NCCL_[A-Z0-9_]+[\"']?\s*[=: ]", line))
