"""The original to verify a working tree against: its last commit.

A coding agent may edit the repository itself (by hand, or by applying a proposal) and
then ask whether the port holds. The port is then the working tree as it is, and the
original is the tree as committed: the working tree with every modified tracked file put
back as HEAD has it (files the port added are in both; the runs see the same data).
Without git, or with nothing modified, the tree is compared with itself: the original's
run on the CUDA reference shim, the same files on the emulated device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torchport.sandbox.safepath import read_inside
from torchport.tools.gitsafe import Git, GitError

from ..workspace import materialize


@dataclass
class Original:
    """Where the original is, the port as an overlay of it, and what was compared."""

    source: Path
    overlay: dict[str, str] = field(default_factory=dict)
    compared: str = ""


def modified_since_head(repo: Path) -> dict[str, str] | None:
    """HEAD's text of each tracked file under ``repo`` that the working tree modified (paths
    relative to ``repo``, which may be a folder of a larger checkout); None without a commit."""
    git = Git(repo)
    try:
        if git.run("rev-parse", "--verify", "--quiet", "HEAD", check=False).returncode != 0:
            return None
        listed = git.run(
            "diff", "--name-only", "--relative", "--diff-filter=M", "-z", "HEAD"
        ).stdout
    except GitError:
        return None
    names = [n.decode("utf-8", "surrogateescape") for n in listed.split(b"\0") if n]
    return {
        rel: git.run("show", f"HEAD:./{rel}").stdout.decode("utf-8", "surrogateescape")
        for rel in names
    }


def original_of(repo: Path, scratch: Path) -> Original:
    """The working tree's original, materialised under ``scratch`` when it differs."""
    committed = modified_since_head(repo)
    if not committed:
        why = "not a git repository with a commit" if committed is None else "nothing modified"
        return Original(repo, {}, f"the working tree against itself ({why} since HEAD)")
    source = materialize(repo, committed, scratch / "original")
    # the working tree's files as safepath reads them: a modified file that became a link
    # out of the repository, a FIFO or a device is refused (Refused: the tool's error)
    port = {rel: read_inside(repo, rel).decode("utf-8", "surrogateescape") for rel in committed}
    files = ", ".join(sorted(committed))
    return Original(source, port, f"the working tree against HEAD ({len(port)} modified: {files})")
