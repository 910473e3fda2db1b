"""git without the repository's code (issue #12, item 4): a repository whose hooks,
``core.hooksPath``, ``core.fsmonitor``, filter driver and ``gpg.program`` would each leave a
marker file; ``--in-place``, ``--branch`` and a batch clone of it must leave none, and still
produce the right result. Real git, real repositories; a control run of plain git proves
each marker really is written when git is not hardened.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from torchport.agents.batch.clone import checkout
from torchport.agents.batch.sources import Source
from torchport.tools.gitsafe import GitError
from torchport.tools.migrate import MigrateOptions, migrate
from torchport.tools.output.branch import commit_on_branch

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

PROGRAM = "import torch\n\nx = torch.zeros(3).cuda()\nprint(x.sum().item())\n"
HOOKS = (
    "post-checkout",
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "reference-transaction",
    "post-index-change",
    "pre-auto-gc",
    "post-rewrite",
)
# Plain git for setting up and reading back: nothing of the repository's runs.
QUIET = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "user.name=t"]
QUIET += ["-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def _git(repo: Path, *args: str, hardened: bool = True, env=None) -> str:
    command = ["git", *(QUIET if hardened else []), "-C", str(repo), *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0 or not hardened, done.stderr
    return done.stdout


def _script(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def _arm(repo: Path, markers: Path) -> None:
    """Make every way git can run the repository's programs leave a marker."""
    git_dir = repo / ".git"
    for hook in HOOKS:
        _script(git_dir / "hooks" / hook, f"touch {markers}/hook-{hook}")
        _script(git_dir / "evil-hooks" / hook, f"touch {markers}/hookspath-{hook}")
    settings = {
        "core.hooksPath": str(git_dir / "evil-hooks"),
        "core.fsmonitor": _script(git_dir / "fsmonitor", f"touch {markers}/fsmonitor"),
        "filter.evil.clean": _script(git_dir / "clean", f"touch {markers}/clean; cat"),
        "filter.evil.smudge": _script(git_dir / "smudge", f"touch {markers}/smudge; cat"),
        "filter.evil.required": "true",
        "commit.gpgsign": "true",
        "gpg.program": _script(git_dir / "gpg", f"touch {markers}/gpg; exit 1"),
    }
    for key, value in settings.items():
        _git(repo, "config", key, value)


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """(repository, markers folder): committed cleanly, then armed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(PROGRAM)
    (repo / "notes.txt").write_text("untouched\n")
    (repo / ".gitattributes").write_text("*.py filter=evil\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    markers = tmp_path / "markers"
    markers.mkdir()
    _arm(repo, markers)
    return repo, markers


def test_control_plain_git_in_the_repository_runs_its_code(hostile, tmp_path):
    """Without hardening, the armed repository really runs each of its programs."""
    repo, markers = hostile
    control = tmp_path / "control"
    shutil.copytree(repo, control, symlinks=True)
    _arm(control, markers)  # its own paths
    (control / "train.py").write_text(PROGRAM + "# changed\n")
    _git(control, "status", hardened=False)
    _git(control, "add", "train.py", hardened=False)
    _git(control, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-m", "x", hardened=False)
    _git(control, "checkout", "-q", "-b", "other", hardened=False)
    found = {p.name for p in markers.iterdir()}
    expected = {"fsmonitor", "clean", "gpg", "hookspath-pre-commit", "hookspath-post-checkout"}
    assert expected <= found, found


def _nothing_ran(markers: Path) -> None:
    assert sorted(p.name for p in markers.iterdir()) == []


def test_in_place_runs_none_of_the_repository_code(hostile):
    repo, markers = hostile
    result = migrate(repo, MigrateOptions(target="tpu", in_place=True))
    _nothing_ran(markers)
    assert 'x = torch.zeros(3).to("tpu")' in (repo / "train.py").read_text()
    assert (result.backup / "train.py").read_text() == PROGRAM
    assert (repo / "notes.txt").read_text() == "untouched\n"


def test_branch_runs_none_of_the_repository_code_and_commits_the_migration(hostile):
    repo, markers = hostile
    index = (repo / ".git" / "index").read_bytes()
    head = _git(repo, "rev-parse", "HEAD").strip()
    result = migrate(repo, MigrateOptions(target="tpu", branch="port-tpu"))
    _nothing_ran(markers)
    (change,) = result.changes
    assert _git(repo, "cat-file", "blob", "port-tpu:train.py") == change.after
    assert 'x = torch.zeros(3).to("tpu")' in change.after
    assert _git(repo, "rev-parse", "port-tpu^").strip() == head
    assert _git(repo, "log", "-1", "--format=%an <%ae>|%s", "port-tpu").strip() == (
        "torchport <torchport@localhost>|torchport: migrate to tpu (1 edits)"
    )
    assert _git(repo, "rev-parse", "HEAD").strip() == head  # the checkout is as it was
    assert (repo / ".git" / "index").read_bytes() == index
    assert (repo / "train.py").read_text() == PROGRAM
    assert _git(repo, "status", "--porcelain") == ""


def test_a_batch_clone_runs_no_hooks_even_those_the_user_config_names(
    hostile, tmp_path, monkeypatch
):
    """A clone gets no config from its source; what could run is what the configuration in
    the home folder names (hooks, templates): torchport's git runs none of it either."""
    repo, markers = hostile
    home = tmp_path / "home"
    template = home / "template"
    for hook in HOOKS:
        _script(template / "hooks" / hook, f"touch {markers}/template-{hook}")
    (home / ".gitconfig").write_text(
        f"[init]\n\ttemplateDir = {template}\n[core]\n\thooksPath = {repo}/.git/evil-hooks\n"
    )
    monkeypatch.setenv("HOME", str(home))
    control = tmp_path / "control"
    subprocess.run(["git", "clone", "-q", str(repo), str(control)], check=True)
    assert "hookspath-post-checkout" in {p.name for p in markers.iterdir()}
    for marker in markers.iterdir():
        marker.unlink()

    dest, commit = checkout(Source("repo", str(repo), ref="main", git=True), tmp_path / "b")
    _nothing_ran(markers)
    assert commit == _git(repo, "rev-parse", "HEAD").strip()
    assert (dest / "train.py").read_text() == PROGRAM


def _old_way(repo: Path, branch: str, changes, message: str) -> None:
    """What --branch did before: a worktree, the files written, ``git add -A``, a commit."""
    worktree = repo.parent / f"wt-{branch}"
    _git(repo, "worktree", "add", "-q", "-b", branch, str(worktree))
    prefix = _git(repo, "rev-parse", "--show-prefix").strip()
    for change in changes:
        path = worktree / prefix / change.path
        mode = path.stat().st_mode if path.exists() else None
        path.write_bytes(change.after.encode())
        if mode is not None:
            path.chmod(mode)
    _git(worktree, "add", "-A")
    who = ["-c", "user.name=torchport", "-c", "user.email=torchport@localhost"]
    _git(worktree, *who, "commit", "-q", "--allow-empty", "-m", message)
    _git(repo, "worktree", "remove", "--force", str(worktree))


def test_the_branch_holds_what_the_old_worktree_commit_held(tmp_path):
    """Line endings normalised by .gitattributes, an executable file, a subfolder."""
    top = tmp_path / "top"
    sub = top / "project"
    sub.mkdir(parents=True)
    (top / ".gitattributes").write_text("*.py text eol=crlf\n")
    (sub / "train.py").write_text(PROGRAM)
    (sub / "run.py").write_text(PROGRAM.replace("3", "4"))
    (sub / "run.py").chmod(0o755)
    _git(top, "init", "-q", "-b", "main")
    _git(top, "add", "-A")
    _git(top, "commit", "-q", "-m", "init")
    for path in (sub / "train.py", sub / "run.py"):
        path.unlink()
    _git(top, "checkout", "-q", "--", ".")  # checked out with CRLF, as a user would have it
    assert b"\r\n" in (sub / "train.py").read_bytes()
    result = migrate(sub, MigrateOptions(target="tpu", branch="new-way"))
    assert len(result.changes) == 2
    message = f"torchport: migrate to tpu ({len(result.edits)} edits)"
    _old_way(sub, "old-way", result.changes, message)
    assert _git(top, "rev-parse", "new-way^{tree}") == _git(top, "rev-parse", "old-way^{tree}")
    assert "\r" not in _git(top, "cat-file", "blob", "new-way:project/train.py")
    assert _git(top, "ls-tree", "new-way", "project/run.py").startswith("100755 ")


def test_a_branch_written_again_after_a_kill_keeps_its_commit_and_refuses_another(tmp_path):
    """--resume re-runs the report node: the branch it made before the kill is its own."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(PROGRAM)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    files = {"train.py": b"migrated\n"}
    first = commit_on_branch(repo, "port", files, "torchport: migrate")
    assert commit_on_branch(repo, "port", files, "torchport: migrate") == first
    with pytest.raises(GitError, match="branch 'port' already exists"):
        commit_on_branch(repo, "port", {"train.py": b"something else\n"}, "torchport: migrate")
    assert _git(repo, "rev-parse", "port").strip() == first
