"""``ast.parse``, one thread at a time.

CPython 3.11 builds the Python objects of a parsed tree with a recursion counter kept in
state every thread shares; two threads parsing at once can interleave there and one of them
fails with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905,
seen "rarely in a threaded application"). A verification runs the original in a thread of
its own beside the port (``agents.verify_pair``), and both parse the program (its argparse
options, its kernel sites) before they start it: a fresh clone's test run failed so. Every
parse on those paths goes through this lock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source, filename, mode)`` while no other thread of this process parses."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
