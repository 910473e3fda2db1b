"""The dependencies a repository declares, and which of them tie it to CUDA.

Whether a requirement is CUDA-only is decided by the catalogue's own dependency
rules (``CUDA_ONLY_RULES``), so the package list lives in one place.
"""

from __future__ import annotations

import ast
import configparser
import re
import tomllib
from collections.abc import Iterator

from .catalogue import Rule
from .findings import Dependency
from .textscan import normalise_dependency_line

# the rules whose text patterns make a requirement CUDA-only: CUDA-only packages, and CUDA
# builds of torch (a +cuXXX pin, the CUDA index, conda's pytorch-cuda)
CUDA_ONLY_RULES = ("TPP002", "TPP003", "TPP005")

_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")
_SETUP_KEYWORDS = frozenset({"install_requires", "extras_require", "setup_requires"})
# What a program needs to run (``main_only``): not its extras, build or setup tools.
_SETUP_RUNTIME_KEYWORDS = frozenset({"install_requires"})


class _LineFinder:
    """Line numbers of strings taken from a parsed file, searched in document order."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def find(self, needle: str) -> int:
        for number, line in enumerate(self.lines, start=1):
            if needle in line:
                return number
        return 1


def _is_cuda_only(text: str, rules: list[Rule]) -> bool:
    return any(re.search(p, text) for rule in rules for p in rule.text_patterns)


def _entry(text: str, path: str, line: int, rules: list[Rule]) -> Dependency | None:
    text = text.strip()
    if not text or text.startswith("-"):
        return None
    m = _REQUIREMENT.match(text)
    if not m:
        return None
    spec = (m.group(2) or "") + m.group(3).strip()
    return Dependency(m.group(1), spec, path, line, _is_cuda_only(text, rules))


def requirement_lines(text: str) -> Iterator[tuple[int, str]]:
    """A requirements file's lines as pip reads them: one that ends in a backslash goes on
    on the next (``rich==13.7 \\`` then ``--hash=sha256:...``), numbered as its first line;
    a comment line never continues."""
    first, pending = 0, ""
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.endswith("\\") and not raw.lstrip().startswith("#"):
            first = first if pending else number
            pending += raw[:-1]
            continue
        if pending:
            yield first, pending + raw
            pending = ""
        else:
            yield number, raw
    if pending:
        yield first, pending


def _requirements(
    text: str, path: str, rules: list[Rule], main_only: bool = False
) -> Iterator[Dependency]:
    for number, raw in requirement_lines(text):
        dep = _entry(normalise_dependency_line(raw), path, number, rules)
        if dep:
            yield dep


def _conda(
    text: str, path: str, rules: list[Rule], main_only: bool = False
) -> Iterator[Dependency]:
    """List items under ``dependencies:`` (and its ``pip:`` list); channels are not packages."""
    section = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if raw[:1].isalpha():
            section = stripped.split(":", 1)[0]
        if section != "dependencies":
            continue
        if stripped.startswith("- ") and not stripped.endswith(":"):
            dep = _entry(normalise_dependency_line(raw), path, number, rules)
            if dep and "/" not in dep.name:
                yield dep


def _pyproject(
    text: str, path: str, rules: list[Rule], main_only: bool = False
) -> Iterator[Dependency]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    project = data.get("project", {})
    found: list[str] = list(project.get("dependencies", []))
    if not main_only:
        for extra in project.get("optional-dependencies", {}).values():
            found.extend(extra)
        found.extend(data.get("build-system", {}).get("requires", []))
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {})
    found.extend(name for name in poetry if name != "python")
    lines = _LineFinder(text)
    for requirement in found:
        if isinstance(requirement, str):
            dep = _entry(requirement, path, lines.find(requirement), rules)
            if dep:
                yield dep


def _setup_cfg(
    text: str, path: str, rules: list[Rule], main_only: bool = False
) -> Iterator[Dependency]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return
    values = [parser.get("options", "install_requires", fallback="")]
    if parser.has_section("options.extras_require") and not main_only:
        values += [v for _, v in parser.items("options.extras_require")]
    lines = _LineFinder(text)
    for value in values:
        for requirement in value.splitlines():
            requirement = requirement.split("#", 1)[0].strip()
            if requirement:
                dep = _entry(requirement, path, lines.find(requirement), rules)
                if dep:
                    yield dep


_READERS = {
    "requirements": _requirements,
    "conda": _conda,
    "pyproject": _pyproject,
    "setup": _setup_cfg,
}


def dependencies_in_text(
    kind: str, text: str, path: str, rules: list[Rule], main_only: bool = False
) -> list[Dependency]:
    """Every requirement a dependency file states; ``main_only``: only those the program
    needs to run (no extras, no build requirements)."""
    reader = _READERS.get(kind)
    return list(reader(text, path, rules, main_only)) if reader else []


def requirement_strings(
    tree: ast.Module, keywords: frozenset[str] = _SETUP_KEYWORDS
) -> list[tuple[str, ast.Constant]]:
    """String literals passed to ``setup(install_requires=..., extras_require=...)``: each
    string with the node that holds it (its place in the file)."""
    found: list[tuple[str, ast.Constant]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg not in keywords:
                continue
            keys = set(map(id, kw.value.keys)) if isinstance(kw.value, ast.Dict) else set()
            found += [
                (sub.value, sub)
                for sub in ast.walk(kw.value)
                if isinstance(sub, ast.Constant)
                and isinstance(sub.value, str)
                and id(sub) not in keys
            ]
    return found


def dependencies_in_setup_py(
    tree: ast.Module, path: str, rules: list[Rule], main_only: bool = False
) -> list[Dependency]:
    keywords = _SETUP_RUNTIME_KEYWORDS if main_only else _SETUP_KEYWORDS
    strings = requirement_strings(tree, keywords)
    entries = (_entry(text, path, node.lineno, rules) for text, node in strings)
    return [dep for dep in entries if dep]
