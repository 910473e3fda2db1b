"""The pre-commit hook (.pre-commit-hooks.yaml), run by pre-commit itself: `pre-commit
try-repo` on this repository, against a scratch git repository whose commit adds a CUDA
construct (fails) or only moves the ones its baseline accepts (passes).

Offline: the hook is `language: python`, so pre-commit makes a virtualenv and runs
`pip install .` of this repository in it. That install would fetch torch and the rest of
torchport's dependencies from an index, which a test may not reach. So pip is told to use
no index and install torchport alone (PIP_NO_INDEX, PIP_NO_DEPS, no build isolation: the
virtualenv's seeded setuptools builds it), and the dependencies come from the
environment running the tests through PYTHONPATH (which pre-commit passes to hooks). The
hook still runs the torchport that pre-commit installed from this repository, the way a
user's pre-commit does; only where its dependencies come from differs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a virtualenv and a pip install of torchport

pytest.importorskip("pre_commit", reason="needs pre-commit (pip install -e '.[dev]')")
ROOT = Path(__file__).resolve().parents[1]
TRAIN = "import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\n"


def offline_env(tmp_path: Path) -> dict[str, str]:
    """Everything pre-commit, virtualenv, pip and git write goes under tmp_path."""
    for folder in ("home", "tmp"):
        (tmp_path / folder).mkdir()
    paths = sysconfig.get_paths()
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path / "tmp"),
        "TORCHPORT_HOME": str(tmp_path / "torchport"),
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit"),
        "VIRTUALENV_OVERRIDE_APP_DATA": str(tmp_path / "virtualenv"),
        "PYTHONPATH": os.pathsep.join(dict.fromkeys([paths["purelib"], paths["platlib"]])),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_NO_DEPS": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip reads "no-" variables inverted: 0 turns it off
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }


def run(cwd: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def try_hook(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """pre-commit's own run of the hook on what is staged in ``project``."""
    return run(project, env, sys.executable, "-m", "pre_commit", "try-repo", str(ROOT),
               "torchport-scan")  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A committed repository with one CUDA construct, accepted by its baseline."""
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: pre-commit try-repo needs one")
    env = offline_env(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.torchport]\ntarget = "tpu"\nbaseline = ".torchport-baseline.json"\n'
    )
    (project / "train.py").write_text(TRAIN)
    assert run(project, env, "git", "init", "-q").returncode == 0
    made = run(project, env, sys.executable, "-m", "torchport.cli", "scan", ".",
               "--write-baseline", ".torchport-baseline.json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    run(project, env, "git", "add", ".")
    assert run(project, env, "git", "commit", "-qm", "start").returncode == 0
    return project, env


def test_only_baseline_findings_pass_and_a_new_construct_fails(project):
    project, env = project
    # moved lines, the same construct: the baseline still accepts it
    (project / "train.py").write_text("# the model\n\n" + TRAIN.replace("model =", "model  ="))
    run(project, env, "git", "add", "train.py")
    passed = try_hook(project, env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "torchport scan" in passed.stdout and "Passed" in passed.stdout
    # its own virtualenv, with torchport installed from this repository (the hook's
    # `torchport` exists only there: a failed install fails the run with status 3)
    assert "Installing environment" in passed.stdout + passed.stderr
    run(project, env, "git", "commit", "-qm", "moved")

    (project / "sync.py").write_text("import torch\n\ntorch.cuda.synchronize()\n")
    run(project, env, "git", "add", "sync.py")
    failed = try_hook(project, env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Failed" in failed.stdout and "sync.py" in failed.stdout and "TPT001" in failed.stdout
    assert "train.py\n" not in failed.stdout  # the accepted finding is not reported
