"""TPP003: a CUDA build of torch pinned in requirements files and ``pip install`` lines
becomes the target's install line, written by the migration (issue 14: a mechanical fix
left manual was a chore a reviewer would hand back)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.tools.codemods.torchbuild import torch_build_line
from torchport.tools.migrate import MigrateOptions, migrate

REQUIREMENTS = """\
--extra-index-url https://download.pytorch.org/whl/cu121
torch==2.3.1+cu121  # the GPU build
torchvision==0.18.1+cu121 ; python_version >= "3.9"
numpy>=1.24
"""
INSTALL = """\
#!/bin/sh
pip install torch==2.3.1+cu121 "torchvision==0.18.1+cu121" --index-url https://download.pytorch.org/whl/cu121
pip install -r requirements.txt
"""
DOCKERFILE = """\
FROM python:3.11
RUN pip install --extra-index-url=https://download.pytorch.org/whl/cu118 torch==2.1.0+cu118
"""
CONDA = "dependencies:\n  - pytorch-cuda=12.1\n"

EXPECTED = {
    "tpu": (
        'torch>=2.11,<=2.15  # the GPU build\ntorch-tpu\ntorchvision ; python_version >= "3.9"\n'
        "numpy>=1.24\n",
        '#!/bin/sh\npip install "torch>=2.11,<=2.15" torch-tpu torchvision\n'
        "pip install -r requirements.txt\n",
        'FROM python:3.11\nRUN pip install "torch>=2.11,<=2.15" torch-tpu\n',
    ),
    "neuron": (
        'torch  # the GPU build\ntorch-neuronx>=2.14\ntorchvision ; python_version >= "3.9"\n'
        "numpy>=1.24\n",
        '#!/bin/sh\npip install torch "torch-neuronx>=2.14" torchvision\n'
        "pip install -r requirements.txt\n",
        'FROM python:3.11\nRUN pip install torch "torch-neuronx>=2.14"\n',
    ),
    "xla": (
        "torch==2.9.*  # the GPU build\ntorch_xla[tpu]==2.9.*\n"
        'torchvision ; python_version >= "3.9"\nnumpy>=1.24\n',
        '#!/bin/sh\npip install "torch==2.9.*" "torch_xla[tpu]==2.9.*" torchvision\n'
        "pip install -r requirements.txt\n",
        'FROM python:3.11\nRUN pip install "torch==2.9.*" "torch_xla[tpu]==2.9.*"\n',
    ),
    "accelerator": (
        'torch==2.3.1  # the GPU build\ntorchvision==0.18.1 ; python_version >= "3.9"\n'
        "numpy>=1.24\n",
        "#!/bin/sh\npip install torch==2.3.1 torchvision==0.18.1\n"
        "pip install -r requirements.txt\n",
        "FROM python:3.11\nRUN pip install torch==2.1.0\n",
    ),
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name, text in {
        "requirements.txt": REQUIREMENTS,
        "install.sh": INSTALL,
        "Dockerfile": DOCKERFILE,
        "environment.yml": CONDA,
        "train.py": "import torch\n",
    }.items():
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_pins_become_the_targets_install_line_and_a_second_pass_changes_nothing(
    repo: Path, tmp_path: Path, target: str
):
    out = tmp_path / "out"
    result = migrate(repo, MigrateOptions(target=target, out=out))
    requirements, install, dockerfile = EXPECTED[target]
    assert (out / "requirements.txt").read_text() == requirements
    assert (out / "install.sh").read_text() == install
    assert (out / "Dockerfile").read_text() == dockerfile
    # conda's pytorch-cuda is no line a pip requirement replaces: left, with the reason
    assert (out / "environment.yml").read_text() == CONDA
    left = [(f.path, f.rule) for f, _ in result.left_for_humans]
    assert left == [("environment.yml", "TPP005")]
    again = migrate(out, MigrateOptions(target=target, out=tmp_path / "again"))
    assert not again.changes
    assert not [f for f in again.scan.findings if f.rule == "TPP003"]


def test_lines_it_does_not_understand_are_left_not_guessed():
    # a pin inside a longer requirement expression, and pyproject syntax
    assert torch_build_line("foo @ torch==2.1.0+cu121\n", "tpu", "requirements.txt") is None
    assert torch_build_line('  "torch==2.1.0+cu121",\n', "tpu", "pyproject.toml") is None
    # an index line that is not the CUDA index stays
    assert (
        torch_build_line("--extra-index-url https://example.org/simple\n", "tpu", "r.txt") is None
    )
