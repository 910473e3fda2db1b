"""unshare backend: namespaces from util-linux when bubblewrap is absent.

A new network namespace (only loopback), pid namespace (the tree dies with
it), mount namespace in which every mount is remounted read-only except the
scratch directory, then all capabilities are dropped before the program runs.
Not root: the same inside a user namespace (the remounts are best effort).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from .spec import RunSpec

NAME = "unshare"

# Runs inside the new namespaces, as (namespace) root, before the program.
_BOOT = r"""
scratch=$1; shift
ip link set lo up 2>/dev/null || true
mount --bind "$scratch" "$scratch"
cut -d' ' -f5 /proc/self/mountinfo | while read -r mp; do
  mp=$(printf '%b' "$mp")
  [ "$mp" = "$scratch" ] && continue
  mount -o remount,bind,ro "$mp" 2>/dev/null || true
done
cd "$scratch" || exit 126
exec setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
"""


def command(spec: RunSpec) -> list[str]:
    """The unshare command line that runs ``spec.argv`` isolated."""
    ns = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount", "--ipc", "--uts"]
    if os.geteuid() != 0:
        ns.insert(0, "--map-root-user")
    boot = ["/bin/sh", "-c", _BOOT, "sh", str(spec.scratch)]
    return ["unshare", "--propagation", "private", *ns, "--", *boot, *spec.argv]


@functools.cache
def unavailable() -> str | None:
    """None when unshare can create the namespaces, else why not (cached probe)."""
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} not found (Debian package util-linux / mount)"
    probe = ["unshare", "--net", "--pid", "--fork", "--mount", "--mount-proc"]
    if os.geteuid() != 0:
        probe.append("--map-root-user")
    try:
        res = subprocess.run([*probe, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare cannot start: {exc}"
    if res.returncode != 0:
        return (
            f"unshare cannot create namespaces here: {res.stderr.decode(errors='replace').strip()}"
        )
    return None
