"""The program's environment: what a repository needs is resolved, installed from a
wheel folder the test builds (pip, --no-index: no network), cached, and put on the
sandboxed programs' sys.path with the repository's root and src/ layouts."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from torchport.agents import verifier
from torchport.agents.deliver import environment_markdown
from torchport.agents.environment import InterpreterError, deps_flag, user_interpreter
from torchport.sandbox.harness import RunSpec, run
from torchport.tools import depinstall
from torchport.tools.depresolve import CUDA_ONLY, resolve

TRAIN = """\
import torch
{imports}

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4).cuda()
for _ in range(3):
    loss = ((model(x) - {value}) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def build_wheel(folder: Path, name: str, version: str, code: str, requires: str = "") -> Path:
    """A pure-Python wheel written by hand (what ``pip wheel`` would make of a tiny package)."""
    dist = f"{name}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires.split(",") if r
    )
    files = {
        f"{name}/__init__.py": code,
        f"{dist}.dist-info/METADATA": metadata,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for rel, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{rel},sha256={digest.decode()},{len(data)}")
            wheel.writestr(rel, data)
        wheel.writestr(
            f"{dist}.dist-info/RECORD", "\n".join([*record, f"{dist}.dist-info/RECORD,,"])
        )
    return path


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A wheel folder pip is pointed at as a user would (PIP_FIND_LINKS, no index)."""
    folder = tmp_path / "wheels"
    # tinydep needs torch and numpy: pip must take torchport's own, never install them
    build_wheel(folder, "tinydep", "0.1", "VALUE = 0.5\n", requires="torch>=1,numpy")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    return folder


def test_resolution_skips_torch_cuda_only_and_local_requirements(tmp_path: Path):
    repo = write(
        tmp_path / "repo",
        {
            "requirements.txt": "torch==2.1.0+cu121\nnumpy>=1\nflash-attn>=2\n"
            "nvidia-cublas-cu12==12.1\nnvidia-cublas==13.1\ncuda-toolkit==13.0\ntinydep==0.1\n"
            "-e .\ngit+https://example.invalid/x.git\n",
            "train.py": "import os\nimport cv2\nimport mypkg.model\nimport apex\n"
            "try:\n    import wandb\nexcept ImportError:\n    wandb = None\n",
            "mypkg/__init__.py": "",
            "mypkg/model.py": "",
        },
    )
    r = resolve(repo)
    assert [w.requirement for w in r.needed] == ["tinydep==0.1", "opencv-python"]
    assert [w.requirement for w in r.present] == ["numpy>=1"]
    reasons = {w.requirement: w.reason for w in r.skipped}
    assert "torchport's own" in reasons["torch==2.1.0+cu121"]
    cuda_only = ("flash-attn>=2", "nvidia-cublas-cu12==12.1", "nvidia-cublas==13.1", "apex")
    for cuda in (*cuda_only, "cuda-toolkit==13.0"):
        assert "CUDA-only" in reasons[cuda], cuda
    assert "editable" in reasons["-e ."]
    assert "VCS" in reasons["git+https://example.invalid/x.git"]
    assert r.import_names["cv2"] == "opencv-python"
    assert "wandb" not in r.import_names  # optional: imported under try


def test_overlay_installed_from_a_wheel_folder_then_reused(tmp_path, wheels, monkeypatch):
    repo = write(tmp_path / "repo", {"requirements.txt": "torch\ntinydep\n"})
    progress: list[str] = []
    first = depinstall.prepare(resolve(repo), tmp_path / "cache", say=progress.append)
    assert first.installed == ["tinydep==0.1"] and not first.unavailable and not first.cached
    site = Path(first.path)
    assert (site / "tinydep" / "__init__.py").is_file()
    assert not (site / "torch").exists() and not (site / "numpy").exists()
    assert "dependencies: installing 1/1: tinydep==0.1" in progress
    # the second run installs nothing: pip cannot even start, and the wheels are gone
    monkeypatch.setattr(depinstall, "PIP", ["/nonexistent/pip"])
    for wheel in wheels.iterdir():
        wheel.unlink()
    second = depinstall.prepare(resolve(repo), tmp_path / "cache")
    assert second.cached and second.path == first.path and second.installed == first.installed


def test_resolution_keeps_torchports_torch_and_picks_a_release_that_fits_it(tmp_path, wheels):
    """PyPI's newest torchvision wants a newer torch: pip must pick the release that works
    with the torch installed, not the newest with a torch the overlay then leaves out."""
    build_wheel(wheels, "torch", "2.14.0", "")  # newer than ours, under any cap
    build_wheel(wheels, "visionlib", "1.0", "OLD = True\n", requires="torch>=1")
    build_wheel(wheels, "visionlib", "2.0", "OLD = False\n", requires="torch>=2.14")
    repo = write(tmp_path / "repo", {"requirements.txt": "visionlib\n"})
    overlay = depinstall.prepare(resolve(repo), tmp_path / "cache")
    assert overlay.installed == ["visionlib==1.0"], (overlay.installed, overlay.skipped)
    assert not (Path(overlay.path) / "torch").exists()


@pytest.mark.slow
def test_a_package_without_a_wheel_is_named_with_how_to_provide_it(tmp_path, wheels):
    repo = write(tmp_path / "repo", {"requirements.txt": "tinydep\nno-such-package-here\n"})
    overlay = depinstall.prepare(resolve(repo), tmp_path / "cache")
    assert overlay.installed == ["tinydep==0.1"]
    assert "no-such-package-here" in overlay.unavailable
    # not complete: a later run (with the wheel provided) tries again
    assert not (Path(overlay.path).parent / depinstall.COMPLETE).exists()
    failed = {
        "status": "failed",
        "error": {"type": "ModuleNotFoundError", "message": "No module named 'no_such'"},
    }
    env = {**overlay.to_json(), "import_names": {"no_such": "no-such-package-here"}}
    v = verifier.Verification("failed", "failed", target=failed, reference=failed)
    v = verifier.name_missing_dependency(v, env)
    assert v.verdict == "not-runnable"
    assert "no-such-package-here" in v.reason and "PIP_FIND_LINKS" in v.reason
    # a CUDA-only package the port still imports is the port's failure, not the tool's
    apex = {**failed, "error": {"type": "ModuleNotFoundError", "message": "No module named 'apex'"}}
    cuda = {"skipped": [{"name": "apex", "reason": CUDA_ONLY}]}
    port = verifier.Verification("failed", "failed", target=apex)
    assert verifier.name_missing_dependency(port, cuda).verdict == "failed"
    markdown = "\n".join(environment_markdown(env))
    assert "installed `tinydep==0.1`" in markdown and "could not install" in markdown


@pytest.mark.slow
def test_a_package_published_as_sources_only_is_torchports_gap_not_the_originals(tmp_path, wheels):
    (wheels / "sdistonly-0.3.tar.gz").write_bytes(b"")  # only its name is read, never built
    repo = write(tmp_path / "repo", {"requirements.txt": "tinydep\nsdistonly\n"})
    overlay = depinstall.prepare(resolve(repo), tmp_path / "cache")
    why = overlay.unavailable["sdistonly"]
    assert "source distributions only (newest 0.3)" in why and "wheels only" in why, why
    failed = {
        "status": "failed",
        "error": {"type": "ModuleNotFoundError", "message": "No module named 'sdistonly'"},
    }
    env = {**overlay.to_json(), "import_names": {"sdistonly": "sdistonly"}}
    v = verifier.Verification("failed", "failed", target=failed, reference=failed)
    v = verifier.name_missing_dependency(v, env)
    assert v.verdict == "not-runnable"
    assert "the original fails" not in v.reason  # it runs where the package is installed
    assert v.reason.startswith("torchport could not install sdistonly: the program needs"), v.reason
    assert "PIP_FIND_LINKS" in v.next_step and "--python" in v.next_step
    assert v.attribution["kind"] == "own-environment"


@pytest.mark.slow
def test_root_package_layout_and_an_installed_dependency_verify(tmp_path, wheels):
    """scripts/train.py imports mypkg (at the root) and tinydep (from the overlay)."""
    repo = write(
        tmp_path / "repo",
        {
            "requirements.txt": "tinydep\n",
            "mypkg/__init__.py": "",
            "mypkg/target.py": "from tinydep import VALUE\n",
            "scripts/train.py": TRAIN.format(
                imports="from mypkg.target import VALUE", value="VALUE"
            ),
        },
    )
    migrated = write(
        tmp_path / "migrated",
        {
            "mypkg/__init__.py": "",
            "mypkg/target.py": "from tinydep import VALUE\n",
            "scripts/train.py": TRAIN.format(
                imports="from mypkg.target import VALUE", value="VALUE"
            ).replace(".cuda()", ".to('tpu')"),
        },
    )
    env = depinstall.prepare(resolve(repo), tmp_path / "cache").to_json()
    budget = verifier.RunLimits(steps=3, forwards=3, timeout_s=120)
    v, _ = verifier.verify_tree(
        repo, migrated, ["python", "scripts/train.py"], "tpu", budget, None, environment=env
    )
    assert v.verdict == "verified", (v.reason, v.target, v.reference)
    assert v.parity.steps == 3


@pytest.mark.slow
def test_src_layout_is_importable_with_its_distribution_metadata(tmp_path, wheels):
    repo = write(
        tmp_path / "repo",
        {
            "pyproject.toml": '[project]\nname = "my-pkg"\nversion = "0.3.0"\n',
            "src/my_pkg/__init__.py": "",
            "src/my_pkg/cli.py": "import importlib.metadata, subprocess, sys\n"
            "assert importlib.metadata.version('my-pkg') == '0.3.0'\n"
            # a child Python sees the same layout (PYTHONPATH), not only this process
            "subprocess.run([sys.executable, '-c', 'import my_pkg.model'], check=True)\n",
            "src/my_pkg/model.py": "GPT = None\n",
            # the overlay comes after torchport's site-packages: torch stays torchport's
            "train.py": "import sys, my_pkg.cli\n"
            "where = [i for i, p in enumerate(sys.path)"
            " if p.endswith('site-packages') and 'envs' not in p]\n"
            "assert max(where) < [i for i, p in enumerate(sys.path) if 'envs' in p][0]\n"
            "print('LAYOUT-OK')\n",
        },
    )
    env = depinstall.prepare(resolve(repo), tmp_path / "cache")
    assert env.path and not env.installed
    spec = RunSpec(
        root=repo,
        command=["python", "train.py"],
        steps=None,
        forwards=None,
        site_paths=(Path(env.path),),
        timeout_s=60,
    )
    result = run(spec)
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "LAYOUT-OK" in result.stdout_tail
    # without the overlay the repository's own metadata is missing: the test can fail
    bare = run(
        RunSpec(root=repo, command=["python", "train.py"], steps=None, forwards=None, timeout_s=60)
    )
    assert bare.status == "failed"


def test_deps_option_is_checked_on_the_command_line(tmp_path):
    assert deps_flag("auto") == "auto" and deps_flag("none") == "none"
    with pytest.raises(ValueError, match="requirements file"):
        deps_flag(str(tmp_path / "missing.txt"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchport.cli",
            "migrate",
            str(tmp_path),
            "-t",
            "tpu",
            "--deps",
            str(tmp_path / "missing.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--deps" in done.stderr


def _venv_with_torch(tmp_path: Path, torch_version: str) -> Path:
    """A real interpreter (a venv of this Python) whose torch is another release."""
    venv = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    info = site / f"torch-{torch_version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n"
    )
    return venv / "bin" / "python"


def test_python_option_adds_a_compatible_interpreters_packages(tmp_path: Path):
    import torch

    python = _venv_with_torch(tmp_path, torch.__version__.split("+")[0])
    found = user_interpreter(str(python))
    assert found["torch"] == torch.__version__.split("+")[0]
    assert any(p.startswith(str(tmp_path / "user-venv")) for p in found["site_paths"])


def test_python_option_refuses_another_torch_and_says_why(tmp_path: Path):
    python = _venv_with_torch(tmp_path, "1.13.1")
    with pytest.raises(InterpreterError, match=r"torch 1\.13\.1"):
        user_interpreter(str(python))
    with pytest.raises(InterpreterError, match="not a Python interpreter"):
        user_interpreter(str(tmp_path / "no-python"))
    for door in (["migrate", str(tmp_path)], ["batch", str(tmp_path), "--out", "x"]):
        done = subprocess.run(
            [sys.executable, "-m", "torchport.cli", *door, "-t", "tpu", "--python", python],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and "torch 1.13.1" in done.stderr, door
        assert done.stderr.strip().count("\n") == 0


@pytest.mark.slow
def test_migrate_installs_reports_and_verifies(tmp_path, wheels, capsys):
    """``torchport migrate``: the wheel installed, torch and a CUDA-only package skipped,
    all said in the output and in verification.md; the verdict is verified."""
    from torchport.cli.main import main

    repo = write(
        tmp_path / "repo",
        {
            "requirements.txt": "torch==2.1.0+cu121\nflash-attn>=2\ntinydep\n",
            "train.py": TRAIN.format(imports="from tinydep import VALUE", value="VALUE"),
        },
    )
    out = tmp_path / "out"
    args = ["-t", "tpu", "--llm", "none", "--steps", "2", "--out", str(out), "--exit-zero"]
    code = main(["migrate", str(repo), *args])  # the CUDA pins are left for a human
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "verdict: verified" in printed.out
    assert "dependencies: installed tinydep==0.1" in printed.out
    assert "dependencies: installing 1/1: tinydep==0.1" in printed.err
    report = (out / "torchport-report" / "verification.md").read_text()
    assert "installed `tinydep==0.1`" in report
    assert "skipped `torch==2.1.0+cu121`" in report and "skipped `flash-attn>=2`" in report


def test_an_error_raised_inside_an_overlay_package_is_placed_in_the_users_code(
    tmp_path, monkeypatch
):
    """The failing frame a verdict names is the program's line, not the installed library's
    (the overlay is not called site-packages)."""
    from torchport.sandbox.pythonpath import SITE_VARIABLE
    from torchport.sandbox.session import user_frame

    overlay = tmp_path / "overlay"
    write(overlay, {"library.py": "def fail():\n    raise RuntimeError('inside')\n"})
    program = "import library\n\n\ndef main():\n    library.fail()\n"
    user = write(tmp_path / "repo", {"overlay_user_train.py": program})
    monkeypatch.setenv(SITE_VARIABLE, str(overlay))
    monkeypatch.syspath_prepend(str(overlay))
    monkeypatch.syspath_prepend(str(user))
    import overlay_user_train  # the repository's module

    try:
        overlay_user_train.main()
    except RuntimeError as exc:
        frame = user_frame(exc.__traceback__)
    assert (
        frame is not None and frame["file"].endswith("overlay_user_train.py") and frame["line"] == 5
    )
