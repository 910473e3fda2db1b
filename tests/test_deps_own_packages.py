"""torchport's own installed packages are not the program's: a library that probes for an
optional package torchport happens to have (bitsandbytes, for the reference run) finds it
absent in the original's run and in the port's alike, unless the program names it. Real
pip from a wheel folder the test builds, real sandboxed runs in both modes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_environment import TRAIN, build_wheel, wheels, write  # noqa: F401  (wheels: fixture)
from torchport.agents import verifier
from torchport.agents.deliver import environment_markdown
from torchport.sandbox.harness import RunSpec, run
from torchport.tools import depinstall
from torchport.tools.depresolve import resolve
from torchport.tools.depvisible import hidden_packages

needs_bnb = pytest.mark.skipif(
    importlib.util.find_spec("bitsandbytes") is None,
    reason="needs bitsandbytes in torchport's environment (the `reference` extra)",
)
# a library's availability probe, as diffusion and model libraries write theirs
PROBING_LIBRARY = """\
import importlib.metadata
import importlib.util

HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None
try:
    importlib.metadata.version("bitsandbytes")
    META = True
except importlib.metadata.PackageNotFoundError:
    META = False
if HAS_BNB:
    import bitsandbytes  # noqa: F401  (a library that found it uses it)
VALUE = 0.25
"""
PROBE = "from probelib import HAS_BNB, META, VALUE\nprint('PROBE', HAS_BNB, META)"


@needs_bnb
def test_torchports_own_packages_are_hidden_unless_the_program_names_them():
    hidden = hidden_packages([])
    assert "bitsandbytes" in hidden["distributions"] and "bitsandbytes" in hidden["modules"]
    # torch and what it needs (sympy) stay; the program's own names stay, with their needs
    assert not {"torch", "sympy", "numpy", "torchport"} & set(hidden["distributions"])
    assert "bitsandbytes" not in hidden_packages(["bitsandbytes"])["distributions"]
    assert "urllib3" not in hidden_packages(["requests"])["distributions"]
    assert "urllib3" in hidden["distributions"]


def _probe(root: Path, site: str, mode: str) -> str:
    spec = RunSpec(
        root=root,
        command=["python", "train.py"],
        mode=mode,
        steps=None,
        forwards=None,
        site_paths=(Path(site),),
        timeout_s=120,
    )
    result = run(spec)
    assert result.status == "ok", (mode, result.error, result.stderr_tail)
    return next(line for line in result.stdout_tail.splitlines() if line.startswith("PROBE"))


@pytest.mark.slow
@needs_bnb
def test_a_librarys_probe_finds_the_same_environment_in_both_runs(tmp_path, wheels):  # noqa: F811
    build_wheel(wheels, "probelib", "0.1", PROBING_LIBRARY)
    repo = write(
        tmp_path / "repo",
        {
            "requirements.txt": "probelib\n",
            "train.py": TRAIN.format(imports=PROBE, value="VALUE"),
        },
    )
    migrated = write(
        tmp_path / "migrated",
        {"train.py": TRAIN.format(imports=PROBE, value="VALUE").replace(".cuda()", ".to('tpu')")},
    )
    env = depinstall.prepare(resolve(repo), tmp_path / "cache").to_json()
    assert "bitsandbytes" in env["hidden"]
    said = "\n".join(environment_markdown(env))
    assert "absent in both runs: torchport's own packages that the program does not name" in said
    # the original and the port see no bitsandbytes: not found, no metadata, not imported
    assert _probe(repo, env["path"], "reference") == "PROBE False False"
    assert _probe(migrated, env["path"], "tpu") == "PROBE False False"
    budget = verifier.RunLimits(steps=3, forwards=3, timeout_s=120)
    v, _ = verifier.verify_tree(
        repo, migrated, ["python", "train.py"], "tpu", budget, None, environment=env
    )
    assert v.verdict == "verified", (v.reason, v.target, v.reference)
    # a program that declares it has it, as its users do (the reference run uses it)
    write(repo, {"requirements.txt": "probelib\nbitsandbytes\n"})
    declared = depinstall.prepare(resolve(repo), tmp_path / "cache").to_json()
    assert "bitsandbytes" not in declared["hidden"]
    assert _probe(repo, declared["path"], "reference") == "PROBE True True"


def test_a_run_that_needs_a_hidden_package_says_torchport_hid_it():
    """Not "the original fails here too" with nothing more: the package is torchport's, and
    declaring it makes it the program's."""
    error = {"type": "ModuleNotFoundError", "message": "No module named 'urllib3'"}
    failed = {"status": "failed", "error": error}
    v = verifier.Verification("failed", "failed", target=failed, reference=failed)
    v = verifier.name_missing_dependency(v, {"hidden": ["urllib3"], "import_names": {}})
    assert v.verdict == "not-runnable"
    assert "urllib3" in v.reason and "requirements do not name it" in v.reason
    assert "--deps FILE" in v.reason
