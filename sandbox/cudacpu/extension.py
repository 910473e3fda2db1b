"""One extension through the runner: its sources as ``load_inline`` or ``load`` takes
them, translated, compiled, loaded, and described for the run's report."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .build import Built, build, host_flags, host_ldflags
from .translate import Segment, Source, Translation, local_headers, translate


@dataclass
class Extension:
    """A loaded extension and what the report says of it."""

    module: Any
    built: Built
    translation: Translation
    record: dict[str, Any] = field(default_factory=dict)

    def launches(self) -> dict[str, int]:
        """How many times each kernel ran so far (read from the library itself)."""
        return launches_of(self.built.library)


def launches_of(library: Path) -> dict[str, int]:
    import ctypes

    try:
        report = ctypes.CDLL(str(library)).cudacpu_launch_report
    except (OSError, AttributeError):
        return {}
    report.restype = ctypes.c_char_p
    return json.loads(report().decode())


def shown(path: str) -> str:
    """A path as messages show it: relative to the working directory (the program's
    folder, in a run) when it is inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def locate(text: str, file_lines: list[str]) -> int | None:
    """The line of a file where the string ``text`` starts, when the file holds it as a
    literal (``load_inline``'s sources usually are): several of its lines, matched in a
    row, anchor it. None when it cannot be found (a string built at run time)."""
    lines = text.split("\n")
    wanted = [(i, ln.strip()) for i, ln in enumerate(lines) if ln.strip()][:12]
    if not wanted:
        return None
    for anchor, (k, first) in enumerate(wanted[:3]):
        for p, candidate in enumerate(file_lines):
            if candidate.strip() != first:
                continue
            rest = wanted[anchor:]
            if all(
                p + i - k < len(file_lines) and file_lines[p + i - k].strip() == ln
                for i, ln in rest
            ):
                return p - k + 1
    return None


def _joined(parts: list[tuple[str, str, int]], cuda: bool) -> Source:
    """One source of several strings ((text, origin, first line)), joined by newlines as
    load_inline joins them."""
    text, segments = "", []
    for i, (part, origin, first_line) in enumerate(parts):
        if i:
            text += "\n"
        segments.append(Segment(len(text), origin, first_line))
        text += part
    head = segments[0]
    return Source(text, head.origin, cuda, head.first_line, more=segments[1:])


def inline_sources(
    name: str,
    cpp_sources: str | list[str],
    cuda_sources: str | list[str],
    functions: Any = None,
    *,
    with_pytorch_error_handling: bool = True,
    no_implicit_headers: bool = False,
    caller: str | None = None,
    caller_text: str | None = None,
) -> list[tuple[str, Source]]:
    """load_inline's two translation units, ``main.cpp`` and ``cuda.cu``, as it writes
    them, each string mapped back to the caller's file where it can be found there.
    ``caller_text``: that file's text, given (a migration's), not read; ``caller`` is then
    named as it is given."""
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources or [])
    cuda = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
    try:
        if caller_text is not None:
            file_lines = caller_text.splitlines()
        else:
            file_lines = Path(caller).read_text(encoding="utf-8").splitlines() if caller else []
    except OSError:
        file_lines = []
    named = caller if caller_text is not None else shown(caller) if caller else None

    def placed(texts: list[str], kind: str) -> list[tuple[str, str, int]]:
        out = []
        for i, t in enumerate(texts):
            line = locate(t, file_lines)
            origin = named if line is not None and named else f"{name}:{kind}[{i}]"
            out.append((t, origin, line or 1))
        return out

    generated = f"{name}:generated"
    cpp_parts = placed(cpp, "cpp_sources")
    if not no_implicit_headers:
        cpp_parts.insert(0, ("#include <torch/extension.h>", generated, 1))
    if functions is not None:
        names = [functions] if isinstance(functions, str) else functions
        docs = names if isinstance(names, dict) else {f: f for f in names}
        binding = "torch::wrap_pybind_function({0})" if with_pytorch_error_handling else "{0}"
        module = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
        module += [f'm.def("{f}", {binding.format(f)}, "{doc}");' for f, doc in docs.items()]
        cpp_parts.append(("\n".join([*module, "}"]), generated, 1))
    units = [("main.cpp", _joined(cpp_parts, cuda=False))]
    if cuda:
        cuda_parts = placed(cuda, "cuda_sources")
        if not no_implicit_headers:
            head = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>"
            cuda_parts.insert(0, (head, generated, 1))
        units.append(("cuda.cu.cpp", _joined(cuda_parts, cuda=True)))
    return units


def file_sources(paths: list[str]) -> list[tuple[str, Source]]:
    """``load``'s sources: a ``.cu`` file is CUDA, the rest host C++ (each translated,
    since host files hold the device checks too)."""
    units = []
    for i, p in enumerate(paths):
        text = Path(p).read_text(encoding="utf-8", errors="replace")
        source = Source(text, shown(str(p)), Path(p).suffix == ".cu")
        units.append((f"{i}-{Path(p).name}.cpp", source))
    return units


def compile_extension(
    name: str,
    units: list[tuple[str, Source]],
    root: Path,
    *,
    extra_cflags: list[str] | None = None,
    extra_cuda_cflags: list[str] | None = None,
    extra_ldflags: list[str] | None = None,
    extra_include_paths: list[str] | None = None,
    is_python_module: bool = True,
    pch: Path | None = None,
) -> Extension:
    """Translate, compile and load; raises ``Refused`` or ``CompileFailed``. ``pch``: the
    precompiled prelude's folder (default: the run's, from the environment)."""
    sources = [source for _, source in units]
    headers = local_headers(sources, [Path(p) for p in extra_include_paths or []])
    translation = translate(sources, headers)
    files = [
        (file_name, text) for (file_name, _), text in zip(units, translation.files, strict=False)
    ]
    folders = sorted(
        {str(Path(s.origin).resolve().parent) for _, s in units if Path(s.origin).is_file()}
    )
    built = build(
        name,
        files,
        root,
        cflags=[*host_flags(extra_cflags), *host_flags(extra_cuda_cflags)],
        ldflags=host_ldflags(extra_ldflags),
        includes=[*(extra_include_paths or []), *folders],  # the sources' own headers
        is_python_module=is_python_module,
        pch=pch,
    )
    record = {**translation.report(), "build_s": built.seconds, "compiled": built.compiled}
    return Extension(built.module, built, translation, record)
