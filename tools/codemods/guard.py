"""The semantic guard: what an edit broke that compiling cannot see.

A rewrite that parses can still be wrong the moment it runs: a device name used before it is
bound, a keyword passed twice, a timing variable assigned in a closure and never read. pyflakes
sees these without importing or running the code. A file's findings after a migration are
compared with the original's by kind and name (never by line: lines shift), so only what the
migration introduced counts.
"""

from __future__ import annotations

import ast
import difflib
import functools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard

from pyflakes.checker import Checker
from torchport.sandbox import astparse

from ..pyimports import dotted_parts

# Imports a target needs for their side effect (they register the device or the process-group
# backend): pyflakes calls them unused, and they are not.
# How a refused fix's reason begins, in manual.md and changes.json.
REFUSED = "refused by the semantic guard"
REGISTERING_IMPORTS = frozenset({"torch_xla", "torch_xla.distributed.xla_backend"})


@dataclass(frozen=True, slots=True)
class Problem:
    """One static finding in a source: ``kind`` is pyflakes' message class (or ours)."""

    kind: str
    name: str
    line: int
    message: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.name)


def problems(source: str, path: str = "<migrated>") -> list[Problem]:
    """pyflakes' findings in ``source``, with the keyword checks pyflakes cannot make."""
    return list(_problems(source, path))


@functools.lru_cache(maxsize=16)
def _problems(source: str, path: str) -> tuple[Problem, ...]:
    """Kept for the few sources a file's migration asks about: the original is checked
    once per guard round, not once per comparison (pyflakes is most of the guard's time)."""
    try:
        tree = astparse.parse(source, path)
    except SyntaxError:
        return ()  # compiling is checked elsewhere; nothing to compare here
    found = [
        Problem(
            type(m).__name__,
            str(m.message_args[0]) if m.message_args else "",
            m.lineno,
            m.message % m.message_args,
        )
        for m in Checker(tree, filename=path).messages
        if not (type(m).__name__ == "UnusedImport" and m.message_args[0] in REGISTERING_IMPORTS)
    ]
    return (*found, *_keyword_problems(tree), *_harness_problems(tree))


def introduced(before: str, after: str, path: str = "<migrated>") -> list[Problem]:
    """The findings ``after`` has that ``before`` has not, counted by kind and name."""
    old = Counter(p.key for p in problems(before, path))
    new: list[Problem] = []
    for problem in problems(after, path):
        if old[problem.key]:
            old[problem.key] -= 1
        else:
            new.append(problem)
    return new


def blocking(before: str, after: str, path: str = "<migrated>") -> list[Problem]:
    """The introduced findings that refuse an edit: all but the dead assignments an edit
    leaves behind without touching them.

    An unused variable counts only on a line the migration changed (a timing variable
    re-bound in a closure); one the migration left alone lost its last reader to a fix
    (``rank`` once ``{"cuda:1": f"cuda:{rank}"}`` is gone): dead code, not a wrong program.
    Nor does it count for a name the original reads without binding it (UndefinedName):
    pyflakes has no scope for such a name to reason about.
    """
    found = problems(before, path)
    unbound = {p.name for p in found if p.kind in ("UndefinedName", "UndefinedLocal")}
    return [
        p
        for p in introduced(before, after, path)
        if p.kind != "UnusedVariable"
        or (p.name not in unbound and _changed_line(before, after, p.line))
    ]


def _changed_line(before: str, after: str, line: int) -> bool:
    mapped = original_lines(before, after, line)
    if len(mapped) != 1:
        return True
    old = before.splitlines()
    return old[mapped[0] - 1] != after.splitlines()[line - 1]


def original_lines(before: str, after: str, line: int) -> range:
    """The lines of ``before`` that ``after``'s ``line`` came from (1-based; empty if new)."""
    old, new = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if j1 <= line - 1 < j2:
            if tag == "equal":
                return range(i1 + line - j1, i1 + line - j1 + 1)
            return range(i1 + 1, i2 + 1)
    return range(0)


def _keyword_problems(tree: ast.Module) -> list[Problem]:
    """A keyword given twice in one call (the compiler's error, which parsing alone misses),
    and a keyword given beside ``**kwargs`` that the enclosing function forwards from its own
    callers: any caller may pass the same keyword, and the call then fails at run time."""
    found = []
    for func, call in _calls_with_function(tree):
        names = [k.arg for k in call.keywords if k.arg is not None]
        for name, count in Counter(names).items():
            if count > 1:
                found.append(
                    Problem(
                        "DuplicateKeyword",
                        name,
                        call.lineno,
                        f"keyword argument {name!r} repeated in one call",
                    )
                )
        forwarded = func.args.kwarg.arg if func is not None and func.args.kwarg else None
        spread = {k.value.id for k in call.keywords if k.arg is None and _is_name(k.value)}
        if func is not None and forwarded in spread:
            found += [
                Problem(
                    "KeywordBesideForwardedKwargs",
                    name,
                    call.lineno,
                    f"keyword {name!r} passed beside **{forwarded}, which callers of "
                    f"{func.name}() fill and may already hold {name!r}",
                )
                for name in names
            ]
    return found


# What the verifier's numbers rest on, which no edit of the program has any business
# touching: torchport's own package, its variables (TORCHPORT_RUN names the results
# channel), and leaving the process past torchport's report of its end.
HARNESS_PACKAGE = "torchport"
HARNESS_VARIABLE_PREFIX = "TORCHPORT_"
HARNESS_EXITS = frozenset({("os", "_exit")})


def _harness_problems(tree: ast.Module) -> list[Problem]:
    """An edit that reaches torchport's machinery: an import of ``torchport``, a string that
    names its package or its variables, ``os._exit`` (which skips the launcher's report).
    Counted like pyflakes' findings: only what an edit introduced refuses it."""
    found = []
    for node in ast.walk(tree):
        what = ""
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == HARNESS_PACKAGE for a in node.names):
                what = "imports torchport's own package"
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] == HARNESS_PACKAGE:
                what = "imports torchport's own package"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.startswith(HARNESS_VARIABLE_PREFIX) or text.split(".")[0] == HARNESS_PACKAGE:
                what = f"names torchport's machinery ({text[:40]!r})"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and (owner.id, node.func.attr) in HARNESS_EXITS:
                what = "leaves through os._exit, past torchport's report of the run's end"
        if what:
            found.append(Problem("ReachesHarness", what, getattr(node, "lineno", 0), what))
    return found


def _is_name(node: ast.expr) -> TypeGuard[ast.Name]:
    return isinstance(node, ast.Name)


def _calls_with_function(
    tree: ast.AST,
) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, ast.Call]]:
    """Each call with the function definition it is directly inside (None at module level)."""
    stack: list[tuple[ast.AST, ast.FunctionDef | ast.AsyncFunctionDef | None]] = [(tree, None)]
    while stack:
        node, func = stack.pop()
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if isinstance(child, ast.Lambda):
                inner = None
            if isinstance(child, ast.Call):
                yield func, child
            stack.append((child, inner))


def orphaned_imports(
    before: str, broken: list[Problem]
) -> list[tuple[str, str | None, str | None]]:
    """Imports of the original that the migration left unused (its last use was CUDA code),
    as (module, name, alias): these are removed rather than counted against any fix. A name
    the original imported in the same statement and never used goes with them
    (``from flash_attn import flash_attn_qkvpacked_func, flash_attn_func`` when only the
    second was called): left alone, it would keep the CUDA-only import the port removed."""
    unused = {p.name for p in broken if p.kind == "UnusedImport"}
    if not unused:
        return []
    idle = {p.name for p in problems(before) if p.kind == "UnusedImport"}
    lines = before.splitlines()
    found: list[tuple[str, str | None, str | None]] = []
    for node in ast.walk(astparse.parse(before)):
        named: list[tuple[str, str | None, str | None, str]]
        if isinstance(node, ast.Import):
            named = [(a.name, None, a.asname, _flake_name(a.name, a.asname)) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            named = [
                (node.module, a.name, a.asname, _flake_name(f"{node.module}.{a.name}", a.asname))
                for a in node.names
            ]
        else:
            continue
        orphaned = [n for n in named if n[3] in unused]
        # a line marked for the linter (noqa) is a deliberate re-export: it stays
        if orphaned and "noqa" not in lines[node.lineno - 1]:
            orphaned += [n for n in named if n[3] in idle and n not in orphaned]
        found += [n[:3] for n in orphaned]
    return found


def _flake_name(name: str, alias: str | None) -> str:
    """How pyflakes names an import in its messages."""
    return f"{name} as {alias}" if alias and alias != name.rsplit(".", 1)[-1] else name


def top_level_names(source: str) -> set[str]:
    """The names a module binds at its top level (functions, classes, assignments, imports):
    what ``from module import name`` can reach."""
    try:
        tree = astparse.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"}
    return names


def imported_from(module_rel: str, names: set[str], importer: str) -> set[str]:
    """Which of ``names`` the source ``importer`` takes from the module at ``module_rel``
    (``pkg/mod.py``): by ``from ... mod import name`` (absolute or relative) or as
    ``alias.name`` after ``import ...mod as alias``. Matched on the module's last dotted
    part, which is how a program's own modules are imported whatever the root."""
    stem = module_rel.removesuffix(".py").split("/")
    last = stem[-2] if stem[-1] == "__init__" and len(stem) > 1 else stem[-1]
    try:
        tree = astparse.parse(importer)
    except SyntaxError:
        return set()
    taken: set[str] = set()
    modules: set[tuple[str, ...]] = set()  # how the module is spelled where it is imported
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[-1] == last:  # from pkg.mod import name
                taken |= {a.name for a in node.names} & names
            modules |= {(a.asname or a.name,) for a in node.names if a.name == last}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[-1] == last:
                    modules.add((a.asname,) if a.asname else tuple(a.name.split(".")))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            chain = dotted_parts(node.value)
            if chain and tuple(chain) in modules:
                taken.add(node.attr)
    return taken


def removed_imported_names(rel: str, before: str, after: str, others: dict[str, str]) -> list[str]:
    """One line for each top-level name of ``rel`` an edit removed that another file of the
    program imports from it (``others``: path -> source): pyflakes reads one file at a
    time, so a replacement that drops the function the rest of the program calls (a kernel's
    public wrapper) would pass it and fail only when the program runs."""
    gone = top_level_names(before) - top_level_names(after)
    if rel.endswith("__init__.py"):  # `from pkg import mod` still finds a submodule
        package = rel.removesuffix("__init__.py")
        gone = {
            n for n in gone if not {f"{package}{n}.py", f"{package}{n}/__init__.py"} & set(others)
        }
    if not gone:
        return []
    found = []
    for other, text in sorted(others.items()):
        if other == rel or not other.endswith(".py") or not any(n in text for n in gone):
            continue
        for name in sorted(imported_from(rel, gone, text)):
            found.append(f"{rel}: `{name}` is gone, and {other} imports it")
    return found
