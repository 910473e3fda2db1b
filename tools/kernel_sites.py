"""Where a file's custom kernels are launched from: the call sites a port must keep.

A custom kernel (a ``@triton.jit`` function, a ``load_inline``/``load`` CUDA extension, a
numba ``@cuda.jit`` function, a CuPy ``RawKernel``) is never called by the program
directly: a launcher (a ``torch.autograd.Function`` whose forward and backward launch it,
or a private helper) sits between, and one public function wraps that (``silu_mul(a, b)``
returning ``SiLUMul.apply(a, b)``). That function is the kernel's *call site*: what the rest
of the program calls, so what a pure-PyTorch port replaces (keeping its name and
arguments) and what the verifier's differential check calls in both programs.

``kernel_sites`` finds them statically (``ast``, top-level statements only): the kernels,
the launchers that reach them (through private helpers and autograd Functions), the entry
functions that nothing else in the group calls, and the lines from the first launcher to
the last entry, which is the span a model is asked to rewrite. A kernel launched from a
class's method that is not an autograd Function (an ``nn.Module.forward``) has no function
to call with recorded arguments: the site says so (``comparable`` is empty) and is still a
span to port. ``unused_kernels`` is the clean-up after a port: the kernels, extension
builds and CUDA source strings that nothing reads any more.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from torchport.sandbox import astparse
from torchport.sandbox.safepath import read_inside
from torchport.tools.pyimports import collect_aliases, qualified_name

# The catalogue's kernel rules, each a way of writing a kernel (tools/catalogue/data/kernels.toml).
KERNEL_RULES = ("TPK002", "TPK003", "TPK004", "TPK005")
# Decorators that make a function a kernel, by qualified name (the last part may vary).
KERNEL_DECORATORS = {
    "triton.jit": "TPK003",
    "triton.autotune": "TPK003",
    "triton.heuristics": "TPK003",
    "numba.cuda.jit": "TPK004",
}
# Calls whose result, assigned at the top level, is a kernel (an extension module, a kernel).
KERNEL_BUILDERS = {
    "torch.utils.cpp_extension.load_inline": "TPK002",
    "torch.utils.cpp_extension.load": "TPK002",
    "cupy.RawKernel": "TPK005",
    "cupy.ElementwiseKernel": "TPK005",
    "cupy.ReductionKernel": "TPK005",
    "cupy.RawModule": "TPK005",
}
# Words a file must hold to be parsed at all (a cheap prefilter).
MENTIONS = re.compile(r"\btriton\b|cpp_extension|\bnumba\b|\bcupy\b")
FUNCTION_BASES = ("torch.autograd.Function", "Function")


@dataclass(frozen=True)
class Kernel:
    name: str
    rule: str
    start_line: int
    end_line: int
    sources: tuple[str, ...] = ()  # names of strings the build reads (cuda_sources=_SRC)
    files: tuple[str, ...] = ()  # source files the build reads (load(sources=["k.cu"]))


@dataclass(frozen=True)
class KernelSite:
    """One group of kernels, their launchers and the functions the program calls."""

    path: str
    rule: str
    kernels: tuple[str, ...]
    launchers: tuple[str, ...]  # classes and helpers between the kernels and the entries
    entries: tuple[str, ...]  # what the rest of the program calls
    start_line: int  # the span a port rewrites: first launcher to last entry
    end_line: int
    kernel_source: str  # the kernels' own code (decorated defs, CUDA source strings)
    comparable: tuple[str, ...] = ()  # entries the differential check can call
    why_not: str = ""  # when nothing is comparable: why
    autograd: tuple[str, ...] = field(default=())  # launchers that are autograd Functions

    def spec(self, entry: str) -> str:
        """``path:entry``, how the reference run and the check name an entry."""
        return f"{self.path}:{entry}"


def _span(node: ast.stmt) -> tuple[int, int]:
    decorators = [d.lineno for d in getattr(node, "decorator_list", ())]
    return min([node.lineno, *decorators]), node.end_lineno or node.lineno


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _defined(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return target.id if isinstance(target, ast.Name) else None
    return None


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's statements, with those of ``if FLAG:`` / ``try:`` blocks that only
    define things taken as top-level ones (optional Triton puts its kernels there)."""
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If | ast.Try) and not getattr(node, "orelse", None):
            out += [n for n in node.body if _defined(n)] or [node]
        else:
            out.append(node)
    return out


def _kernel_rule(node: ast.stmt, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.FunctionDef):
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = qualified_name(target, aliases) or ""
            if name in KERNEL_DECORATORS:
                return KERNEL_DECORATORS[name]
            if name.startswith("triton.") and name.rsplit(".", 1)[-1] in ("jit", "autotune"):
                return "TPK003"
        return None
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
        name = qualified_name(node.value.func, aliases) or ""
        rule = KERNEL_BUILDERS.get(name)
        if rule == "TPK002" and not _builds_cuda(node.value):
            return None  # a C++-only extension: not a CUDA kernel
        return rule
    return None


def _builds_cuda(call: ast.Call) -> bool:
    keywords = {k.arg for k in call.keywords}
    if keywords & {"cuda_sources", "extra_cuda_cflags"}:
        return True
    strings = [n.value for n in ast.walk(call) if isinstance(n, ast.Constant)]
    return any(isinstance(s, str) and re.search(r"\.cuh?$|__global__", s) for s in strings)


def _kernel(node: ast.stmt, rule: str) -> Kernel:
    start, end = _span(node)
    name = _defined(node) or "?"
    sources: list[str] = []
    files: list[str] = []
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
        for keyword in node.value.keywords:
            if keyword.arg in ("cuda_sources", "cpp_sources", "sources", "code"):
                sources += [n for n in _reads(keyword.value)]
                files += [
                    n.value
                    for n in ast.walk(keyword.value)
                    if isinstance(n, ast.Constant)
                    and isinstance(n.value, str)
                    and n.value.endswith((".cu", ".cuh", ".cpp", ".h"))
                ]
        for arg in node.value.args:  # cupy.RawKernel(CODE, "name")
            sources += [n for n in _reads(arg)]
    return Kernel(name, rule, start, end, tuple(sorted(set(sources))), tuple(files))


def _is_function_class(node: ast.stmt, aliases: dict[str, str]) -> bool:
    if not isinstance(node, ast.ClassDef):
        return False
    for base in node.bases:
        name = qualified_name(base, aliases) or ""
        if name in FUNCTION_BASES or name.endswith("autograd.Function"):
            return True
    return False


def source_reader(root: Path, path: str) -> Callable[[str], str | None]:
    """How ``kernel_sites`` reads the files an extension build of ``root/path`` names: by
    the name as written, beside the file, else the one file of that name in the repository
    (``os.path.join(HERE, "csrc", "k.cu")`` gives only ``k.cu`` as a literal)."""

    def read(rel: str) -> str | None:
        here = (root / path).parent
        candidates = [here / rel, root / rel]
        if not any(c.is_file() for c in candidates):
            candidates = [p for p in root.rglob(Path(rel).name) if ".git" not in p.parts][:2]
            candidates = candidates if len(candidates) == 1 else []
        for candidate in candidates:
            try:  # the name is the repository's: only a regular file inside it is read
                return read_inside(root, candidate).decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        return None

    return read


def kernel_sites(
    text: str, path: str, read: Callable[[str], str | None] = lambda rel: None
) -> list[KernelSite]:
    """The kernel call sites of one file (empty when it defines no kernel or does not
    parse). ``read`` gives the text of a file the extension build names (``k.cu``), by
    path relative to the repository, when the caller can read the repository."""
    if not MENTIONS.search(text):
        return []
    try:
        tree = astparse.parse(text)
    except SyntaxError:
        return []
    aliases = collect_aliases(tree)
    lines = text.splitlines()
    statements = _top_level(tree)
    defs = {name: node for node in statements if (name := _defined(node))}
    kernels = {
        name: _kernel(node, rule)
        for name, node in defs.items()
        if (rule := _kernel_rule(node, aliases))
    }
    if not kernels:
        return []
    functions = {n for n, node in defs.items() if _is_function_class(node, aliases)}
    reads = {name: _reads(node) for name, node in defs.items() if name not in kernels}
    groups = _groups(kernels, reads, functions, defs)
    return [_site(path, group, kernels, defs, functions, lines, aliases, read) for group in groups]


def _groups(
    kernels: dict[str, Kernel],
    reads: dict[str, set[str]],
    functions: set[str],
    defs: dict[str, ast.stmt],
) -> list[tuple[set[str], set[str]]]:
    """(kernels, members) per connected group. Members are the defs that read a kernel,
    then, repeatedly, the defs that read a private member or an autograd Function one."""
    members = {name for name, names in reads.items() if names & kernels.keys()}
    growing = True
    while growing:
        growing = False
        for name, names in reads.items():
            if name in members or not isinstance(defs[name], ast.FunctionDef | ast.ClassDef):
                continue
            if any(m in names and (m.startswith("_") or m in functions) for m in members):
                members.add(name)
                growing = True
    # connected components over "reads": members and the kernels they reach
    groups: list[tuple[set[str], set[str]]] = []
    for name in sorted(members, key=lambda n: _span(defs[n])[0]):
        linked_kernels = reads[name] & kernels.keys()
        linked = {m for m in members if m in reads[name] or name in reads[m]}
        joined = [g for g in groups if g[1] & ({name} | linked) or g[0] & linked_kernels]
        ks, ms = set(linked_kernels), {name}
        for g in joined:
            groups.remove(g)
            ks |= g[0]
            ms |= g[1]
        groups.append((ks, ms))
    return groups


def _site(
    path: str,
    group: tuple[set[str], set[str]],
    kernels: dict[str, Kernel],
    defs: dict[str, ast.stmt],
    functions: set[str],
    lines: list[str],
    aliases: dict[str, str],
    read: Callable[[str], str | None],
) -> KernelSite:
    kernel_names, members = group
    reached = sorted(kernel_names, key=lambda n: kernels[n].start_line)
    function_members = {m for m in members if isinstance(defs[m], ast.FunctionDef)}
    entries = sorted(
        (m for m in members if not any(m in _reads(defs[o]) for o in members - {m})),
        key=lambda n: _span(defs[n])[0],
    )
    entries = [e for e in entries if e in function_members] or entries
    launchers = sorted(members - set(entries), key=lambda n: _span(defs[n])[0])
    spans = [_span(defs[m]) for m in members]
    comparable = tuple(e for e in entries if e in function_members)
    if not comparable:
        comparable = tuple(f"{e}.apply" for e in entries if e in functions)
    classes = [e for e in entries if isinstance(defs[e], ast.ClassDef) and e not in functions]
    why_not = ""
    if not comparable:
        why_not = (
            f"the kernel is launched from a method of {', '.join(f'`{c}`' for c in classes)}, "
            "not from a function the program calls: there is no call to repeat with recorded "
            "arguments"
        )
    return KernelSite(
        path=path,
        rule=kernels[reached[0]].rule,
        kernels=tuple(reached),
        launchers=tuple(launchers),
        entries=tuple(entries),
        start_line=min(s for s, _ in spans),
        end_line=max(e for _, e in spans),
        kernel_source=_kernel_source(reached, kernels, defs, lines, read),
        comparable=comparable,
        why_not=why_not,
        autograd=tuple(sorted(members & functions)),
    )


def _kernel_source(
    names: list[str],
    kernels: dict[str, Kernel],
    defs: dict[str, ast.stmt],
    lines: list[str],
    read: Callable[[str], str | None],
) -> str:
    """The kernels' code as the model should read it: the decorated defs, and for an
    extension build the CUDA source strings (and files) it compiles."""
    parts: list[str] = []
    for name in names:
        kernel = kernels[name]
        for source in kernel.sources:
            node = defs.get(source)
            if isinstance(node, ast.Assign):
                start, end = _span(node)
                parts.append("\n".join(lines[start - 1 : end]))
        for rel in kernel.files:
            text = read(rel)
            if text is not None:
                parts.append(f"// {rel}\n{text.rstrip()}")
        parts.append("\n".join(lines[kernel.start_line - 1 : kernel.end_line]))
    return "\n\n".join(parts)


def unused_kernels(
    text: str, elsewhere: Iterable[str] = (), also: Iterable[str] = ()
) -> list[tuple[int, int, str]]:
    """(start, end, name) of the top-level kernels, extension builds and the CUDA source
    strings only they read that nothing in ``text`` reads any more, bottom-up; a name
    another file of the program mentions (``elsewhere``: their texts) is kept. ``also``:
    names that are kernels though their decorator or build does not say so here (a port's
    kernels on a shipped runtime: ``triton_on_torch.jit``, ``cudacpu_host.build``)."""
    also = set(also)
    try:
        tree = astparse.parse(text)
    except SyntaxError:
        return []
    aliases = collect_aliases(tree)
    statements = list(tree.body)
    other = "\n".join(elsewhere)
    found: dict[str, ast.stmt] = {}
    growing = True
    while growing:
        growing = False
        live = set().union(
            *(
                _reads(node)
                for node in statements
                if id(node) not in {id(n) for n in found.values()}
            )
        )
        for node in statements:
            name = _defined(node)
            if name is None or name in found or name in live:
                continue
            if re.search(rf"\b{re.escape(name)}\b", other):
                continue
            is_kernel = _kernel_rule(node, aliases) is not None or name in also
            is_source = isinstance(node, ast.Assign) and any(
                name in _kernel(k, "TPK002").sources
                for k in found.values()
                if isinstance(k, ast.Assign)
            )
            if is_kernel or is_source:
                found[name] = node
                growing = True
    spans = [(*_span(node), name) for name, node in found.items()]
    return sorted(spans, reverse=True)


def kernel_sources(text: str, names: Iterable[str]) -> list[str]:
    """The module-level names whose strings the extension builds among ``names`` compile
    (``cuda_sources=_CUDA``): what goes with a build once a port no longer needs it."""
    try:
        tree = astparse.parse(text)
    except SyntaxError:
        return []
    wanted = set(names)
    found: set[str] = set()
    for node in _top_level(tree):
        if _defined(node) in wanted and isinstance(node, ast.Assign):
            found.update(_kernel(node, "TPK002").sources)
    return sorted(found)


# Modules a file no longer needs once its kernels are gone (their imports, when unused).
KERNEL_MODULES = ("triton", "torch.utils.cpp_extension", "numba", "cupy")


def remove_unused_kernels(text: str, elsewhere: Iterable[str] = ()) -> tuple[str, list[str]]:
    """``text`` without the kernels ``unused_kernels`` finds and the kernel modules' imports
    that nothing uses then; the names removed. A port that replaced a kernel's call site
    leaves its ``@triton.jit`` defs (or its extension build, which compiles CUDA at import)
    behind: on the target they are what still fails."""
    from torchport.tools.ast_edits import EditRefused, remove_unused_imports

    dead = unused_kernels(text, elsewhere)
    if not dead:
        return text, []
    lines = text.splitlines(keepends=True)
    for start, end, _ in dead:  # bottom-up: earlier line numbers still hold
        del lines[start - 1 : end]
    kept = re.sub(r"\n{4,}", "\n\n\n", "".join(lines))
    try:
        kept = remove_unused_imports(kept, KERNEL_MODULES)
    except EditRefused:
        return text, []
    return kept, sorted(name for _, _, name in dead)


def parameters(text: str, entry: str) -> list[str]:
    """The parameter names of ``entry`` (a top-level function, or ``Class.apply`` of an
    autograd Function: its forward's, after ``ctx``) in ``text``; empty when not found."""
    try:
        tree = astparse.parse(text)
    except SyntaxError:
        return []
    name, _, method = entry.partition(".")
    for node in _top_level(tree):
        if _defined(node) != name:
            continue
        if isinstance(node, ast.ClassDef) and method == "apply":
            forward = [
                n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "forward"
            ]
            return [a.arg for a in forward[0].args.args[1:]] if forward else []
        if isinstance(node, ast.FunctionDef) and not method:
            return [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    return []


def definition_line(text: str, entry: str) -> int | None:
    """The line of ``entry``'s top-level ``def`` or ``class`` in ``text`` (None: not there)."""
    try:
        tree = astparse.parse(text)
    except SyntaxError:
        return None
    name = entry.partition(".")[0]
    for node in _top_level(tree):
        if _defined(node) == name:
            return node.lineno
    return None


def kernel_spans(text: str) -> dict[str, tuple[int, int]]:
    """Each top-level kernel of ``text`` (decorated def, extension build) and its lines."""
    try:
        tree = astparse.parse(text)
    except SyntaxError:
        return {}
    aliases = collect_aliases(tree)
    return {
        name: _span(node)
        for node in _top_level(tree)
        if (name := _defined(node)) and _kernel_rule(node, aliases)
    }
