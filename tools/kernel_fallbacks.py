"""The fallbacks a port runs custom kernels through, as data, and how to take one out again.

Rules alone port a kernel by shipping a runtime beside it: Triton kernels run, unchanged,
on ``triton_on_torch`` (``codemods.triton_runtime``); a CUDA C++ extension builds from its
host translation through ``cudacpu_host`` (``codemods.cuda_host``). Both are correct and
slow. A PyTorch replacement of the kernel's call site is the fast port; once the program
no longer calls the kernels, the kernels, the runtime's imports and the shipped files go,
so that what is left is the replacement alone (``unship``, ``shipped_unused``).
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from torchport.sandbox import astparse

from .kernel_sites import unused_kernels


@dataclass(frozen=True)
class Fallback:
    """One runtime a port can carry: the module its files import, the files shipped once
    per folder, and the name pattern of files shipped per kernel (a host translation)."""

    kind: str
    module: str
    shipped: tuple[str, ...]
    per_kernel: str = ""  # a regex over file names; "" when nothing is shipped per kernel


FALLBACKS = (
    Fallback("triton_on_torch", "triton_on_torch", ("triton_on_torch.py",)),
    Fallback(
        "host build",
        "cudacpu_host",
        ("cudacpu_host.py", "cudacpu_runtime.h", "cudacpu_runtime.cpp"),
        r"[\w.-]+_host\.cpp",
    ),
)


def _imports(text: str, module: str) -> bool:
    return bool(re.search(rf"^\s*(from|import)\s[^\n]*\b{re.escape(module)}\b", text, re.M))


def fallback_of(text: str) -> Fallback | None:
    """The runtime a port's file runs its kernels through (None: none)."""
    return next((f for f in FALLBACKS if _imports(text, f.module)), None)


def _top_level_spans(tree: ast.Module) -> dict[str, tuple[int, int]]:
    spans = {}
    for node in tree.body:
        names = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        decorators = [d.lineno for d in getattr(node, "decorator_list", ())]
        for name in names:
            spans[name] = (min([node.lineno, *decorators]), node.end_lineno or node.lineno)
    return spans


def names_span(text: str, names: Iterable[str]) -> tuple[int, int] | None:
    """The lines from the first to the last top-level definition of ``names`` in ``text``
    (None: one is not there, or the text does not parse)."""
    try:
        spans = _top_level_spans(astparse.parse(text))
    except SyntaxError:
        return None
    found = [spans.get(name) for name in names]
    if not found or any(s is None for s in found):
        return None
    return min(s[0] for s in found if s), max(s[1] for s in found if s)


def _runtime_imports(tree: ast.Module, module: str) -> list[tuple[ast.stmt, list[str]]]:
    """Top-level imports of ``module`` (absolute or from the package) and the names each binds."""
    out: list[tuple[ast.stmt, list[str]]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == module for a in node.names):
                out.append((node, [a.asname or a.name.split(".")[0] for a in node.names]))
        elif isinstance(node, ast.ImportFrom):
            named = (node.module or "").split(".")[0] == module
            if named or any(a.name == module for a in node.names):
                out.append((node, [a.asname or a.name for a in node.names]))
    return out


def unship(text: str, kernels: Iterable[str]) -> tuple[str, list[str]]:
    """``text`` without ``kernels`` once nothing reads them, and without the runtime's
    imports that nothing uses then; the names removed (none: ``text`` as it is)."""
    dead = unused_kernels(text, also=kernels)
    if not dead:
        return text, []
    lines = text.splitlines(keepends=True)
    for start, end, _ in dead:  # bottom-up: earlier line numbers still hold
        del lines[start - 1 : end]
    kept = "".join(lines)
    try:
        tree = astparse.parse(kept)
    except SyntaxError:
        return text, []
    fallback = fallback_of(kept)
    if fallback is not None:
        reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        lines = kept.splitlines(keepends=True)
        found = _runtime_imports(tree, fallback.module)
        for node, bound in sorted(found, key=lambda f: -f[0].lineno):
            if not reads & set(bound):
                del lines[node.lineno - 1 : node.end_lineno or node.lineno]
        kept = "".join(lines)
    return re.sub(r"\n{4,}", "\n\n\n", kept), sorted(name for _, _, name in dead)


def shipped_unused(overlay: Mapping[str, str], original: Iterable[str]) -> list[str]:
    """The files a fallback shipped (in ``overlay``, not among the ``original``'s paths)
    that nothing in the port needs any more: a runtime no Python file of its folder
    imports, a host translation no Python file names."""
    added = set(overlay) - set(original)
    python = {p: t for p, t in overlay.items() if p.endswith(".py")}
    out = []
    for path in sorted(added):
        folder, name = posixpath.split(path)
        users = [t for p, t in python.items() if posixpath.dirname(p) == folder and p != path]
        for fallback in FALLBACKS:
            runtime = name in fallback.shipped
            per_kernel = bool(fallback.per_kernel) and re.fullmatch(fallback.per_kernel, name)
            if (runtime and not any(_imports(t, fallback.module) for t in users)) or (
                per_kernel and not any(name in t for p, t in python.items() if p != path)
            ):
                out.append(path)
    return sorted(set(out))
