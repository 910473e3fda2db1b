"""Bad input is listed under `skipped` with its reason and never crashes the scan."""

from __future__ import annotations

import os
from pathlib import Path

from torchport.tools.scanner import ScanOptions, scan

CUDA_LINE = "import torch\nx = torch.zeros(1).cuda()\n"


def _skipped(result) -> dict[str, str]:
    return {s.path: s.reason for s in result.skipped}


def _paths_with_findings(result) -> set[str]:
    return {f.path for f in result.findings}


def test_gitignore_virtualenvs_build_and_cache_folders_are_not_scanned(tmp_path: Path):
    (tmp_path / ".gitignore").write_text("generated/\n*.tmp.py\n!keep.tmp.py\n")
    for rel in [
        "generated/a.py",
        "x.tmp.py",
        "keep.tmp.py",
        ".venv/lib/b.py",
        "build/c.py",
        "__pycache__/d.py",
        "pkg/node_modules/e.py",
        "myenv/lib/f.py",
        "src/train.py",
        "pkg.egg-info/g.py",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(CUDA_LINE)
    (tmp_path / "myenv/pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "src/.gitignore").write_text("local_*.py\n")
    (tmp_path / "src/local_x.py").write_text(CUDA_LINE)
    result = scan(tmp_path)
    assert _paths_with_findings(result) == {"keep.tmp.py", "src/train.py"}


def test_symlinks_are_never_followed_out_of_the_repository(tmp_path: Path):
    outside = tmp_path / "outside"
    repo = tmp_path / "repo"
    outside.mkdir()
    repo.mkdir()
    (outside / "secret.py").write_text(CUDA_LINE)
    (repo / "real.py").write_text(CUDA_LINE)
    os.symlink(outside / "secret.py", repo / "link_out.py")
    os.symlink(outside, repo / "dir_out")
    os.symlink(repo / "real.py", repo / "alias.py")
    os.symlink(repo / "missing.py", repo / "broken.py")
    result = scan(repo)
    assert _paths_with_findings(result) == {"real.py"}
    skipped = _skipped(result)
    assert "out of the repository" in skipped["link_out.py"]
    assert "out of the repository" in skipped["dir_out"]
    assert "broken symlink" in skipped["broken.py"]
    assert "alias.py" not in skipped  # scanned once, at its real path


def test_unparsable_binary_huge_and_undecodable_files_are_skipped_with_reasons(tmp_path: Path):
    (tmp_path / "py2.py").write_text('import torch\nprint "on cuda"\nx.cuda()\n')
    (tmp_path / "broken.py").write_text("import torch\ndef f(:\n    x.cuda()\n")
    (tmp_path / "blob.py").write_bytes(b"cuda\x00\x01\x02" * 10)
    (tmp_path / "latin.py").write_bytes("# caf\xe9\nx.cuda()\n".encode("latin-1"))
    (tmp_path / "declared.py").write_bytes(
        "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\nx.cuda()\n".encode("latin-1")
    )
    (tmp_path / "huge.py").write_text(CUDA_LINE + "# pad\n" * 5000)
    (tmp_path / "bad.ipynb").write_text("{not json")
    (tmp_path / "ok.py").write_text(CUDA_LINE)
    result = scan(tmp_path, ScanOptions(max_bytes=10_000))
    skipped = _skipped(result)
    assert skipped["py2.py"].startswith("Python 2 source")
    assert skipped["broken.py"].startswith("syntax error at line 2")
    assert skipped["blob.py"] == "binary file"
    assert "not valid utf-8" in skipped["latin.py"]
    assert skipped["huge.py"].startswith("larger than 10000 bytes")
    assert "not valid JSON" in skipped["bad.ipynb"]
    # A declared encoding is honoured, and good files are still scanned.
    assert _paths_with_findings(result) == {"ok.py", "declared.py"}
    assert result.files_scanned == 2


def test_prefilter_skips_parsing_but_no_prefilter_reports_every_syntax_error(tmp_path: Path):
    (tmp_path / "plain_broken.py").write_text("def f(:\n    return 1\n")
    assert _skipped(scan(tmp_path)) == {}
    assert (
        "syntax error" in _skipped(scan(tmp_path, ScanOptions(prefilter=False)))["plain_broken.py"]
    )


def test_notebook_cells_have_cell_relative_locations_and_shell_lines(tmp_path: Path):
    import json

    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# uses torch.cuda\n"]},
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": 1,
                "source": ["!nvidia-smi\n", "import torch\n"],
            },
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": 2,
                "source": ["%matplotlib inline\n", "x = torch.randn(2)\n", "y = x.cuda()\n"],
            },
        ],
    }
    (tmp_path / "explore.ipynb").write_text(json.dumps(nb))
    result = scan(tmp_path)
    assert [(f.cell, f.line, f.rule) for f in result.findings] == [
        (1, 1, "TPK013"),
        (2, 3, "TPD001"),
    ]
