"""``--branch``: a commit on a new branch, made without a checkout and without running git's
hooks or the repository's filters.

The commit is built with plumbing in an index of our own: HEAD's tree, each
changed file's bytes stored as a blob (converted as ``git add`` would for its
path, with the repository's filter drivers replaced by empty ones), the tree
written, a commit made by torchport on top of HEAD, and the branch created
only if it does not exist. Nothing is checked out, so no working tree of the
user's changes and no ``post-checkout`` hook; the user's checkout and index are
not touched.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..gitsafe import Git, GitError

AUTHOR = {
    "GIT_AUTHOR_NAME": "torchport",
    "GIT_AUTHOR_EMAIL": "torchport@localhost",
    "GIT_COMMITTER_NAME": "torchport",
    "GIT_COMMITTER_EMAIL": "torchport@localhost",
}
REGULAR_MODES = ("100644", "100755")


def check_branch(root: Path, branch: str) -> None:
    """Refuse a branch name git would refuse, or one that exists (GitError)."""
    git = Git(root)
    if git.run("check-ref-format", f"refs/heads/{branch}", check=False).returncode != 0:
        raise GitError(f"{branch!r} is not a valid branch name")
    if _tip(git, branch) is not None:
        raise GitError(f"branch {branch!r} already exists")


def _tip(git: Git, branch: str) -> str | None:
    found = git.run("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
    if found.returncode != 0:
        return None
    return found.stdout.decode().strip() or None


def commit_on_branch(root: Path, branch: str, files: dict[str, bytes], message: str) -> str:
    """Commit ``files`` (paths relative to ``root``) on top of HEAD as the new ``branch``.

    A branch that already holds exactly this commit's content on top of HEAD (a run
    killed after making it) is accepted as is; any other existing branch is refused.
    """
    inner = Git(root)
    head = inner.run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    if head.returncode != 0:
        raise GitError(f"{root} has no commit yet: --branch needs one to start from")
    parent = head.stdout.decode().strip()
    prefix = inner.text("rev-parse", "--show-prefix")
    git = Git(Path(inner.text("rev-parse", "--show-toplevel")))
    paths = {rel: prefix + rel for rel in files}
    with tempfile.TemporaryDirectory(prefix="torchport-index-") as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index"), "GIT_LITERAL_PATHSPECS": "1"}
        git.run("read-tree", parent, env=index)
        modes = _modes(git, list(paths.values()), index)
        entries = []
        for rel, data in files.items():
            path = paths[rel]
            blob = git.text("hash-object", "-w", "--stdin", f"--path={path}", input=data)
            entries.append(f"{modes.get(path, '100644')} {blob}\t{path}\0")
        info = "".join(entries).encode("utf-8", "surrogateescape")
        git.run("update-index", "-z", "--index-info", input=info, env=index)
        tree = git.text("write-tree", env=index)
    existing = _tip(git, branch)
    if existing is not None:
        same_tree = git.text("rev-parse", f"{existing}^{{tree}}") == tree
        if same_tree and _parents(git, existing) == [parent]:
            return existing
        raise GitError(f"branch {branch!r} already exists")
    commit = git.text("commit-tree", "--no-gpg-sign", "-p", parent, "-m", message, tree, env=AUTHOR)
    git.run("update-ref", "-m", "torchport", f"refs/heads/{branch}", commit, "0" * len(parent))
    return commit


def _modes(git: Git, paths: list[str], index: dict[str, str]) -> dict[str, str]:
    """Each path's mode in HEAD, when it is a regular file there."""
    if not paths:
        return {}
    listed = git.run("ls-files", "--stage", "-z", "--", *paths, env=index).stdout
    modes = {}
    for record in listed.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = record.partition("\t")
        mode = meta.split(" ", 1)[0]
        if path and mode in REGULAR_MODES:
            modes[path] = mode
    return modes


def _parents(git: Git, commit: str) -> list[str]:
    return git.text("rev-list", "--parents", "-n", "1", commit).split()[1:]
