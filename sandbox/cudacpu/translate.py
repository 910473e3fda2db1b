"""CUDA C++ to C++ that the host compiler builds against ``runtime/include``.

Most of CUDA's surface is supplied by the runtime's headers (qualifiers as macros,
built-in variables, intrinsics, atomics, the CUDA runtime and torch's CUDA helpers), so
the translation itself is small, and every edit keeps the line count, so compiler
messages and refusals name the user's own file and line (a ``#line`` directive maps the
translated file back to it):

- ``kernel<<<grid, block, shared, stream>>>(args)`` becomes a call of
  ``cudacpu::launch`` with what the translator knows of the kernel: whether it, or a
  function it calls, waits at ``__syncthreads()`` (then its threads run as fibers), and
  whether it uses atomics (then its blocks run in order);
- ``extern __shared__ T name[]`` becomes a pointer to the launch's dynamic shared memory;
- ``__CUDA_ARCH__`` / ``__CUDACC__`` in the user's code read as an sm_80 device pass;
- tensors are CPU tensors under the reference shim, so device checks and constants ask
  for the CPU (``x.is_cuda()`` -> ``x.is_cpu()``, ``kCUDA`` -> ``kCPU``, CUDA kernel
  registrations -> CPU ones), except in an extension that ships CPU kernels of its own
  (see ``cpu_dispatch``): there the checks stay, so CPU tensors take its CPU code;
- a function that uses a refused construct (``unsupported.toml``) becomes a stub that
  raises with the construct, file and line; includes of refused libraries are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import refusals as table
from .lexing import Lines, directive_spans, mask_directives, mask_literals, matching
from .refusals import Refusal
from .structure import Function, enclosing, functions

BARRIER = re.compile(r"\b__syncthreads(_count|_and|_or)?\b")
ATOMIC = re.compile(r"\b(atomic[A-Z]\w*|gpuAtomic\w+|fastAtomicAdd)\s*\(")
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(")
DEFINE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)")
INCLUDE = re.compile(r'#\s*include\s*[<"]([^>"]+)[>"]')
EXTERN_SHARED = re.compile(
    r"\bextern\s+__shared__\s+((?:[\w:<>,*\s]|__align__\s*\(\s*\d+\s*\)|alignas\s*\(\s*\d+\s*\))+?)"
    r"\s*\b(\w+)\s*\[\s*\]\s*;"
)
ALIGN = re.compile(r"\b(__align__|alignas)\s*\(\s*\d+\s*\)")
ALIAS = re.compile(r"\bnamespace\s+(\w+)\s*=\s*([\w:]+)\s*;|\busing\s+namespace\s+([\w:]+)\s*;")
# The device's name in the user's code: the reference shim's tensors are CPU tensors.
DEVICE_TOKENS = (
    # torch 1.x's x.type().is_cuda(): the deprecated type has no is_cpu(); the tensor has
    (re.compile(r"\.type[ \t]*\([ \t]*\)[ \t]*\.is_cuda[ \t]*\([ \t]*\)"), ".is_cpu()"),
    (re.compile(r"\.is_cuda\s*\(\s*\)"), ".is_cpu()"),
    (re.compile(r"\.cuda\s*\(\s*\)"), ".cpu()"),
    (re.compile(r"\bkCUDA\b"), "kCPU"),
    (re.compile(r"\bDeviceType::CUDA\b"), "DeviceType::CPU"),
    (re.compile(r"\b(TORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*)CUDA\b"), r"\1CPU"),
)
ARCH_TOKENS = (
    (re.compile(r"\b__CUDA_ARCH__\b"), "CUDACPU_ARCH"),
    (re.compile(r"\b__CUDACC__\b"), "CUDACPU_CUDACC"),
)
DEVICE_TEST = re.compile(
    r"\bis_cuda\s*\(\s*\)|\bis_cpu\s*\(\s*\)|\bkCUDA\b|\bkCPU\b|DeviceType::(CUDA|CPU)\b"
)
CPU_TEST = re.compile(r"\bis_cpu\s*\(\s*\)|\bkCPU\b|DeviceType::CPU\b")
NOT_CPU_CODE = frozenset(
    [
        "TORCH_CHECK",
        "AT_ERROR",
        "AT_ASSERT",
        "AT_ASSERTM",
        "TORCH_INTERNAL_ASSERT",
        "TORCH_WARN",
        "TORCH_CHECK_NOT_IMPLEMENTED",
        "runtime_error",
        "invalid_argument",
        "Error",
        "throw",
        "printf",
        "fprintf",
        "abort",
        "exit",
        "sizeof",
        "if",
        "while",
        "for",
        "switch",
        "return",
    ]
)


@dataclass(frozen=True)
class Segment:
    """Where a stretch of a source comes from: from ``offset`` on, the text is ``origin``
    from its line ``first_line`` (load_inline joins strings of a Python file)."""

    offset: int
    origin: str
    first_line: int = 1


@dataclass
class Source:
    """One translation unit of an extension."""

    text: str
    origin: str  # the file the user knows it by (a .cu, or the Python file of load_inline)
    cuda: bool  # CUDA code (a .cu file, load_inline's cuda_sources), else host C++
    first_line: int = 1  # the line of ``origin`` where ``text`` starts
    more: list[Segment] = field(default_factory=list)  # later stretches from elsewhere

    masked: str = field(init=False, repr=False)
    code: str = field(init=False, repr=False)
    funcs: list[Function] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.masked = mask_literals(self.text)
        self.code = mask_directives(self.masked)
        self.funcs = functions(self.code)
        self._lines = Lines(self.text)
        self.segments = [Segment(0, self.origin, self.first_line), *self.more]

    def _segment(self, offset: int) -> Segment:
        return [s for s in self.segments if s.offset <= offset][-1]

    def file(self, offset: int) -> str:
        return self._segment(offset).origin

    def line(self, offset: int) -> int:
        seg = self._segment(offset)
        return seg.first_line + self._lines.line(offset) - self._lines.line(seg.offset)

    def site(self, offset: int) -> str:
        return f"{self.file(offset)}:{self.line(offset)}"


@dataclass
class Kernel:
    name: str
    barrier: bool
    atomics: bool
    refused: bool


@dataclass
class Translation:
    files: list[str]  # translated text, one per source, in order
    kernels: list[Kernel]
    refusals: list[Refusal]  # functions turned into raising stubs
    cpu_dispatch: str | None  # "file:line" where the extension branches to CPU code
    dropped_includes: list[str]

    def report(self) -> dict[str, object]:
        return {
            "kernels": [k.name for k in self.kernels if not k.refused],
            "barrier_kernels": [k.name for k in self.kernels if k.barrier and not k.refused],
            "refused": [r.to_json() for r in self.refusals],
            "cpu_kernels": self.cpu_dispatch,
        }


def translate(sources: list[Source], headers: list[Source] | None = None) -> Translation:
    """Translate one extension's sources together (kernels and device functions are
    known across its files, and across ``headers``, the local headers they include,
    which are read for that but compiled as they are). Raises ``Refused`` for a refused
    construct outside any function."""
    known = [*sources, *(headers or [])]
    barrier_macros, refused_macros = _macros(known)
    flags = _flags(known, barrier_macros)
    cpu = cpu_dispatch(sources)
    files, refused, fatal, dropped = [], [], [], []
    for src in sources:
        edits: list[tuple[int, int, str]] = []
        extra = _aliases(src, edits)
        launches = _launches(src)
        stubs, outside = _refusals(src, refused_macros, extra, launches)
        fatal += outside
        refused += [refusal for _, refusal in stubs.values()]
        for f, refusal in stubs.values():
            body = src.text[f.body_start : f.body_end]
            message = json.dumps("torchport CPU runner: " + refusal.message(), ensure_ascii=True)
            edits.append(
                (f.body_start, f.body_end, f"{{ ::cudacpu::refuse({message});{_newlines(body)}}}")
            )
        dropped += _drop_includes(src, edits)
        edits += _launch_edits(src, launches, flags)
        edits += _extern_shared_edits(src)
        edits += _token_edits(src, ARCH_TOKENS)
        if cpu is None:
            edits += _token_edits(src, DEVICE_TOKENS)
        edits += [(seg.offset, seg.offset, _line_directive(seg)) for seg in src.more]
        inside = [(f.body_start, f.body_end) for f, _ in stubs.values()]
        files.append(_prelude(src) + _apply(src.text, edits, inside))
    if fatal:
        raise table.Refused(fatal)
    stubbed = {r.function for r in refused}
    kernels = [
        Kernel(f.name, *flags.get(f.name, (True, True)), refused=f.name in stubbed)
        for src in sources
        for f in src.funcs
        if f.kernel
    ]
    return Translation(files, kernels, refused, cpu, dropped)


def _refusals(
    src: Source,
    refused_macros: dict[str, tuple[table.Family, str]],
    extra: dict[str, list[str]],
    launches: list[tuple[int, int, int, int]],
) -> tuple[dict[int, tuple[Function, Refusal]], list[Refusal]]:
    """The functions to stub (by body offset, each with its first refused construct) and
    the refused constructs outside any function."""
    stubs: dict[int, tuple[Function, Refusal]] = {}
    outside: list[Refusal] = []
    uses = list(_refused_uses(src, refused_macros, extra))
    nested = table.family(table.DYNAMIC_PARALLELISM)
    for start, _, _, _ in launches:
        f = enclosing(src.funcs, start)
        if f is not None and f.device:
            uses.append((start, nested, "a <<<...>>> launch"))
    for offset, family, construct in sorted(uses, key=lambda use: use[0]):
        f = enclosing_or_header(src.funcs, offset)
        if family.device_only and not (f is not None and f.device):
            continue
        name = f.name if f else None
        refusal = Refusal(
            family.name, construct, src.file(offset), src.line(offset), name, family.why
        )
        if f is None:
            outside.append(refusal)
        elif f.body_start not in stubs:
            stubs[f.body_start] = (f, refusal)
    return stubs, outside


def enclosing_or_header(funcs: list[Function], offset: int) -> Function | None:
    """The function whose header or body holds ``offset`` (a parameter's type counts)."""
    for f in funcs:
        if f.start <= offset < f.body_end:
            return f
    return enclosing(funcs, offset)


def _newlines(text: str) -> str:
    return "\n" * text.count("\n")


def _line_directive(seg: Segment) -> str:
    origin = seg.origin.replace("\\", "\\\\").replace('"', '\\"')
    return f'#line {seg.first_line} "{origin}"\n'


def _prelude(src: Source) -> str:
    """Every unit starts with the prelude (torch's extension header and the runtime: one
    header, so one precompiled copy serves them all, see ``pch``)."""
    return "#include <cudacpu/prelude.h>\n" + _line_directive(src.segments[0])


def _apply(text: str, edits: list[tuple[int, int, str]], keep_out: list[tuple[int, int]]) -> str:
    """``text`` with the edits made; an edit inside a stubbed body (other than the stub
    itself) is dropped."""

    def covered(start: int, end: int) -> bool:
        return any(s <= start and end <= e and (start, end) != (s, e) for s, e in keep_out)

    out, last = [], 0
    for start, end, replacement in sorted(e for e in edits if not covered(e[0], e[1])):
        if start < last:
            continue  # overlaps an earlier edit (cannot happen for well-formed code)
        out += [text[last:start], replacement]
        last = end
    return "".join([*out, text[last:]])


# --- what is known across the extension -------------------------------------------------


def _macros(sources: list[Source]) -> tuple[set[str], dict[str, tuple[table.Family, str]]]:
    """Macros that expand to a barrier, and macros that expand to a refused construct."""
    barrier, refused = set(), {}
    for src in sources:
        for start, end in directive_spans(src.masked):
            directive = src.masked[start:end]
            m = DEFINE.match(directive.lstrip())
            if not m:
                continue
            body = directive.lstrip()[m.end() :]
            if BARRIER.search(body):
                barrier.add(m.group(1))
            for family in table.families():
                hit = family.pattern.search(body) if family.pattern else None
                if hit and not family.device_only:
                    refused[m.group(1)] = (family, hit.group(0))
    return barrier, refused


def _flags(sources: list[Source], barrier_macros: set[str]) -> dict[str, tuple[bool, bool]]:
    """(barrier, atomics) per function name, through the calls between functions."""
    barrier_re = (
        re.compile(BARRIER.pattern + "|" + "|".join(rf"\b{re.escape(m)}\b" for m in barrier_macros))
        if barrier_macros
        else BARRIER
    )
    direct: dict[str, list[bool]] = {}
    calls: dict[str, set[str]] = {}
    for src in sources:
        for f in src.funcs:
            body = src.code[f.body_start : f.body_end]
            flags = direct.setdefault(f.name, [False, False])
            flags[0] |= bool(barrier_re.search(body))
            flags[1] |= bool(ATOMIC.search(body))
            calls.setdefault(f.name, set()).update(CALL.findall(body))
    changed = True
    while changed:
        changed = False
        for name, callees in calls.items():
            for callee in callees & direct.keys():
                for k in (0, 1):
                    if direct[callee][k] and not direct[name][k]:
                        direct[name][k] = changed = True
    return {name: (b, a) for name, (b, a) in direct.items()}


def cpu_dispatch(sources: list[Source]) -> str | None:
    """Where the extension sends CPU tensors to CPU code of its own (``file:line``), or
    None. It does when a source registers a CPU kernel beside a CUDA one
    (``TORCH_LIBRARY_IMPL(ns, CPU, m)``), or branches on the device: an ``if`` or
    ``switch`` whose condition tests ``is_cuda()`` / ``is_cpu()`` / ``kCUDA`` / ``kCPU``,
    where the branch a CPU tensor takes calls something other than an error check (an
    ``if (!x.is_cuda()) AT_ERROR(...)`` is a check, not CPU code), or a ``?:`` on such a
    test."""
    for src in sources:
        m = re.search(r"\bTORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*CPU\b", src.code)
        if m:
            return src.site(m.start())
        for m in re.finditer(r"\b(if|switch)\s*\(", src.code):
            open_ = m.end() - 1
            close = matching(src.code, open_, "(", ")")
            condition = src.code[open_:close] if close > 0 else ""
            if not DEVICE_TEST.search(condition):
                continue
            if m.group(1) == "switch" or _cpu_branch_runs_code(src, m.start(), open_, close):
                return src.site(m.start())
        m = re.search(
            r"(\bis_cuda\s*\(\s*\)|\bis_cpu\s*\(\s*\)|\bkCUDA\b|\bkCPU\b)\s*\)*\s*\?", src.code
        )
        if m:
            return src.site(m.start())
    return None


def _statement(code: str, start: int) -> int:
    """The end of the statement that starts at ``start`` (a block or up to its ";")."""
    i = start
    while i < len(code) and code[i].isspace():
        i += 1
    if i < len(code) and code[i] == "{":
        end = matching(code, i, "{", "}")
        return len(code) if end < 0 else end
    end = code.find(";", i)
    return len(code) if end < 0 else end + 1


def _cpu_branch_runs_code(src: Source, if_start: int, open_: int, close: int) -> bool:
    code = src.code
    condition = code[open_:close]
    negated = condition[1:].lstrip().startswith("!") or "!=" in condition
    cpu_first = bool(CPU_TEST.search(condition)) != negated
    then_end = _statement(code, close)
    rest = code[then_end:]
    has_else = re.match(r"\s*else\b", rest)
    if cpu_first:
        branch = code[close:then_end]
    elif has_else:
        else_start = then_end + has_else.end()
        branch = code[else_start : _statement(code, else_start)]
    elif "return" in code[close:then_end]:
        f = enclosing(src.funcs, if_start)
        branch = code[then_end : f.body_end if f else len(code)]
    else:
        return False
    return any(name not in NOT_CPU_CODE for name in CALL.findall(branch))


# --- per-file edits ---------------------------------------------------------------------


def _aliases(src: Source, edits: list[tuple[int, int, str]]) -> dict[str, list[str]]:
    """``namespace cg = cooperative_groups;`` / ``using namespace nvcuda;`` outside any
    function: the statement is dropped (the library is not there) and, for an alias, its
    name joins the refused family's patterns."""
    extra: dict[str, list[str]] = {}
    for m in ALIAS.finditer(src.code):
        if enclosing(src.funcs, m.start()) is not None:
            continue
        target = m.group(2) or m.group(3)
        for family in table.families():
            if family.pattern and family.pattern.search(target):
                edits.append((m.start(), m.end(), ""))
                if m.group(1):
                    extra.setdefault(family.name, []).append(rf"\b{re.escape(m.group(1))}::")
                break
    return extra


def _refused_uses(
    src: Source, refused_macros: dict[str, tuple[table.Family, str]], extra: dict[str, list[str]]
) -> Iterator[tuple[int, table.Family, str]]:
    """(offset, family, construct) of each refused construct in code (not in comments,
    strings, #include lines or the #define of a refused macro)."""
    skip = [
        (s, e)
        for s, e in directive_spans(src.masked)
        if re.match(r"\s*#\s*(include|define|pragma|error|warning)\b", src.masked[s:e])
    ]
    dropped = [(m.start(), m.end()) for m in ALIAS.finditer(src.code)]

    def skipped(offset: int) -> bool:
        return any(s <= offset < e for s, e in [*skip, *dropped])

    for family in table.families():
        patterns = [family.pattern] if family.pattern else []
        patterns += [re.compile(p) for p in extra.get(family.name, [])]
        for pattern in patterns:
            for m in pattern.finditer(src.masked):
                if not skipped(m.start()):
                    yield m.start(), family, m.group(0).rstrip("<( \t\n").strip()
    for name, (family, construct) in refused_macros.items():
        for m in re.finditer(rf"\b{re.escape(name)}\b", src.masked):
            if not skipped(m.start()):
                yield m.start(), family, f"{construct} (through the macro {name})"


def _drop_includes(src: Source, edits: list[tuple[int, int, str]]) -> list[str]:
    dropped = []
    for start, end in directive_spans(src.masked):
        m = INCLUDE.match(src.text[start:end].lstrip())
        if m and table.header_family(m.group(1)) is not None:
            edits.append((start, end, "// (dropped) " + " ".join(src.text[start:end].split())))
            dropped.append(m.group(1))
    return dropped


def _launches(src: Source) -> list[tuple[int, int, int, int]]:
    """(kernel start, "<<<" offset, ">>>" offset, the arguments' "(" offset) per launch."""
    code = src.masked
    found = []
    for m in re.finditer(r"<<<", code):
        config_end = _close_config(code, m.end())
        if config_end < 0:
            continue
        open_ = config_end + 3
        while open_ < len(code) and code[open_].isspace():
            open_ += 1
        if open_ >= len(code) or code[open_] != "(":
            continue
        found.append((_kernel_start(code, m.start()), m.start(), config_end, open_))
    return found


def _close_config(code: str, start: int) -> int:
    depth = 0
    for i in range(start, len(code)):
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and code.startswith(">>>", i):
            return i
        elif c == ";":
            return -1
    return -1


def _kernel_start(code: str, end: int) -> int:
    """Where the kernel expression before ``<<<`` starts: a (qualified) name, with
    template arguments."""
    i = end
    while True:
        while i > 0 and code[i - 1].isspace():
            i -= 1
        if i > 0 and code[i - 1] == ">":
            depth = 0
            while i > 0:
                i -= 1
                if code[i] == ">":
                    depth += 1
                elif code[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
            continue
        j = i
        while j > 0 and (code[j - 1].isalnum() or code[j - 1] == "_"):
            j -= 1
        i = j
        if code[max(0, i - 2) : i] == "::":
            i -= 2
            continue
        return i


def _split_top(text: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[last:i])
            last = i + 1
    return [*parts, text[last:]]


def _launch_edits(
    src: Source, launches: list[tuple[int, int, int, int]], flags: dict[str, tuple[bool, bool]]
) -> list[tuple[int, int, str]]:
    """``k<T><<<g, b>>>(x, n)`` -> ``::cudacpu::launch(info, g, b, 0, 0, [&](auto...
    cudacpu_a) { k<T>(cudacpu_a...); }, x, n)``: the configuration and the arguments stay
    where they are (edited like the rest of the file), the kernel's name moves."""
    edits = []
    for start, config, config_end, open_ in launches:
        kernel = " ".join(src.text[start:config].split())
        name = re.sub(r"<.*", "", kernel).split("::")[-1].strip()
        barrier, atomics = flags.get(name, (True, True))  # unknown: the safe assumptions
        parts = _split_top(src.masked[config + 3 : config_end])
        defaults = ", 0" * (4 - len(parts)) if 2 <= len(parts) <= 4 else None
        if defaults is None:
            continue  # not a launch configuration: left for the compiler to reject
        info = f'::cudacpu::KernelInfo{{"{name}", {str(barrier).lower()}, {str(atomics).lower()}}}'
        close = matching(src.masked, open_, "(", ")")
        has_args = close > 0 and src.masked[open_ + 1 : close - 1].strip() != ""
        body = f"[&](auto... cudacpu_a) {{ {kernel}(cudacpu_a...); }}" + (", " if has_args else "")
        edits.append((start, config + 3, f"::cudacpu::launch({info}, "))
        edits.append((config_end, open_ + 1, f"{defaults}, {body}"))
    return edits


def _extern_shared_edits(src: Source) -> list[tuple[int, int, str]]:
    edits = []
    for m in EXTERN_SHARED.finditer(src.code):
        kind = " ".join(ALIGN.sub("", src.text[m.start(1) : m.end(1)]).split())
        name = m.group(2)
        edits.append(
            (
                m.start(),
                m.end(),
                f"{kind}* const {name} = reinterpret_cast<{kind}*>(::cudacpu::dynamic_shared());",
            )
        )
    return edits


def _token_edits(
    src: Source, tokens: Iterable[tuple[re.Pattern[str], str]]
) -> list[tuple[int, int, str]]:
    edits = []
    for pattern, replacement in tokens:
        for m in pattern.finditer(src.masked):
            edits.append((m.start(), m.end(), m.expand(replacement)))
    return edits


def local_headers(sources: list[Source], folders: list[Path]) -> list[Source]:
    """The headers the sources include with quotes, found next to the including file or
    in ``folders``, and the headers those include, each once."""
    found: dict[Path, Source] = {}
    todo = [(src, Path(src.origin).parent) for src in sources]
    while todo:
        src, here = todo.pop()
        for start, end in directive_spans(src.masked):
            m = re.match(r'\s*#\s*include\s*"([^"]+)"', src.text[start:end])
            if not m:
                continue
            for folder in (here, *folders):
                path = (folder / m.group(1)).resolve()
                if path.is_file() and path not in found:
                    text = path.read_text(encoding="utf-8", errors="replace")
                    found[path] = Source(text, str(path), cuda=True)
                    todo.append((found[path], path.parent))
                    break
    return list(found.values())


def source_files(paths: list[Path]) -> list[Source]:
    """Sources of ``load(sources=[...])``: a ``.cu`` file is CUDA, the rest host C++."""
    return [
        Source(
            Path(p).read_text(encoding="utf-8", errors="replace"), str(p), Path(p).suffix == ".cu"
        )
        for p in paths
    ]
