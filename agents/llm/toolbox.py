"""The tools an LLM may ask for, run by us inside one workspace folder.

The model never writes files or runs anything itself: it names a tool and its
arguments, and a ``Workspace`` runs it, confined to its root. Edits go through the
AST primitives of ``tools.ast_edits`` (so the file always still parses and compiles) and
are written atomically and recorded. Every tool answers with short text, errors
included, so a model can read the answer and correct itself; nothing raises out.
The tool list is data (``TOOL_SPECS``) from which both the OpenAI ``tools`` schemas
and the plain-text description for servers without native tools are made.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from torchport.sandbox import astparse
from torchport.tools import ast_edits
from torchport.tools.atomicfile import atomic_write

MAX_READ_LINES = 200
MAX_RESULTS = 40
MAX_LINE_CHARS = 160
READABLE_SUFFIXES = frozenset(
    {".py", ".pyi", ".md", ".txt", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".json", ".rst", ".sh"}
)


class ToolError(ValueError):
    """A tool call that cannot run as asked; the message is what the model reads."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # JSON schema type: "string" | "integer"
    description: str
    required: bool = True


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: tuple[Param, ...] = ()


_PATH = Param("path", "string", "file path relative to the repository root")
_REASON = Param("reason", "string", "why this edit is needed, one sentence", required=False)

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "read_file",
        f"Show lines of a file, numbered (at most {MAX_READ_LINES} lines).",
        (
            _PATH,
            Param("start_line", "integer", "first line, 1-based", required=False),
            Param("end_line", "integer", "last line, inclusive", required=False),
        ),
    ),
    ToolSpec(
        "search",
        "Find a regular expression (or literal text) in the repository's .py files.",
        (Param("pattern", "string", "regular expression or literal text"),),
    ),
    ToolSpec(
        "find_uses",
        "Find where a name or dotted attribute (e.g. torch.cuda.amp) is used or imported.",
        (Param("symbol", "string", "a name or dotted name"),),
    ),
    ToolSpec(
        "replace_lines",
        "Replace whole statements on lines start_line..end_line with new_code "
        "(no indentation needed; empty new_code deletes them).",
        (
            _PATH,
            Param("start_line", "integer", "first line of the first statement"),
            Param("end_line", "integer", "last line of the last statement"),
            Param("new_code", "string", "the replacement Python statements"),
            _REASON,
        ),
    ),
    ToolSpec(
        "replace_node",
        "Replace the one expression or statement spanning exactly line:col-end_line:end_col "
        "(1-based columns, end exclusive) with new_code.",
        (
            _PATH,
            Param("line", "integer", "start line"),
            Param("col", "integer", "start column, 1-based"),
            Param("end_line", "integer", "end line"),
            Param("end_col", "integer", "end column, 1-based, exclusive"),
            Param("new_code", "string", "the replacement code"),
            _REASON,
        ),
    ),
    ToolSpec(
        "insert_import",
        "Add `import module` or `from module import name` unless already there.",
        (
            _PATH,
            Param("module", "string", "dotted module name"),
            Param("name", "string", "name to import from the module", required=False),
            _REASON,
        ),
    ),
    ToolSpec(
        "run_verifier", "Run the migrated program on the emulated device; says ok or why not."
    ),
    ToolSpec(
        "finish",
        "Stop: the problem is fixed, or cannot or should not be fixed here.",
        (Param("summary", "string", "what was changed and why, or why nothing was"),),
    ),
)
EDIT_TOOLS = frozenset({"replace_lines", "replace_node", "insert_import"})


def tool_schemas(specs: tuple[ToolSpec, ...] | list[ToolSpec]) -> list[dict]:
    """The OpenAI ``tools`` parameter for these tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": {
                    "type": "object",
                    "properties": {
                        p.name: {"type": p.type, "description": p.description} for p in spec.params
                    },
                    "required": [p.name for p in spec.params if p.required],
                },
            },
        }
        for spec in specs
    ]


def describe_tools(specs: tuple[ToolSpec, ...] | list[ToolSpec]) -> str:
    """The same tools as plain text, for a prompt (servers without native tools)."""
    lines = []
    for spec in specs:
        args = ", ".join(
            f"{p.name}: {'int' if p.type == 'integer' else 'str'}{'' if p.required else '?'}"
            for p in spec.params
        )
        lines.append(f"- {spec.name}({args}): {spec.description}")
    return "\n".join(lines)


@dataclass(frozen=True)
class EditRecord:
    path: str
    start_line: int
    end_line: int
    before: str
    after: str
    reason: str
    tool: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


def numbered(lines: list[str], first: int) -> str:
    """Lines prefixed with their 1-based numbers, the way every tool shows code."""
    return "\n".join(
        f"{n:>5}| {text.rstrip(chr(10)).rstrip(chr(13))}" for n, text in enumerate(lines, first)
    )


def verifier_text(verify: Callable[[], dict]) -> tuple[bool, str]:
    """Run a verify callback; (passed, its JSON summary as short text)."""
    try:
        summary = verify()
    except Exception as exc:  # the verifier's own failure is something to report, not raise
        return False, f"the verifier itself failed: {type(exc).__name__}: {exc}"
    text = json.dumps(summary, default=str, sort_keys=True)
    return bool(summary.get("ok")), text[:2000]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _mentions(node: ast.AST, symbol: str) -> bool:
    if isinstance(node, ast.Name | ast.Attribute):
        dotted = _dotted(node)
        if dotted is not None:
            return dotted == symbol or dotted.endswith("." + symbol)
        return isinstance(node, ast.Attribute) and node.attr == symbol
    if isinstance(node, ast.Import):
        return any(a.name == symbol or a.name.startswith(symbol + ".") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return (
            module == symbol
            or module.startswith(symbol + ".")
            or any(a.name == symbol or f"{module}.{a.name}" == symbol for a in node.names)
        )
    return False


class Workspace:
    """A folder the model may read and edit, and nothing outside it."""

    def __init__(self, root: Path, *, verify: Callable[[], dict] | None = None) -> None:
        self.root = Path(root).resolve()
        self.verify = verify
        self.edits: list[EditRecord] = []
        self._originals: dict[Path, bytes] = {}

    # -- the tool surface ------------------------------------------------------------

    def specs(self, with_verifier: bool | None = None) -> list[ToolSpec]:
        """The tools on offer: run_verifier only when there is something to run."""
        verifier = self.verify is not None if with_verifier is None else with_verifier
        return [s for s in TOOL_SPECS if s.name != "run_verifier" or verifier]

    def call(self, name: str, arguments: dict) -> str:
        """Run tool ``name``; the answer (or the error) as text. Never raises."""
        spec = next((s for s in self.specs() if s.name == name), None)
        if spec is None or name == "finish":
            names = ", ".join(s.name for s in self.specs())
            return f"error: unknown tool {name!r}; available: {names}"
        try:
            kwargs = _check_arguments(spec, arguments)
            return getattr(self, name)(**kwargs)
        except ToolError as exc:
            return f"error: {exc}"
        except ast_edits.EditRefused as exc:
            return f"error: edit refused: {exc}"
        except (OSError, UnicodeDecodeError) as exc:
            return f"error: {type(exc).__name__}: {exc}"
        except Exception as exc:  # a tool bug must reach the model as text, not end the session
            return f"error: the tool failed: {type(exc).__name__}: {exc}"

    # -- tools -------------------------------------------------------------------------

    def read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> str:
        file = self.resolve(path, readable=True)
        lines = _read(file).splitlines(keepends=True)
        start = max(1, start_line)
        end = min(len(lines), end_line if end_line is not None else start + MAX_READ_LINES - 1)
        end = min(end, start + MAX_READ_LINES - 1)
        if start > len(lines) or end < start:
            return f"{path} has {len(lines)} lines; nothing at lines {start}-{end}"
        body = numbered(lines[start - 1 : end], start)
        more = f"\n[{path}: lines {start}-{end} of {len(lines)}]" if end < len(lines) else ""
        return body + more

    def search(self, pattern: str) -> str:
        try:
            regex = re.compile(pattern)
        except re.error:
            regex = re.compile(re.escape(pattern))
        hits = []
        for rel, text in self._python_files():
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{rel}:{n}: {line.strip()[:MAX_LINE_CHARS]}")
        return _capped(hits, f"no match for {pattern!r}")

    def find_uses(self, symbol: str) -> str:
        symbol = symbol.strip()
        if not all(part.isidentifier() for part in symbol.split(".")):
            raise ToolError(f"{symbol!r} is not a name or dotted name")
        hits: list[str] = []
        for rel, text in self._python_files():
            try:
                tree = astparse.parse(text)
            except SyntaxError:
                continue
            lines = text.splitlines()
            found = sorted(
                {
                    n.lineno
                    for n in ast.walk(tree)
                    if isinstance(n, ast.expr | ast.stmt) and _mentions(n, symbol)
                }
            )
            hits.extend(f"{rel}:{n}: {lines[n - 1].strip()[:MAX_LINE_CHARS]}" for n in found)
        return _capped(hits, f"{symbol} is not used in any .py file")

    def replace_lines(
        self, path: str, start_line: int, end_line: int, new_code: str, reason: str = ""
    ) -> str:
        return self._edit(
            "replace_lines",
            path,
            reason,
            lambda source, name: ast_edits.replace_lines(
                source, start_line, end_line, new_code, name
            ),
            (start_line, end_line),
        )

    def replace_node(
        self,
        path: str,
        line: int,
        col: int,
        end_line: int,
        end_col: int,
        new_code: str,
        reason: str = "",
    ) -> str:
        return self._edit(
            "replace_node",
            path,
            reason,
            lambda source, name: ast_edits.replace_node(
                source, line, col, end_line, end_col, new_code, name
            ),
            (line, end_line),
        )

    def insert_import(
        self, path: str, module: str, name: str | None = None, reason: str = ""
    ) -> str:
        return self._edit(
            "insert_import",
            path,
            reason,
            lambda source, file: ast_edits.insert_import(source, module, name or None, file),
            None,
        )

    def run_verifier(self) -> str:
        if self.verify is None:
            raise ToolError("no verifier in this session")
        passed, text = verifier_text(self.verify)
        return ("ok: " if passed else "failed: ") + text

    # -- confinement, writes, undo ---------------------------------------------------------

    def resolve(self, path: str, *, editable: bool = False, readable: bool = False) -> Path:
        """``path`` inside the root, or ToolError: no absolute paths, no ``..``, no escapes."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty relative path")
        raw = path.strip().replace("\\", "/")
        if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw) or Path(raw).is_absolute():
            raise ToolError(f"{path!r} is absolute; give a path relative to the repository root")
        if ".." in raw.split("/"):
            raise ToolError(f"{path!r} leaves the repository; '..' is not allowed")
        file = (self.root / raw).resolve()
        if not file.is_relative_to(self.root):
            raise ToolError(f"{path!r} points outside the repository")
        if not file.is_file():
            raise ToolError(f"no such file: {raw}")
        rel = file.relative_to(self.root)
        if any(part.startswith(".") for part in rel.parts):
            raise ToolError(f"{raw} is hidden; only project source files are available")
        if editable and file.suffix != ".py":
            raise ToolError(f"{raw} is not a .py file; only Python source can be edited")
        if readable and file.suffix not in READABLE_SUFFIXES:
            raise ToolError(f"{raw} is not a source or text file")
        return file

    def mark(self) -> int:
        """Start an undo scope: ``undo()`` goes back to the files as they are now."""
        self._originals.clear()
        return len(self.edits)

    def undo(self) -> list[str]:
        """Put every file edited since ``mark()`` back as it was; the paths restored."""
        restored = []
        for file, data in self._originals.items():
            atomic_write(file, data)
            restored.append(file.relative_to(self.root).as_posix())
        self._originals.clear()
        return restored

    def _edit(
        self,
        tool: str,
        path: str,
        reason: str,
        make: Callable[[str, str], ast_edits.EditResult],
        span: tuple[int, int] | None,
    ) -> str:
        file = self.resolve(path, editable=True)
        data = file.read_bytes()
        source = data.decode("utf-8")
        rel = file.relative_to(self.root).as_posix()
        result = make(source, rel)
        if result.source == source:
            return f"no change: {rel} already reads that way"
        old_lines = source.splitlines(keepends=True)
        new_lines = result.source.splitlines(keepends=True)
        if span is None:  # an import: nothing was replaced, lines were added
            before, start = "", result.start_line
        else:
            start = span[0]
            before = "".join(old_lines[span[0] - 1 : span[1]])
        after = "".join(new_lines[result.start_line - 1 : result.end_line])
        self._originals.setdefault(file, data)
        atomic_write(file, result.source.encode("utf-8"))
        self.edits.append(EditRecord(rel, start, result.end_line, before, after, reason, tool))
        shown = numbered(new_lines[result.start_line - 1 : result.end_line], result.start_line)
        return f"edited {rel}; lines {result.start_line}-{result.end_line} now read:\n{shown}"

    def _python_files(self) -> Iterator[tuple[str, str]]:
        for file in sorted(self.root.rglob("*.py")):
            rel = file.relative_to(self.root)
            if any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
                continue
            if not file.resolve().is_relative_to(self.root):
                continue
            try:
                yield rel.as_posix(), _read(file)
            except (OSError, UnicodeDecodeError):
                continue


def _check_arguments(spec: ToolSpec, arguments: dict) -> dict:
    if not isinstance(arguments, dict):
        raise ToolError(f"arguments of {spec.name} must be a JSON object")
    kwargs = {}
    for p in spec.params:
        value = arguments.get(p.name)
        if value is None:
            if p.required:
                raise ToolError(f"{spec.name} needs argument {p.name!r} ({p.description})")
            continue
        if p.type == "integer":
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ToolError(f"{p.name} must be an integer, got {value!r}") from None
        elif not isinstance(value, str):
            raise ToolError(f"{p.name} must be a string, got {type(value).__name__}")
        kwargs[p.name] = value
    return kwargs


def _capped(hits: list[str], empty: str) -> str:
    if not hits:
        return empty
    more = f"\n[{len(hits) - MAX_RESULTS} more not shown]" if len(hits) > MAX_RESULTS else ""
    return "\n".join(hits[:MAX_RESULTS]) + more


def _read(file: Path) -> str:
    with open(file, encoding="utf-8", newline="") as handle:
        return handle.read()
