"""Which Triton constructs a source uses that triton_on_torch does not implement.

A static check, so a port can say before running anything which kernels will not run on
the target: every ``tl.X`` / ``triton.X`` (however ``triton`` was imported or aliased)
that names something the runtime lacks, and the block-pointer arguments of ``tl.load`` /
``tl.store``. What the runtime has is read from the tables at the top of its own file
(never by importing it: that imports torch), so the two cannot drift apart. A member
function of a block (``x.foo()``) is not followed: the runtime names one it lacks when the
kernel runs.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from ...sandbox import astparse

RUNTIME = Path(__file__).with_name("triton_on_torch.py")
TABLES = ("TRITON_NAMES", "NAMESPACES", "UNARY_MATH", "BINARY_MATH", "MATH_IN", "DTYPES")
# The runtime's own module names: a port imports it in triton's place.
RUNTIME_MODULES = ("triton_on_torch",)
BLOCK_POINTER_ARGS = {"load": ("boundary_check", "padding_option"), "store": ("boundary_check",)}


@functools.cache
def provided() -> dict[str, frozenset[str]]:
    """Each Triton namespace the runtime has (``triton``, ``triton.language``, ...) -> the
    names it provides there."""
    tree = astparse.parse(RUNTIME.read_text(encoding="utf-8"), str(RUNTIME))
    tables = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in TABLES
    }
    math = set(tables["UNARY_MATH"]) | set(tables["BINARY_MATH"])
    spaces = {"triton": frozenset(tables["TRITON_NAMES"].split())}
    for name, names in tables["NAMESPACES"].items():
        extra = (math if name in tables["MATH_IN"] else set()) | (
            set(tables["DTYPES"]) if name == "triton.language" else set()
        )
        spaces[name] = frozenset(names.split()) | extra
    return spaces


def display(name: str) -> str:
    """``triton.language.atomic_add`` as kernels spell it (and the runtime names it):
    ``tl.atomic_add``."""
    return "tl" + name[len("triton.language") :] if name.startswith("triton.language") else name


def _canonical_module(module: str) -> str | None:
    """``triton...`` as it is; the runtime's module (``x.triton_on_torch``) as ``triton``."""
    if module == "triton" or module.startswith("triton."):
        return module
    return "triton" if module.rpartition(".")[2] in RUNTIME_MODULES else None


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None where the chain does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the Triton name it is bound to: by ``import``, ``from ... import`` and
    plain assignments such as ``tl = triton.language``."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                canonical = _canonical_module(alias.name)
                if canonical and alias.asname:
                    aliases[alias.asname] = canonical
                elif canonical:
                    aliases[alias.name.partition(".")[0]] = "triton"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            base = _canonical_module(node.module)
            for alias in node.names:
                if alias.name in RUNTIME_MODULES:
                    aliases[alias.asname or alias.name] = "triton"
                elif base:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    assigns = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1),
        key=lambda n: n.lineno,
    )
    for node in assigns:
        target, chain = node.targets[0], _dotted(node.value)
        if isinstance(target, ast.Name) and chain and chain[0] in aliases:
            aliases[target.id] = ".".join([aliases[chain[0]], *chain[1:]])
    return aliases


def _lacking(name: str, spaces: dict[str, frozenset[str]]) -> bool:
    """Whether ``name`` (``triton.language.atomic_add``) is a name the runtime lacks in a
    namespace it has (a name inside a namespace it lacks is reported at the namespace)."""
    space, _, leaf = name.rpartition(".")
    return space in spaces and leaf not in spaces[space]


def _imported_paths(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The Triton names an import statement imports (``triton.tools.tensor_descriptor``)."""
    if isinstance(node, ast.Import):
        return [m for m in (_canonical_module(alias.name) for alias in node.names) if m]
    base = _canonical_module(node.module or "") if not node.level else None
    return [f"{base}.{alias.name}" for alias in node.names] if base else []


def _first_lacking(path: str, spaces: dict[str, frozenset[str]]) -> str | None:
    """The shortest prefix of ``path`` the runtime lacks (``triton.tools`` of
    ``triton.tools.tensor_descriptor``), or None."""
    parts = path.split(".")
    prefixes = (".".join(parts[:end]) for end in range(2, len(parts) + 1))
    return next((prefix for prefix in prefixes if _lacking(prefix, spaces)), None)


def unsupported_in(source: str) -> list[tuple[str, int]]:
    """(construct, line) for each use in ``source`` of a Triton construct that
    triton_on_torch does not implement, in source order; [] where it runs them all."""
    tree = astparse.parse(source)
    spaces, aliases = provided(), _aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            lacking = (_first_lacking(path, spaces) for path in _imported_paths(node))
            found += [(display(name), node.lineno) for name in lacking if name]
        elif isinstance(node, ast.Attribute):
            chain = _dotted(node)
            if chain and chain[0] in aliases:
                name = ".".join([aliases[chain[0]], *chain[1:]])
                if _lacking(name, spaces):
                    found.append((display(name), node.lineno))
        elif isinstance(node, ast.Call):
            found += _block_pointer_arguments(node, aliases)
    return sorted(set(found), key=lambda item: (item[1], item[0]))


def _block_pointer_arguments(call: ast.Call, aliases: dict[str, str]) -> list[tuple[str, int]]:
    """``tl.load(..., boundary_check=...)``: arguments only block pointers take."""
    chain = _dotted(call.func)
    if not chain or chain[0] not in aliases:
        return []
    space, _, leaf = ".".join([aliases[chain[0]], *chain[1:]]).rpartition(".")
    if space != "triton.language" or leaf not in BLOCK_POINTER_ARGS:
        return []
    used = [k.arg for k in call.keywords if k.arg in BLOCK_POINTER_ARGS[leaf]]
    return [(f"tl.{leaf}({name}=)", call.lineno) for name in used]
