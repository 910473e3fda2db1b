"""A CUDA C++ extension's host build for a port: the CPU runner's translation, as a file.

The reference run builds a program's CUDA extension (``load_inline(cuda_sources=...)``)
for the CPU through ``sandbox.cudacpu``: the sources are translated (``translate``,
plain Python text edits, no compiler) and compiled against the runner's runtime headers.
A port can carry the same thing: ``host_source`` gives the translated sources as one
readable C++ file, with a header saying where it came from and what changed, which
``#include``\\ s ``cudacpu_runtime.h``; ``runtime_header`` and ``runtime_source`` are the
runtime's files joined into one header and one source, so the port builds with nothing of
torchport's but what it carries (``tools/kernel_runtime/SHIPPED``).

The text depends only on the sources and the origins given (paths in the repository):
two migrations of one repository write the same files. A source the runner would stub
(a refused construct inside a function, which raises when called) or cannot build at all
is not translated: ``NotTranslated`` says why, each construct with its file and line.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ...sandbox.cudacpu.build import INCLUDE, RUNTIME_SOURCE
from ...sandbox.cudacpu.refusals import Refused
from ...sandbox.cudacpu.translate import Source, translate

RUNTIME_HEADER_FILE = "cudacpu_runtime.h"
RUNTIME_SOURCE_FILE = "cudacpu_runtime.cpp"
PRELUDE = "#include <cudacpu/prelude.h>\n"
_INCLUDE = re.compile(r'^(\s*#\s*include\s*[<"]([^>"]+)[>"].*)$', re.M)
_RUNTIME_INCLUDE = re.compile(r"^\s*#\s*include\s*<cudacpu/(\w+)\.h>\s*$", re.M)
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$\n?", re.M)

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


def _local_includes(units: list[Source]) -> list[str]:
    """The ``#include "..."`` of the units: headers of the repository's own, which the
    host file (elsewhere, and translated) would not find."""
    return [m.group(2) for src in units for m in _INCLUDE.finditer(src.text) if '"' in m.group(1)]


def host_source(units: list[Source], what: str) -> HostSource:
    """The host C++ of an extension whose translation units are ``units`` (origins as the
    port should name them); ``what`` says in the header what was translated (``fused_ops.py:
    load_inline(name="x")``). Raises ``NotTranslated`` where the runner refuses a construct,
    and for sources that include headers of their own (not carried yet)."""
    local = _local_includes(units)
    if local:
        raise NotTranslated(
            "its sources include headers of their own (" + ", ".join(local) + "), which the "
            "host build does not carry yet"
        )
    try:
        translation = translate(units)
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
    body = "".join(_unit_text(text, stubs).rstrip("\n") + "\n" for text in translation.files)
    kernels = tuple(k.name for k in translation.kernels)
    return HostSource("\n".join(head) + "\n" + body, kernels)
