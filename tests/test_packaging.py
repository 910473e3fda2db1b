"""What an installed torchport carries: every file of the product folders under the
``torchport`` namespace (modules and data alike), and nothing else: no tests,
benchmarks, scripts or examples. Checked on a real build of the package (setuptools'
``build_py``, what a wheel is made of), from a copy, so the tree is left untouched."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("agents", "tools", "sandbox", "evals", "prompts", "cli")
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md")
NOT_SHIPPED = shutil.ignore_patterns("__pycache__", "*.pyc")


def _files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as a wheel would hold it: ``build/lib/torchport``."""
    source = tmp_path_factory.mktemp("source")
    for name in (*PRODUCT, "tests", "benchmarks"):  # the last two must stay out
        shutil.copytree(ROOT / name, source / name, ignore=NOT_SHIPPED)
    for name in BUILD_INPUTS:
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("lib")
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)],
        cwd=source,
        check=True,
        capture_output=True,
    )
    return out


def test_the_build_holds_only_the_torchport_namespace(built: Path) -> None:
    assert [p.name for p in built.iterdir()] == ["torchport"]
    assert sorted(p.name for p in (built / "torchport").iterdir()) == sorted(PRODUCT)


@pytest.mark.parametrize("folder", PRODUCT)
def test_every_file_of_a_product_folder_is_built(built: Path, folder: str) -> None:
    """Modules and package data alike: a new subpackage or data file needs no list."""
    missing = _files(ROOT / folder) - _files(built / "torchport" / folder)
    assert not missing, f"not in the build: {sorted(missing)}"


def test_the_build_ships_the_data_the_code_reads(built: Path) -> None:
    """A few files each kind of package data is read from, by name."""
    package = built / "torchport"
    for rel in (
        "tools/catalogue/data",
        "tools/catalogue/docs",
        "agents/data/tolerance.toml",
        "sandbox/bootstrap",
        "sandbox/isolation/etc",
        "prompts/rewriter.md",
        "evals/suite/README.md",
        "agents/llm/NOTICE-qwen.txt",
        "cli/__main__.py",
    ):
        assert (package / rel).exists(), rel
