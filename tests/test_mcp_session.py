"""What `torchport mcp` does in-process, without the MCP SDK: every path a call names is
confined to the repository, and ``apply`` writes only when confirmed, from a clean git
tree. These need only torchport, so they run whether or not the mcp extra is installed
(tests/test_mcp.py, which drives the real server through the SDK's client, skips without it).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from torchport.agents.chat import changes as ch
from torchport.agents.mcp.confine import OutsideRepository, confined
from torchport.agents.mcp.session import Proposal, Refused, Session


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


# --- the confinement of paths, in-process --------------------------------------------------


def test_paths_are_confined_to_the_repository(tmp_path: Path) -> None:
    repo = (tmp_path / "repo").resolve()
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "elsewhere").mkdir()
    (repo / "out").symlink_to(tmp_path / "elsewhere")
    (repo / "inside").symlink_to(repo / "pkg")
    assert confined(repo, ".") == (repo, ".")
    assert confined(repo, "pkg/a.py") == (repo / "pkg" / "a.py", "pkg/a.py")
    assert confined(repo, str(repo / "pkg")) == (repo / "pkg", "pkg")  # absolute, inside
    assert confined(repo, "inside/a.py") == (repo / "pkg" / "a.py", "pkg/a.py")
    refusals = {
        "../elsewhere": "'..' is refused",
        "pkg/../../elsewhere": "'..' is refused",
        str(tmp_path / "elsewhere"): "leads outside the repository",
        "/etc/passwd": "leads outside the repository",
        "out": "outside the repository through a symlink",
        "out/new.py": "outside the repository through a symlink",
        "": "not a path",
    }
    for given, why in refusals.items():
        with pytest.raises(OutsideRepository, match=why):
            confined(repo, given)


# --- apply's checks, in-process on a tiny repository ---------------------------------------


def tiny_session(tmp_path: Path) -> tuple[Session, Path]:
    repo = tmp_path / "tiny"
    repo.mkdir()
    (repo / "train.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tiny")
    session = Session(repo.resolve(), {})
    base = {"train.py": (repo / "train.py").read_text()}
    proposal = {"train.py": "import torch\nx = torch.zeros(1).to('xla')\n"}
    changes = ch.split(base, proposal, [])
    session.proposals["p-1"] = Proposal("p-1", "xla", base, proposal, changes, {})
    return session, repo


def test_apply_writes_only_when_confirmed_from_a_clean_tree(tmp_path: Path) -> None:
    session, repo = tiny_session(tmp_path)
    before = (repo / "train.py").read_text()
    with pytest.raises(Refused, match=r"not applied: this would write 1 files \(train.py\)"):
        session.apply("p-1", confirm=False)
    (repo / "train.py").write_text(before + "# edited\n")  # a dirty tree
    with pytest.raises(Refused, match="uncommitted changes; commit or stash"):
        session.apply("p-1", confirm=True)
    # forced past git, the file still changed since the proposal: not overwritten
    with pytest.raises(Refused, match=r"changed on disk since migrate: train\.py"):
        session.apply("p-1", confirm=True, force=True)
    (repo / "train.py").write_text(before)
    with pytest.raises(OutsideRepository, match="leads outside the repository"):
        session.apply("p-1", confirm=True, files=[str(tmp_path / "train.py")])
    done = session.apply("p-1", confirm=True)
    assert done["files"] == ["train.py"] and done["verification"] == "not verified"
    assert (repo / "train.py").read_text() == "import torch\nx = torch.zeros(1).to('xla')\n"
    assert (Path(done["backup"]) / "train.py").read_text() == before
    with pytest.raises(Refused, match="applied already"):
        session.apply("p-1", confirm=True)


def test_apply_refuses_a_folder_outside_git(tmp_path: Path) -> None:
    session, repo = tiny_session(tmp_path)
    shutil.rmtree(repo / ".git")
    with pytest.raises(Refused, match="not a git repository"):
        session.apply("p-1", confirm=True)
    assert "cuda()" in (repo / "train.py").read_text()
