"""The suite's xdist grouping, on a scratch suite run the way `make test` runs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("xdist", reason="pytest-xdist is a dev extra: pip install -e '.[dev]'")

TESTS = Path(__file__).parent
XDIST = [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup"]  # as make test

SCRATCH_SUITE = {
    "conftest.py": "from xdist_groups import pytest_collection_modifyitems  # noqa: F401\n",
    "test_fixture_module.py": """
        import os, pytest

        @pytest.fixture(scope="module")
        def built(tmp_path_factory):
            log = tmp_path_factory.getbasetemp().parent / "built.log"
            with log.open("a") as fh:
                fh.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

        @pytest.mark.parametrize("n", range(8))
        def test_uses_the_module_fixture(built, n):
            pass
    """,
    "test_free.py": """
        import pytest

        @pytest.mark.parametrize("n", range(8))
        def test_free(n):
            pass
    """,
}


def test_a_module_fixture_is_built_once_under_xdist(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in SCRATCH_SUITE.items():
        (suite / name).write_text(textwrap.dedent(text))
    base = tmp_path / "base"
    run = subprocess.run(
        [*XDIST, "-p", "no:cacheprovider", "--basetemp", str(base), "-W", "ignore", str(suite)],
        cwd=suite,
        env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "16 passed" in run.stdout
    built = (base / "built.log").read_text().split()
    assert len(built) == 1, f"the module fixture was built on {built}"
