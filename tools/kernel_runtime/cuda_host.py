"""A CUDA C++ extension's host build for a port: the CPU runner's translation, as a file.

The reference run builds a program's CUDA extension (``load_inline(cuda_sources=...)``)
for the CPU through ``sandbox.cudacpu``: the sources are translated (``translate``,
plain Python text edits, no compiler) and compiled against the runner's runtime headers.
A port can carry the same thing: ``host_source`` gives the translated sources as one
readable C++ file, with a header saying where it came from and what changed, which
``#include``\\ s ``cudacpu_runtime.h``; ``runtime_header`` and ``runtime_source`` are the
runtime's files joined into one header and one source, so the port builds with nothing of
torchport's but what it carries (``tools/kernel_runtime/SHIPPED``).

The repository's own headers that the sources include (``#include "utils.cuh"``) are
inlined where first included, between ``#line`` directives that name them, with their
CUDA headers stood in for as the sources' are: the file builds wherever the port puts
it, and the headers' device functions are known to the translation as on the reference.

The text depends only on the sources and the origins given (paths in the repository):
two migrations of one repository write the same files. A source the runner would stub
(a refused construct inside a function, which raises when called) or cannot build at all
is not translated: ``NotTranslated`` says why, each construct with its file and line.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ...sandbox.cudacpu.build import INCLUDE, RUNTIME_SOURCE
from ...sandbox.cudacpu.refusals import Refused
from ...sandbox.cudacpu.translate import Source, translate

RUNTIME_HEADER_FILE = "cudacpu_runtime.h"
RUNTIME_SOURCE_FILE = "cudacpu_runtime.cpp"
PRELUDE = "#include <cudacpu/prelude.h>\n"
_INCLUDE = re.compile(r'^([ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"].*)$', re.M)
_RUNTIME_INCLUDE = re.compile(r"^\s*#\s*include\s*<cudacpu/(\w+)\.h>\s*$", re.M)
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$\n?", re.M)
_LINE = re.compile(r'^#line (\d+) "((?:[^"\\]|\\.)*)"$', re.M)

CHANGES = (
    "each kernel<<<grid, block, shared, stream>>>(args) launch is a call of",
    "cudacpu::launch, which runs the grid's blocks on the CPU (a block's threads one after",
    "another, as fibers that wait for each other at __syncthreads() where a kernel has one);",
    "extern __shared__ arrays point to the launch's dynamic shared memory; device checks",
    "and constants name the CPU (x.is_cuda() -> x.is_cpu(), kCUDA -> kCPU); CUDA's headers",
    "are stood in for by cudacpu_runtime.h, beside this file. Everything else is the original",
    "code, line for line: #line directives name its file and line.",
)


class NotTranslated(ValueError):
    """The CPU runner cannot run this extension's kernels; the message says why."""


@dataclass(frozen=True)
class HostSource:
    """An extension's host C++ (the file's text) and its kernels."""

    text: str
    kernels: tuple[str, ...]


def _stubs() -> dict[str, str]:
    """The runtime's stand-ins for CUDA's headers, by the name code includes them by."""
    return {
        path.relative_to(INCLUDE).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(INCLUDE.rglob("*"))
        if path.is_file() and path.relative_to(INCLUDE).parts[0] != "cudacpu"
    }


def _stub_body(text: str) -> str:
    """What a stand-in adds to the runtime (math_constants.h's macros): its lines less the
    comments, ``#pragma once`` and the runtime's include."""
    keep = [
        line
        for line in text.splitlines()
        if line.strip()
        and not line.lstrip().startswith("//")
        and not _PRAGMA_ONCE.match(line + "\n")
        and not _RUNTIME_INCLUDE.match(line)
    ]
    return "\n".join(keep)


def _runtime_part(name: str) -> str:
    return _PRAGMA_ONCE.sub("", (INCLUDE / "cudacpu" / f"{name}.h").read_text(encoding="utf-8"))


@functools.cache
def runtime_header() -> str:
    """``cudacpu_runtime.h``: the runner's runtime headers and CUDA's stand-ins, joined."""
    runtime = _RUNTIME_INCLUDE.sub(lambda m: _runtime_part(m.group(1)), _runtime_part("runtime"))
    extras = [body for body in map(_stub_body, _stubs().values()) if body]
    head = (
        "// Shipped by torchport: the runtime of its CPU runner for CUDA kernels\n"
        "// (sandbox/cudacpu/runtime/include, joined into one header), which the host builds\n"
        "// of this folder's CUDA extensions (*_host.cpp) compile against.\n"
        "#pragma once\n"
    )
    return head + runtime + "\n// CUDA's constants (math_constants.h)\n" + "\n".join(extras) + "\n"


@functools.cache
def runtime_source() -> str:
    """``cudacpu_runtime.cpp``: the launch loop and fibers, against the joined header."""
    text = RUNTIME_SOURCE.read_text(encoding="utf-8")
    head = "// Shipped by torchport: its CPU runner's launches (sandbox/cudacpu/runtime).\n"
    return head + _RUNTIME_INCLUDE.sub(f'#include "{RUNTIME_HEADER_FILE}"', text, count=1)


def _unit_text(text: str, stubs: frozenset[str]) -> str:
    """A translated unit as the shipped file holds it: without the runner's prelude, and
    each include of a CUDA header the runtime stands in for kept as a comment (one line
    for one, so ``#line`` still maps)."""
    text = text.removeprefix(PRELUDE)

    def commented(m: re.Match[str]) -> str:
        if m.group(2) in stubs:
            return f"// (in {RUNTIME_HEADER_FILE}) " + " ".join(m.group(1).split())
        return m.group(1)

    return _INCLUDE.sub(commented, text)


def header_key(including: str, spelling: str) -> str:
    """The path (relative as the including file's origin is) that ``#include "spelling"``
    in ``including`` names, next to it."""
    return posixpath.normpath(posixpath.join(posixpath.dirname(including), spelling))


def quoted_includes(text: str) -> list[str]:
    """What ``text`` includes with quotes (``#include "utils.cuh"``): the repository's own."""
    return [m.group(2) for m in _INCLUDE.finditer(text) if '"' in m.group(1)]


def _local_includes(units: list[Source], headers: Mapping[str, str]) -> list[str]:
    """The ``#include "..."`` of the units and of their headers that ``headers`` lacks:
    headers of the repository's own that the host file could neither inline nor find."""
    missing, todo, seen = [], [(src.origin, src.text) for src in units], set()
    while todo:
        origin, text = todo.pop()
        for spelling in quoted_includes(text):
            key = header_key(origin, spelling)
            if key not in headers:
                missing.append(spelling)
            elif key not in seen:
                seen.add(key)
                todo.append((key, headers[key]))
    return missing


def host_source(
    units: list[Source], what: str, headers: Mapping[str, str] | None = None
) -> HostSource:
    """The host C++ of an extension whose translation units are ``units`` (origins as the
    port should name them); ``what`` says in the header what was translated (``fused_ops.py:
    load_inline(name="x")``); ``headers``, the texts of the repository's headers they
    include, by ``header_key``. Raises ``NotTranslated`` where the runner refuses a
    construct, and for an include of a header of their own that ``headers`` lacks."""
    headers = dict(headers or {})
    local = _local_includes(units, headers)
    if local:
        raise NotTranslated(
            "its sources include headers of their own (" + ", ".join(local) + ") that are "
            "not files beside them in the repository"
        )
    try:
        translation = translate(units, [Source(t, k, cuda=True) for k, t in headers.items()])
    except Refused as exc:
        raise NotTranslated(str(exc)) from None
    if translation.refusals:
        raise NotTranslated("; ".join(r.message() for r in translation.refusals))
    stubs = frozenset(_stubs())
    head = [
        "// Translated by torchport from the CUDA C++ of",
        f"//   {what}",
        "// into host C++ that builds with the host compiler and runs its kernels on the CPU",
        "// (torchport's CPU runner for CUDA kernels, sandbox/cudacpu). What changed:",
        *(f"// {line}" for line in CHANGES),
        "#include <torch/extension.h>",
        f'#include "{RUNTIME_HEADER_FILE}"',
    ]
    seen: set[str] = set()
    body = "".join(
        _inlined(_unit_text(text, stubs), src.origin, headers, stubs, seen).rstrip("\n") + "\n"
        for src, text in zip(units, translation.files, strict=True)
    )
    kernels = tuple(k.name for k in translation.kernels)
    return HostSource("\n".join(head) + "\n" + body, kernels)


def _inlined(
    text: str, origin: str, headers: Mapping[str, str], stubs: frozenset[str], seen: set[str]
) -> str:
    """``text`` with each ``#include "header"`` of the repository's own replaced by the
    header (once: a later include of it is left as a comment), its own includes the same,
    and a ``#line`` after it that returns to the including file's line."""

    def inline(m: re.Match[str]) -> str:
        if '"' not in m.group(1):
            return m.group(0)
        key = header_key(origin, m.group(2))
        if key in seen or key not in headers:
            return f"// (inlined above) {' '.join(m.group(1).split())}"
        seen.add(key)
        header = _unit_text(_PRAGMA_ONCE.sub("\n", headers[key]), stubs)  # line for line
        inner = _inlined(header, key, headers, stubs, seen).rstrip("\n")
        line, file = _line_after(text, m.start(), origin)
        return f'#line 1 "{_quoted(key)}"\n{inner}\n#line {line} "{file}"'

    return _INCLUDE.sub(inline, text)


def _line_after(text: str, at: int, origin: str) -> tuple[int, str]:
    """The line (and file, as a #line names it) after the one at offset ``at``: from the
    last ``#line`` above it, else counted from the start of ``text`` in ``origin``."""
    found = list(_LINE.finditer(text, 0, at))
    last = found[-1] if found else None
    if last is None:
        return text.count("\n", 0, at) + 2, _quoted(origin)
    return int(last.group(1)) + text.count("\n", last.end() + 1, at) + 1, last.group(2)


def _quoted(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')
