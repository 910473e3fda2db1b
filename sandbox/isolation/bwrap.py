"""bubblewrap backend: namespaces, a read-only view of the needed host paths.

The strongest backend that needs no daemon: no network (a new net namespace
with only loopback), its own pid namespace (the whole tree dies with it), all
capabilities dropped, and a filesystem made of read-only binds plus the
writable scratch directory and a private /tmp.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from .hostpaths import HOSTNAME, sandbox_view
from .spec import RunSpec

_MISSING = "bubblewrap not installed (scripts/ensure-sandbox-tools installs it)"

# hostpaths.MOUNT_KINDS -> bwrap's options for one mount.
_OPTIONS = {
    "symlink": lambda m: ["--symlink", m.target, m.path],
    "ro": lambda m: ["--ro-bind", m.path, m.path],
    "file": lambda m: ["--ro-bind", m.target, m.path],
    "rw": lambda m: ["--bind", m.path, m.path],
    "proc": lambda m: ["--proc", m.path],
    "dev": lambda m: ["--dev", m.path],
    "tmpfs": lambda m: ["--tmpfs", m.path],
}


def command(spec: RunSpec, exe: str = "bwrap") -> list[str]:
    """The bwrap command line that runs ``spec.argv`` isolated."""
    cmd = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    cmd += ["--hostname", HOSTNAME]  # --unshare-all gave it its own UTS namespace
    for mount in sandbox_view(spec.scratch, spec.readonly):
        cmd += _OPTIONS[mount.kind](mount)
    cmd += ["--chdir", str(spec.scratch)]
    # bwrap's root is a tmpfs holding the mount points; make it read-only too, so a
    # write anywhere but scratch and the private /tmp fails instead of vanishing.
    cmd += ["--remount-ro", "/"]
    return [*cmd, "--", *spec.argv]


@functools.cache
def unavailable() -> str | None:
    """None when bwrap works here, else why not (a probe run, cached)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return _MISSING
    probe = [exe, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"]
    try:
        res = subprocess.run(probe, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot start: {exc}"
    if res.returncode != 0:
        err = res.stderr.decode(errors="replace").strip()
        return f"bubblewrap cannot create namespaces here: {err}"
    return None
