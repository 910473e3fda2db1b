"""``ast.parse``, one thread at a time: every parse of torchport's goes through here.

CPython 3.11 builds the Python objects of a parsed tree with a recursion counter kept in
state every thread shares; two threads parsing at once can interleave there and one of them
fails with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905,
seen "rarely in a threaded application"). A verification runs the original in a thread of
its own beside the port (``agents.verify_pair``), and both parse the program (its argparse
options, its kernel sites) before they start it: a fresh clone's test run failed so. Chat
and the MCP server run work beside their own threads too, so no parse is left out
(``tests/test_astparse.py`` fails on an ``ast.parse`` anywhere else).
"""

from __future__ import annotations

import ast
import threading
from typing import Literal, overload

_LOCK = threading.Lock()


@overload
def parse(source: str | bytes, filename: str = ..., mode: Literal["exec"] = ...) -> ast.Module: ...
@overload
def parse(source: str | bytes, filename: str = ..., *, mode: Literal["eval"]) -> ast.Expression: ...
@overload
def parse(source: str | bytes, filename: str = ..., *, mode: str) -> ast.AST: ...
def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source, filename, mode)`` while no other thread of this process parses."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
