"""The dependency step is scoped to what the entry reaches, bounded in time, and leaves
nothing behind: real pip throughout, offline (a wheel folder the test builds, or a
loopback address that accepts connections and never answers, which makes the real pip
slow without any network)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from test_environment import build_wheel, wheels, write  # noqa: F401  (wheels is a fixture)
from torchport.agents import verifier
from torchport.agents.environment import entry_program
from torchport.tools import depinstall
from torchport.tools.depresolve import LAZY_ONLY, UNDECLARED, Resolution, Wanted, resolve

PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy")
# A repository laid out as yolov5 is: a training script, its own packages, and code the
# training never runs (an exporter) that imports other frameworks.
REPO = {
    "train.py": "import os\nfrom utils.general import helper\nfrom models import common\n"
    "import models.yolo\n\n\ndef main():\n    import maindep\n    from utils import late\n",
    "utils/__init__.py": "",
    "utils/general.py": "from .plots import plot\nfrom . import metrics\nhelper = None\n",
    "utils/plots.py": "import reachdep\nplot = None\n",
    "utils/metrics.py": "from ..shared import x\n",  # beyond the top package: not followed
    "shared.py": "import shareddep\nx = None\n",
    "models/__init__.py": "",
    "models/common.py": "import commondep.sub\n",
    "utils/late.py": "import latedep\n",
    # a library function's imports are lazy: neither lazydep nor the exporter is read
    "models/yolo.py": "import yolodep\n\n\ndef export():\n    import lazydep\n"
    "    from export import formats\n",
    "models/tf.py": "import tensorflow\n",
    "export.py": "import absentdep\nimport models.tf\n",
    "pkg/__init__.py": "import pkgdep\n",
    "pkg/__main__.py": "from .cli import run\n\n\ndef go():\n    import godep\n",
    "pkg/cli.py": "import clidep\nrun = None\n",
    "run.sh": "python train.py\n",
}


def _needed(repo: Path, program: list[str] | None) -> set[str]:
    """The imports the scope reads as requirements: made-up names, so none is installed
    (declared by no file, known to no table: ``UNDECLARED``), but each is listed."""
    resolution = resolve(repo, program)
    undeclared = {w.name for w in resolution.skipped if w.reason == UNDECLARED}
    return {w.name for w in resolution.needed} | undeclared


def test_only_the_imports_of_modules_the_entry_reaches_are_requirements(tmp_path: Path):
    repo = write(tmp_path / "repo", REPO)
    # packages, submodules (from models import common) and relative imports are followed;
    # the program's own imports all count (its main() runs), an imported module's only
    # those its import runs (models/yolo.py's export() is a lazy, optional need);
    # the exporter (imported in that function) and what only it imports are not read
    scoped = {"reachdep", "commondep", "yolodep", "maindep", "latedep"}
    assert _needed(repo, ["train.py", "--epochs", "1"]) == scoped
    # the lazy import is listed, not installed: a run that reaches it is told what it lacks
    lazy = resolve(repo, ["train.py"])
    assert {w.name: w.reason for w in lazy.skipped if w.reason != UNDECLARED} == {
        "lazydep": LAZY_ONLY
    }
    env = {"skipped": [asdict(w) for w in lazy.skipped], "import_names": lazy.import_names}
    error = {"type": "ModuleNotFoundError", "message": "No module named 'lazydep'"}
    failed = verifier.Verification("failed", "failed", target={"status": "failed", "error": error})
    named = verifier.name_missing_dependency(failed, env)
    assert named.verdict == "not-runnable" and "needs lazydep" in named.reason
    # skipped on purpose, never tried: torchport's choice, not the original's failure
    assert named.reason.startswith("torchport did not install lazydep: "), named.reason
    # python -m pkg runs pkg/__init__.py, then pkg/__main__.py as the program
    assert _needed(repo, ["-m", "pkg"]) == {"pkgdep", "clidep", "godep"}
    everything = scoped | {"lazydep", "pkgdep", "clidep", "godep"}
    everything |= {"tensorflow", "absentdep", "shareddep"}
    # no entry, or one that is no Python file of the repository: every file, as before
    assert everything == _needed(repo, None) == _needed(repo, ["run.sh"])
    assert _needed(repo, ["missing.py"]) == _needed(repo, None)


def test_the_entrys_program_is_found_under_python_and_torchrun():
    assert entry_program(["python", "train.py", "--img", "64"]) == ["train.py", "--img", "64"]
    assert entry_program(["torchrun", "--nproc_per_node=2", "train.py", "--x"]) == [
        "train.py",
        "--x",
    ]
    assert entry_program(["python", "-m", "pkg"]) == ["-m", "pkg"]
    assert entry_program(["bash", "run.sh"]) is None and entry_program(None) is None


@pytest.mark.slow
def test_pip_is_not_asked_for_an_unreachable_modules_import(tmp_path: Path, wheels):  # noqa: F811
    """Only einops has a wheel: the exporter's import (a distribution torchport knows, so
    one it would install) would be unavailable if asked for."""
    build_wheel(wheels, "einops", "0.1", "")
    repo = write(
        tmp_path / "repo",
        {"train.py": "import einops\n", "export.py": "import tensorboardX\n"},
    )
    overlay = depinstall.prepare(resolve(repo, ["train.py"]), tmp_path / "cache")
    assert overlay.installed == ["einops==0.1"] and overlay.unavailable == {}
    unscoped = depinstall.prepare(resolve(repo), tmp_path / "cache")
    assert "tensorboardx" in unscoped.unavailable  # the test can fail


@pytest.fixture
def silent_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A loopback address that takes connections and never answers: pip waits on it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)  # never accepted: the kernel completes connections, nobody replies
        url = f"http://127.0.0.1:{server.getsockname()[1]}/"
        for name in PROXIES:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("PIP_FIND_LINKS", url)
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        yield url


def _tinydep() -> Resolution:
    return Resolution(needed=[Wanted("tinydep", "tinydep", "requirements.txt:1")])


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if entry.isdigit() and int(ppid) == pid and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def _pips(pid: int) -> list[int]:
    def cmdline(child: int) -> str:
        try:
            return Path(f"/proc/{child}/cmdline").read_text()
        except OSError:
            return ""

    return [child for child in _children(pid) if "\0pip\0" in cmdline(child)]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in ("Z", "X")


def _wait_until(condition, within_s: float) -> bool:
    """Poll a condition of the system (no fixed sleep decides the outcome)."""
    give_up = time.monotonic() + within_s
    while time.monotonic() < give_up:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_pip_past_the_time_limit_is_stopped_and_said(tmp_path: Path, silent_index: str):
    said: list[str] = []
    started = time.monotonic()
    overlay = depinstall.prepare(_tinydep(), tmp_path / "cache", 3.0, said.append)
    assert time.monotonic() - started < 12  # pip alone would wait 15 s per try, five tries
    why = overlay.unavailable["tinydep"]
    assert "3 s limit" in why and "pip was stopped while resolving tinydep" in why, why
    (line,) = [s for s in said if "time limit" in s]
    # after 3 s of pip, or 4 on a loaded machine: the time is measured, not promised
    assert re.search(r"time limit \(3 s\) reached after [34] s", line), line
    assert line.endswith("the runs go on without tinydep"), line
    assert _pips(os.getpid()) == []  # pip and its process group are gone (other children
    # of this process, a server another test module started, are none of this test's)


KILLED_PARENT = """
import sys
from pathlib import Path
from torchport.tools import depinstall
from torchport.tools.depresolve import Resolution, Wanted

def say(line):
    print(line, flush=True)

wanted = Resolution(needed=[Wanted("tinydep", "tinydep", "requirements.txt:1")])
depinstall.prepare(wanted, Path(sys.argv[1]), 300.0, say)
"""


def test_a_killed_torchport_leaves_no_pip_and_its_staging_is_swept(
    tmp_path: Path, silent_index: str
):
    cache = tmp_path / "cache"
    parent = subprocess.Popen(
        [sys.executable, "-c", KILLED_PARENT, str(cache)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert "dependencies: resolving tinydep" in parent.stdout.readline()
        # a child that is pip (any other, short-lived, child is not the one to follow)
        assert _wait_until(lambda: _pips(parent.pid), 30), "pip never started"
        (pip,) = _pips(parent.pid)
        parent.send_signal(signal.SIGKILL)  # as a CI job's or the benchmark's timeout does
        parent.wait(timeout=30)
        assert _wait_until(lambda: not _alive(pip), 10), "pip outlived its torchport"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    (staging,) = (cache / "envs").glob(f"*.{parent.pid}.tmp")
    mine = cache / "envs" / f"{'0' * 24}.{os.getpid()}.tmp"  # a live install's: kept
    other = cache / "envs" / f"notours.{parent.pid}.tmp"  # not named as torchport names
    for folder in (mine, other):
        folder.mkdir()
    assert depinstall.sweep_stale_staging(cache / "envs") == [staging]
    assert not staging.exists() and mine.is_dir() and other.is_dir()


def test_a_subpackage_named_like_an_installed_module_does_not_hide_that_module(tmp_path: Path):
    """Liger-Kernel has ``liger_kernel/triton/``: its ``import triton`` read as its own
    module, triton was never named, and the reference run, hiding torchport's packages the
    program does not name, could not import it. A module the program can import by that
    name (beside its script, at its root or src/) still is its own, and so is a nested
    name nothing outside the repository has."""
    repo = write(
        tmp_path / "repo",
        {
            "__init__.py": "",
            "train.py": "import lltm\nfrom lib import ops\n",
            "lltm.py": "x = None\n",
            "lib/__init__.py": "",
            "lib/ops.py": "import numpy\nimport helpers\n",
            "lib/numpy/__init__.py": "",  # lib.numpy, never numpy
            "lib/helpers/__init__.py": "",
        },
    )
    resolution = resolve(repo, ["train.py"])
    assert resolution.import_names == {"numpy": "numpy"}
    assert _needed(repo, ["train.py"]) == set()  # numpy is installed; helpers is its own


def test_a_module_named_main_in_the_repository_is_not_looked_up(monkeypatch, tmp_path):
    """pkg/__main__.py makes ``__main__`` one of the repository's names; looking it up
    asked for the spec of whatever started torchport (None under pytest's workers)."""
    import sys

    from torchport.tools import depresolve

    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None)
    assert depresolve._nested_only({"__main__", "a.b", "json"}, [tmp_path]) == {"json"}
