"""Repository inspection beyond findings: entry points ranked by likelihood and the
dependencies declared in every common format."""

from __future__ import annotations

import json
from pathlib import Path

from torchport.tools.scanner import scan


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_entry_points_are_ranked_by_evidence(tmp_path: Path):
    _write(
        tmp_path,
        {
            "scripts/train_gpt.py": "import argparse\nimport torch\n\ndef main():\n"
            "    loss.backward()\n\nif __name__ == '__main__':\n    main()\n",
            "tools/convert.py": "if __name__ == '__main__':\n    print('convert')\n",
            "pkg/__init__.py": "",
            "pkg/__main__.py": "print('pkg')\n",
            "pkg/cli.py": "def main():\n    pass\n",
            "utils.py": "def helper():\n    return 1\n",
            "launch.sh": "#!/bin/sh\ntorchrun --nproc_per_node=8 scripts/train_gpt.py --lr 3e-4\n",
            "README.md": "Run `python -m pkg --help` for the CLI.\n",
            "pyproject.toml": "[project]\nname='x'\nversion='0'\n"
            "[project.scripts]\nxcli = 'pkg.cli:main'\n",
        },
    )
    entries = scan(tmp_path).entrypoints
    paths = [e.path for e in entries]
    assert paths[0] == "scripts/train_gpt.py"
    assert entries[0].kind == "torchrun"
    assert entries[0].command == "torchrun --nproc_per_node=8 scripts/train_gpt.py --lr 3e-4"
    by_path = {e.path: e for e in entries}
    assert by_path["pkg/__main__.py"].command.startswith("python -m pkg")
    assert (
        by_path["pkg/cli.py"].kind == "console-script" and by_path["pkg/cli.py"].command == "xcli"
    )
    assert paths.index("pkg/__main__.py") < paths.index("tools/convert.py")
    assert "utils.py" not in paths


def test_dependencies_from_every_format_flag_cuda_only_packages(tmp_path: Path):
    _write(
        tmp_path,
        {
            "requirements.txt": "--extra-index-url https://download.pytorch.org/whl/cu121\n"
            "torch==2.1.0+cu121\nnumpy>=1.24  # arrays\n# flash-attn\n",
            "environment.yml": "name: env\nchannels:\n  - nvidia\ndependencies:\n"
            "  - python=3.11\n  - pytorch-cuda=12.1\n  - pip:\n    - xformers\n",
            "pyproject.toml": "[project]\nname = 'p'\nversion = '0'\n"
            'dependencies = [\n  "einops",\n  "bitsandbytes>=0.41",\n]\n',
            "setup.cfg": "[options]\ninstall_requires =\n    cupy-cuda12x\n    tqdm\n",
            "setup.py": "from setuptools import setup\n"
            "setup(name='s', install_requires=['triton>=2', 'pyyaml'])\n",
        },
    )
    result = json.loads(
        __import__("torchport.tools.report", fromlist=["render_json"]).render_json(scan(tmp_path))
    )
    deps = {(d["path"], d["name"]): d["cuda_only"] for d in result["dependencies"]}
    assert deps == {
        ("requirements.txt", "torch"): True,
        ("requirements.txt", "numpy"): False,
        ("environment.yml", "python"): False,
        ("environment.yml", "pytorch-cuda"): True,
        ("environment.yml", "xformers"): True,
        ("pyproject.toml", "einops"): False,
        ("pyproject.toml", "bitsandbytes"): True,
        ("setup.cfg", "cupy-cuda12x"): True,
        ("setup.cfg", "tqdm"): False,
        ("setup.py", "triton"): True,
        ("setup.py", "pyyaml"): False,
    }
    findings = {(f["path"], f["line"], f["rule"]) for f in result["findings"]}
    assert ("requirements.txt", 1, "TPP003") in findings
    assert ("requirements.txt", 4, "TPP002") not in findings  # a comment
    assert ("environment.yml", 6, "TPP005") in findings
    assert ("setup.py", 2, "TPP002") in findings
