"""Which host paths a sandboxed Python program sees, and in what order they are mounted.

bwrap and unshare build the same view from :func:`sandbox_view`, docker binds the
same host paths into its image: system directories and small /etc files, the
running Python and its venv (all read-only), a private /tmp, a fresh /proc, a
minimal /dev and the writable scratch directory. Nothing else of the host: not
~/.netrc or cloud credential files, and not the host's Unix sockets (docker.sock,
D-Bus, X11, an ssh agent), which a read-only mount would not stop: connect() to
a socket ignores a read-only mount.

Name lookup is torchport's own, not the host's: a private /etc/hosts and
nsswitch.conf (in ``etc/`` beside this module) make ``localhost`` and the
sandbox's fixed hostname resolve to loopback (torch's TCPStore, ``MASTER_ADDR=
localhost`` and ``torchrun --standalone`` need that) while the host's resolver
configuration (/etc/resolv.conf, its /etc/hosts) stays out of sight.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Top-level system directories; on merged-/usr systems most are symlinks.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Small /etc files the dynamic linker and libc read.
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
)
# The hostname of every backend with its own UTS namespace; /etc/hosts maps it to loopback.
HOSTNAME = "torchport-sandbox"
# torchport's own files shown read-only at these /etc paths (name lookup by files only).
PRIVATE_ETC = {
    "/etc/hosts": Path(__file__).with_name("etc") / "hosts",
    "/etc/nsswitch.conf": Path(__file__).with_name("etc") / "nsswitch.conf",
    "/etc/resolv.conf": Path(__file__).with_name("etc") / "resolv.conf",  # docker copies the host's
}
# Where hosts keep Unix sockets (docker.sock, D-Bus, X11, per-user runtime dirs); a
# path that holds one of these, or lies inside one, is never exposed.
SOCKET_DIRS = ("/run", "/var/run", "/tmp/.X11-unix", "/tmp/.ICE-unix", "/var/lib/docker")
# Environment variables that name a socket (the value, after the prefix, is its path).
SOCKET_VARIABLES = {
    "SSH_AUTH_SOCK": "",
    "DOCKER_HOST": "unix://",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=",
    "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=",
    "XDG_RUNTIME_DIR": "",
}

# What each kind of mount in a view is; every backend that builds a view handles all.
MOUNT_KINDS = {
    "symlink": "a symlink to `target` (merged-/usr systems: /bin -> usr/bin)",
    "ro": "the host path of the same name, read-only",
    "rw": "the host path of the same name, writable (the scratch directory)",
    "file": "torchport's file `target` at `path`, read-only (PRIVATE_ETC)",
    "proc": "a fresh /proc of the sandbox's own pid namespace",
    "dev": "a minimal /dev: null, zero, full, random, urandom, tty, a tmpfs /dev/shm",
    "tmpfs": "a private, empty tmpfs",
}


@dataclass(frozen=True)
class Mount:
    """One entry of a sandbox's filesystem view (``kind`` is a key of MOUNT_KINDS)."""

    kind: str
    path: str
    target: str = ""


def python_paths() -> list[Path]:
    """The running interpreter's installation and virtual environment."""
    paths = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    paths.add(Path(sys.executable).resolve().parent.parent)
    return sorted(p for p in paths if str(p) not in SYSTEM_DIRS and p != Path("/usr"))


def dedupe(paths: list[Path]) -> list[Path]:
    """Existing paths, resolved, without ones already covered by a parent."""
    out: list[Path] = []
    for p in sorted({Path(p).resolve() for p in paths if Path(p).exists()}):
        if not any(p.is_relative_to(q) for q in out):
            out.append(p)
    return out


def socket_places() -> list[Path]:
    """Host folders known to hold Unix sockets, resolved (/var/run is usually /run)."""
    places = [Path(d) for d in SOCKET_DIRS]
    for name, prefix in SOCKET_VARIABLES.items():
        value = os.environ.get(name, "")
        if value.startswith(prefix) and value[len(prefix) :].startswith("/"):
            path = Path(value[len(prefix) :].split(",")[0])
            places.append(path if name == "XDG_RUNTIME_DIR" else path.parent)
    return sorted({p.resolve() for p in places})


def exposed(paths: Sequence[Path]) -> list[Path]:
    """:func:`dedupe`, refusing any path that holds a host socket folder or lies in one.

    Raises ValueError (a bad ``readonly`` path is the caller's input error).
    """
    out = dedupe(list(paths))
    for p in out:
        for place in socket_places():
            if place.is_relative_to(p) or p.is_relative_to(place):
                raise ValueError(
                    f"refusing to expose {p} in the sandbox: host Unix sockets live in {place}"
                )
    return out


def sandbox_view(scratch: Path, readonly: Sequence[Path]) -> list[Mount]:
    """The whole filesystem a sandboxed program sees, in mount order.

    The private /tmp comes before the binds: a checkout, venv or scratch directory
    under /tmp must land on top of it, not be hidden by it.
    """
    view: list[Mount] = []
    for d in SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            view.append(Mount("symlink", d, str(p.readlink())))
        elif p.is_dir():
            view.append(Mount("ro", d))
    view += [Mount("ro", f) for f in ETC_FILES if Path(f).exists()]
    view += [Mount("file", path, str(source)) for path, source in PRIVATE_ETC.items()]
    view += [Mount("proc", "/proc"), Mount("dev", "/dev"), Mount("tmpfs", "/tmp")]
    view += [Mount("ro", str(p)) for p in exposed([*python_paths(), *readonly])]
    view.append(Mount("rw", str(scratch)))
    return view
