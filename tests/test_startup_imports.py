"""`torchport migrate --no-verify` never imports torch: its start-up is seconds, and the
codemods need none of it. The sandbox's stand-ins import torch where they make data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "libcst.matchers")


def _loaded_after(code: str, env_home: Path) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"TORCHPORT_HOME": str(env_home), "PATH": "/usr/bin:/bin"},
    ).stdout
    return set(out.split())


def test_importing_the_agent_graph_imports_neither_torch_nor_libcst_matchers(tmp_path):
    assert _loaded_after("import torchport.agents.graph", tmp_path) == set()


def test_a_migration_without_verification_never_imports_torch(tmp_path):
    repo = tmp_path / "repo"
    files = {
        "model.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n",
        "train.py": "import torch\nfrom model import Net\n\nnet = Net().cuda()\n"
        "torch.cuda.synchronize()\n",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(text)
    run = (
        "import contextlib, io\nfrom torchport.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['migrate', {str(repo)!r}, '-t', 'tpu', '--no-verify', '--dry-run',"
        " '-q', '--llm', 'none']) == 0"
    )
    assert "torch" not in _loaded_after(run, tmp_path / "home")


def test_the_stand_ins_still_make_their_data(tmp_path):
    """The imports moved into the functions: the functions still work."""
    from torchport.sandbox.synthetic import data, files

    assert files.write_image_folder(tmp_path / "images") > 0
    assert data.labels(4, 3, data.generator("t")).shape == (4,)


def test_preparing_a_run_on_the_cached_native_emulator_imports_no_torch(tmp_path):
    """torchport finds the library for each emulated run without loading torch itself
    (the emulator package imports torch; the build and choice live outside it)."""
    from torchport.sandbox.native import build

    if not build.library_path().is_file():
        pytest.skip(f"the native emulator is not built here ({build.library_path()}): make setup")
    code = (
        "import os\n"
        f"os.environ[{build.CACHE_ENV!r}] = {str(build.cache_root())!r}\n"
        "from torchport.sandbox.harness import prepare_for_sandbox\n"
        "paths, env = prepare_for_sandbox('tpu')\n"
        "assert env['TORCHPORT_EMULATOR_LIB'], env"
    )
    assert "torch" not in _loaded_after(code, tmp_path)
