"""TPK002: a CUDA extension builds, in the port, from its host translation.

torchport's CPU runner for CUDA kernels (``sandbox.cudacpu``) already runs the original's
kernels on the CUDA reference run by translating their CUDA C++ into host C++. The port
carries that translation: ``<name>_host.cpp`` beside the module (readable, with a header
saying it was translated from where and what changed; ``kernel_runtime.cuda_host``), the
runner's runtime (``cudacpu_runtime.h`` / ``.cpp``) and ``cudacpu_host.py``, whose
``load`` builds the file with torch's ``cpp_extension.load`` and runs each of its
functions on host copies of the tensors (``.cpu()`` in, ``.to(device)`` out). Only the
build call changes::

    _ext = load_inline(name="ops", cpp_sources=_CPP, cuda_sources=_CUDA, functions=[...])
    _ext = cudacpu_host.build("ops", "ops_host.cpp", __file__)

``load(name, sources=[...])`` the same, its files read from the repository where their
paths are known without running the code (``host_paths``); in a package the helper is
imported relatively. Correct but slow (the copies, and the kernels on the host CPU): a
performance advisory. Applied where the sources are known (``load_inline``'s: strings of
the module, or names of module-level ones) and the runner runs every kernel; otherwise
refused with the reason (the runner's names each construct it refuses with its file and
line). The sources of one extension become one translation unit.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path, PurePosixPath

import libcst as cst

from ...sandbox.cudacpu.build import host_flags
from ...sandbox.cudacpu.extension import inline_sources
from ...sandbox.cudacpu.translate import Source
from ..kernel_runtime import cuda_host
from . import host_paths
from .base import (
    VENDOR,
    FixContext,
    Fixed,
    NotApplicable,
    bound_arguments,
    code_of,
    fixer,
    prescan,
)

STRINGS = "tpk002_strings"
SOURCE = "tpk002_source"
HELPER = "cudacpu_host"
# load_inline's parameters in order (a positional argument is read by its place)
PARAMETERS = (
    "name",
    "cpp_sources",
    "cuda_sources",
    "sycl_sources",
    "functions",
    "extra_cflags",
    "extra_cuda_cflags",
    "extra_sycl_cflags",
    "extra_ldflags",
    "extra_include_paths",
    "build_directory",
    "verbose",
)
LOAD_PARAMETERS = ("name", "sources", "extra_cflags", "extra_cuda_cflags")
# what the host build keeps of the call; the rest (nvcc's flags, a build folder in the
# user's tree, with_cuda) means nothing to it
KEPT = ("verbose",)
ADVISORY = (
    "the CUDA extension {name!r} builds from its host translation ({file}, shipped beside "
    "it) and runs on the CPU: each call copies its tensors to the host (.cpu()) and its "
    "results back to the device (.to(device)); a PyTorch version of the call site (or "
    "Pallas on tpu, NKI on neuron) is the fast port"
)


def _string(node: cst.BaseExpression, strings: dict[str, str]) -> str | None:
    if isinstance(node, cst.Name):
        return strings.get(node.value)
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _strings(node: cst.BaseExpression, strings: dict[str, str]) -> list[str] | None:
    """A source argument's strings: a string, or a list or tuple of them."""
    if isinstance(node, cst.List | cst.Tuple):
        found = [_string(e.value, strings) for e in node.elements]
        return None if None in found else [s for s in found if s is not None]
    one = _string(node, strings)
    return None if one is None else [one]


@prescan("TPK002")
def module_strings(module: cst.Module, lines: list[int], target: str) -> dict:
    """The module-level ``NAME = "..."`` strings (the sources load_inline is usually
    given by name), and the module's text, where the runner maps them to their lines."""
    strings: dict[str, str] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            continue
        assign = statement.body[0]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            name = assign.targets[0].target
            value = _string(assign.value, {})
            if isinstance(name, cst.Name) and value is not None:
                strings[name.value] = value
    values = host_paths.assignments(module)
    return {STRINGS: strings, SOURCE: module.code, host_paths.VALUES: values}


def _flags(node: cst.BaseExpression | None, strings: dict[str, str]) -> list[str]:
    if node is None:
        return []
    found = _strings(node, strings)
    if found is None:
        raise NotApplicable("its compiler flags are not a list of strings")
    return host_flags(found)


def _functions(node: cst.BaseExpression | None, strings: dict[str, str]) -> list[str] | None:
    if node is None or (isinstance(node, cst.Name) and node.value == "None"):
        return None
    found = _strings(node, strings)
    if found is None:
        raise NotApplicable("its functions= is not a list of strings")
    return found


@fixer("TPK002", VENDOR)
def host_build(node: cst.Call, ctx: FixContext) -> Fixed:
    """``load_inline(..., cuda_sources=...)`` or ``load(sources=[...])`` as
    ``cudacpu_host.build`` of the shipped host translation; or why it cannot be."""
    if code_of(node.func).rpartition(".")[2] == "load":
        return _host_load(node, ctx)
    strings: dict[str, str] = ctx.state.get(STRINGS, {})
    a = bound_arguments(node, PARAMETERS)
    name = _string(a["name"], strings) if "name" in a else None
    if name is None or not name.isidentifier():
        raise NotApplicable("the extension's name is not a literal identifier")
    cpp = _strings(a["cpp_sources"], strings) if "cpp_sources" in a else None
    cuda = _strings(a["cuda_sources"], strings) if "cuda_sources" in a else None
    if cpp is None or not cuda:
        raise NotApplicable("its cpp_sources / cuda_sources are not strings of the module")
    flags = _flags(a.get("extra_cflags"), strings) + _flags(a.get("extra_cuda_cflags"), strings)
    here = PurePosixPath(ctx.path).name
    units = inline_sources(
        name,
        cpp,
        cuda,
        _functions(a.get("functions"), strings),
        caller=here,
        caller_text=ctx.state.get(SOURCE, ""),
    )
    try:
        host = cuda_host.host_source([s for _, s in units], f'{here}: load_inline(name="{name}")')
    except cuda_host.NotTranslated as exc:
        raise NotApplicable(f"torchport's CPU runner cannot run its kernels: {exc}") from None
    return _rewritten(node, ctx, name, host.text, flags)


def _host_load(node: cst.Call, ctx: FixContext) -> Fixed:
    """``load(name, sources=[...])``: the sources read from the repository, where their
    paths are known without running the code (``host_paths``)."""
    strings: dict[str, str] = ctx.state.get(STRINGS, {})
    a = bound_arguments(node, LOAD_PARAMETERS)
    name = _string(a["name"], strings) if "name" in a else None
    if name is None or not name.isidentifier():
        raise NotApplicable("the extension's name is not a literal identifier")
    if ctx.root is None or "sources" not in a:
        raise NotApplicable("its sources cannot be read at migration")
    here = PurePosixPath(ctx.path)
    paths = host_paths.sources(a["sources"], ctx.state.get(host_paths.VALUES, {}), here)
    if isinstance(paths, str):
        raise NotApplicable(paths)
    units = []
    for path in paths:
        file = ctx.root / path
        if not file.is_file():
            raise NotApplicable(f"its source {path} is not a file of the repository")
        origin = posixpath.relpath(path.as_posix(), here.parent.as_posix())
        text = file.read_text(encoding="utf-8", errors="replace")
        units.append(Source(text, origin, path.suffix == ".cu"))
    headers = _own_headers(units, ctx.root, here.parent)
    flags = _flags(a.get("extra_cflags"), strings) + _flags(a.get("extra_cuda_cflags"), strings)
    listed = ", ".join(posixpath.relpath(p.as_posix(), here.parent.as_posix()) for p in paths)
    try:
        host = cuda_host.host_source(
            units, f'{here.name}: load(name="{name}", sources=[{listed}])', headers
        )
    except cuda_host.NotTranslated as exc:
        raise NotApplicable(f"torchport's CPU runner cannot run its kernels: {exc}") from None
    return _rewritten(node, ctx, name, host.text, flags)


def _own_headers(units: list[Source], root: Path, folder: PurePosixPath) -> dict[str, str]:
    """The repository's headers that the sources include with quotes, next to the including
    file (and the headers those include), by ``cuda_host.header_key``; one not found, or
    outside the repository, is left out (``host_source`` then names it)."""
    found: dict[str, str] = {}
    todo = [(u.origin, u.text) for u in units]
    top = root.resolve()
    while todo:
        origin, text = todo.pop()
        for spelling in cuda_host.quoted_includes(text):
            key = cuda_host.header_key(origin, spelling)
            file = (root / folder / key).resolve()
            if key in found or not file.is_relative_to(top) or not file.is_file():
                continue
            found[key] = file.read_text(encoding="utf-8", errors="replace")
            todo.append((key, found[key]))
    return found


def _rewritten(node: cst.Call, ctx: FixContext, name: str, text: str, flags: list[str]) -> Fixed:
    file = f"{name}_host.cpp"
    ctx.write(file, text)
    for shipped in (f"{HELPER}.py", cuda_host.RUNTIME_HEADER_FILE, cuda_host.RUNTIME_SOURCE_FILE):
        ctx.ship(shipped)
    if ctx.in_package:
        ctx.need_from(".", HELPER)
    else:
        ctx.need(HELPER)
    ctx.advise(ADVISORY.format(name=name, file=file))
    extra = f", extra_cflags={json.dumps(flags)}" if flags else ""
    for arg in node.args:
        if arg.keyword and arg.keyword.value in KEPT:
            extra += f", {arg.keyword.value}={code_of(arg.value)}"
    ctx.own_layout = True
    return ctx.expr(f'{HELPER}.build("{name}", "{file}", __file__{extra})')
