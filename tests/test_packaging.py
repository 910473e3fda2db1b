"""Every package folder is declared in pyproject.toml, so a wheel (not only the
editable install) carries it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = {"agents", "tools", "sandbox", "evals", "prompts", "cli"}


def test_every_package_folder_is_declared():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = {folder: name for name, folder in config["package-dir"].items()}
    folders = {
        str(init.parent.relative_to(ROOT))
        for top in TOP
        for init in (ROOT / top).rglob("__init__.py")
        if "fixtures" not in init.parts and "suite" not in init.parts  # data, not our code
    }
    assert folders == set(declared), f"undeclared: {folders - set(declared)}"
    assert set(config["packages"]) == set(declared.values())
