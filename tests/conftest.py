from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from torchport.tools.scanner import ScanOptions, scan


@pytest.fixture
def scan_source(tmp_path: Path):
    """Scan one Python file written from a dedented string; return (line, rule) pairs."""

    def run(source: str, name: str = "prog.py", **options) -> list[tuple[int, str]]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        result = scan(tmp_path, ScanOptions(**options))
        return [(f.line, f.rule) for f in result.findings if f.path == name]

    return run


@pytest.fixture(autouse=True, scope="session")
def _torchport_home(tmp_path_factory: pytest.TempPathFactory):
    """Checkpoints, scratch copies and dependency overlays of agent runs go to a temporary
    folder, never ~/.cache; pip never reaches an index."""
    import os

    from torchport.agents.llm import local

    home = tmp_path_factory.mktemp("torchport-home")
    saved = {k: os.environ.get(k) for k in ("TORCHPORT_HOME", "TORCHPORT_MODELS", "PIP_NO_INDEX")}
    os.environ["TORCHPORT_MODELS"] = str(local.cache_dir())  # the one model cache, kept
    os.environ["TORCHPORT_HOME"] = str(home)
    # migrate installs what a repository needs (--deps auto): in tests, never from an index
    os.environ["PIP_NO_INDEX"] = "1"
    yield home
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
