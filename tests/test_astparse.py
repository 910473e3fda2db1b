"""ast.parse one thread at a time: CPython 3.11's AST construction shares a recursion counter
between threads (python/cpython#106905), and a verification parses the program in two
threads at once (the original's run beside the port's). A fresh clone's test run failed
with "SystemError: AST constructor recursion depth mismatch" there."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from torchport.sandbox import astparse

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("agents", "cli", "evals", "prompts", "sandbox", "tools")


def test_a_parse_waits_while_another_holds_the_lock():
    done: list[ast.AST] = []
    with astparse._LOCK:
        worker = threading.Thread(target=lambda: done.append(astparse.parse("x = (1, [2])")))
        worker.start()
        worker.join(timeout=0.5)
        assert worker.is_alive() and not done  # it cannot parse while the lock is held
    worker.join(timeout=30)
    assert isinstance(done[0], ast.Module)


def test_parses_from_many_threads_all_succeed():
    source = "def f(x):\n" + "".join(f"    y{i} = [x, {{'a': (x, {i})}}]\n" for i in range(200))
    errors: list[BaseException] = []

    def parse_many() -> None:
        try:
            for _ in range(30):
                astparse.parse(source)
        except BaseException as exc:  # any failure is the finding
            errors.append(exc)

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _direct_parses(tree: ast.AST) -> list[int]:
    """Lines of ``ast.parse(...)`` and of ``compile(..., ast.PyCF_ONLY_AST)``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ast"
        and node.attr in ("parse", "PyCF_ONLY_AST")
    ]


def test_no_parse_of_torchports_bypasses_the_lock():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "sandbox" / "astparse.py":
                continue
            direct = _direct_parses(ast.parse(path.read_text(encoding="utf-8")))
            assert direct == [], f"{path.relative_to(ROOT)}: ast.parse at lines {direct}"
    assert _direct_parses(ast.parse("import ast\nast.parse('x')\n")) == [2]  # the check sees one
