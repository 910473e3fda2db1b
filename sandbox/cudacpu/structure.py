"""The function definitions of a CUDA source file: where each body starts and ends, what
it is called, whether it is a kernel.

Not a C++ parser: a brace scan over the literal- and directive-masked text (see
``lexing``) that knows namespaces, ``extern "C"`` blocks and class bodies (scopes that
hold definitions) from function bodies and initializers. That is what the translator
needs: which function a construct is in (to refuse that function by name), which kernels
wait at a barrier, and which code is device code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .lexing import matching

# Words whose parentheses come before a function's name in its header.
_NOT_A_NAME = frozenset(
    [
        "sizeof",
        "decltype",
        "alignof",
        "alignas",
        "__align__",
        "__attribute__",
        "__launch_bounds__",
        "__declspec",
        "noexcept",
        "static_assert",
        "if",
        "while",
        "for",
        "switch",
        "return",
    ]
)
_SCOPE = re.compile(r"^(?:inline\s+)?namespace\b[\w:\s]*$|^extern\s*\"\s*\"$")
_CLASS = re.compile(r"^(?:template\s*<.*>\s*)?(?:typedef\s+)?(?:class|struct|union)\b", re.S)
_IDENT_BEFORE = re.compile(r"(~?[A-Za-z_]\w*)\s*$")


@dataclass(frozen=True)
class Function:
    name: str
    start: int  # the header's first character
    body_start: int  # the "{"
    body_end: int  # just past the "}"
    header: str  # masked

    @property
    def kernel(self) -> bool:
        return "__global__" in self.header

    @property
    def device(self) -> bool:
        """Runs on the GPU only (a kernel or a ``__device__`` function that is not also
        ``__host__``)."""
        return self.kernel or ("__device__" in self.header and "__host__" not in self.header)


def _strip_parens(text: str) -> str:
    out, depth = [], 0
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def function_name(header: str) -> str | None:
    """The name a function header declares (``None`` if it has no parameter list)."""
    for m in re.finditer(r"\(", header):
        before = _IDENT_BEFORE.search(header, 0, m.start())
        if before is None:
            if header[: m.start()].rstrip().endswith("operator"):
                return "operator()"
            continue
        if before.group(1) not in _NOT_A_NAME:
            return before.group(1)
        end = matching(header, m.start(), "(", ")")
        if end < 0:
            return None
    return None


def _without_template_head(h: str) -> str:
    """``template <typename T, int N = 4> void f()`` -> ``void f()`` (defaults hold "=")."""
    while h.startswith("template") and "<" in h:
        depth, start = 0, h.index("<")
        for i in range(start, len(h)):
            depth += {"<": 1, ">": -1}.get(h[i], 0)
            if depth == 0:
                h = h[i + 1 :].lstrip()
                break
        else:
            return h
    return h


def _kind(header: str) -> str:
    """What a "{" at namespace or class scope opens: scope, class, function or other."""
    h = _without_template_head(" ".join(header.split()))
    if _SCOPE.match(h) or h == "":
        return "scope" if h else "other"
    if _CLASS.match(h) and "(" not in _strip_parens(h.split("{")[0]) and "=" not in h:
        return "class"
    top = _strip_parens(h)
    if "=" in top.replace("operator=", "").replace("==", "").replace("<=", "").replace(
        ">=", ""
    ).replace("!=", ""):
        return "other"
    if "(" in h and function_name(h):
        return "function"
    return "other"


def functions(code: str) -> list[Function]:
    """Every function defined in ``code`` (literal- and directive-masked), in order;
    member functions defined in a class body included, lambdas and local classes not."""
    found: list[Function] = []
    i, boundary, n = 0, 0, len(code)
    while i < n:
        c = code[i]
        if c in ";}":
            boundary = i + 1
        elif c == "{":
            header = code[boundary:i]
            kind = _kind(header)
            if kind in ("scope", "class"):
                boundary = i + 1  # definitions inside: keep scanning at this level
            else:
                end = matching(code, i, "{", "}")
                end = n if end < 0 else end
                if kind == "function":
                    lead = len(header) - len(header.lstrip())
                    name = function_name(" ".join(header.split())) or "?"
                    found.append(Function(name, boundary + lead, i, end, header))
                    boundary = end
                i = end
                continue
        i += 1
    return found


def enclosing(funcs: list[Function], offset: int) -> Function | None:
    """The function whose body holds ``offset`` (the outermost, for nested classes)."""
    for f in funcs:
        if f.body_start <= offset < f.body_end:
            return f
    return None
