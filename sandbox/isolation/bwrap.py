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
from pathlib import Path

from .hostpaths import ETC_FILES, SYSTEM_DIRS, dedupe, python_paths
from .spec import RunSpec

NAME = "bwrap"
_MISSING = "bubblewrap not installed (scripts/ensure-sandbox-tools installs it)"


def command(spec: RunSpec, exe: str = "bwrap") -> list[str]:
    """The bwrap command line that runs ``spec.argv`` isolated."""
    cmd = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for d in SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            cmd += ["--symlink", str(p.readlink()), d]
        elif p.is_dir():
            cmd += ["--ro-bind", d, d]
    for f in ETC_FILES:
        cmd += ["--ro-bind-try", f, f]
    # The private /tmp first: binds below may live under /tmp (a checkout or venv in
    # /tmp, pytest's scratch dirs) and must land on top of it, not be hidden by it.
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for p in dedupe([*python_paths(), *spec.readonly]):
        cmd += ["--ro-bind", str(p), str(p)]
    cmd += ["--bind", str(spec.scratch), str(spec.scratch), "--chdir", str(spec.scratch)]
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
