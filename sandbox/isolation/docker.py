"""docker backend: a container built locally, the host's Python bound read-only.

No registry is reachable on the build machines, so the image is made here from
a few kilobytes: an empty root filesystem with mount points and merged-/usr
symlinks (``docker import``). The host's /usr, Python and venv are bound
read-only at run time, so the image never needs rebuilding when they change.
Uses the docker CLI (the Python SDK is not a torchport dependency).
"""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

from . import owner
from .hostpaths import ETC_FILES, HOSTNAME, PRIVATE_ETC, SYSTEM_DIRS, exposed, python_paths
from .spec import RunSpec

IMAGE = "torchport/sandbox-base:2"
LABEL = "torchport.sandbox"
OWNER_LABEL = "torchport.owner"  # owner.tag() of the torchport that started it
# /sbin stays a real directory: docker mounts its init (tini) at /sbin/docker-init.
_SYMLINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64"}


def _docker() -> str:
    return shutil.which("docker") or "docker"


def image_tarball() -> bytes:
    """A minimal root filesystem: directories, symlinks and /etc/passwd."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("usr", "etc", "tmp", "proc", "dev", "sys", "root", "sbin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for name, target in _SYMLINKS.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name, text in {
            "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
            "etc/group": "root:x:0:\nnogroup:x:65534:\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def ensure_image() -> None:
    """Build the local image once; a no-op when it exists."""
    have = subprocess.run(
        [_docker(), "image", "inspect", IMAGE], capture_output=True, check=False, timeout=30
    )
    if have.returncode == 0:
        return
    subprocess.run(
        [_docker(), "import", "-", IMAGE],
        input=image_tarball(),
        capture_output=True,
        check=True,
        timeout=120,
    )


def command(spec: RunSpec, name: str) -> list[str]:
    """The ``docker run`` command line for ``spec``; ``name`` lets a timeout kill it.

    Labelled as torchport's, with the owner's tag, so that a sweep can remove the
    container of a torchport that was killed before it could.
    """
    cmd = [
        _docker(), "run", "--name", name, "--network", "none", "--read-only", "--init",
        "--label", f"{LABEL}=1", "--label", f"{OWNER_LABEL}={owner.tag()}",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m",
        "--cpus", str(spec.cpus), "--pids-limit", str(spec.pids),
        "--ulimit", f"cpu={spec.cpu_seconds}", "--ulimit", "core=0",
        "--tmpfs", "/tmp:rw,nosuid,size=256m", "--log-driver", "none",
        "--hostname", HOSTNAME,
    ]  # fmt: skip
    ro = [Path(d) for d in SYSTEM_DIRS if Path(d).is_dir() and not Path(d).is_symlink()]
    ro += [Path(f) for f in ETC_FILES if Path(f).exists()]
    for p in exposed([*ro, *python_paths(), *spec.readonly]):
        cmd += ["-v", f"{p}:{p}:ro"]
    # torchport's /etc/hosts replaces docker's own (which, with --network none, may lack the
    # hostname), so every backend resolves the same names.
    for path, source in PRIVATE_ETC.items():
        cmd += ["-v", f"{source}:{path}:ro"]
    cmd += ["-v", f"{spec.scratch}:{spec.scratch}:rw", "-w", str(spec.scratch)]
    for k, v in spec.env.items():
        cmd += ["-e", f"{k}={v}"]
    return [*cmd, IMAGE, *spec.argv]


def new_name() -> str:
    """A unique container name for one run."""
    return f"torchport-sbx-{uuid.uuid4().hex[:12]}"


def kill_command(name: str) -> tuple[str, ...]:
    """Stops a run's container (the CLI dying does not stop it)."""
    return (_docker(), "kill", name)


def remove_command(name: str) -> tuple[str, ...]:
    """Removes a run's container, stopped or not."""
    return (_docker(), "rm", "-f", name)


def finish(name: str) -> bool:
    """Remove the container; return whether the kernel OOM-killed it."""
    res = subprocess.run(
        [_docker(), "inspect", "-f", "{{.State.OOMKilled}}", name],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    subprocess.run(remove_command(name), capture_output=True, check=False, timeout=30)
    return res.stdout.strip() == "true"


def labelled() -> dict[str, str]:
    """torchport's containers on this daemon, name to owner tag (what a sweep inspects)."""
    res = subprocess.run(
        [_docker(), "ps", "-a", "--filter", f"label={LABEL}=1",
         "--format", f'{{{{.Names}}}}\t{{{{.Label "{OWNER_LABEL}"}}}}'],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    lines = (line.partition("\t") for line in res.stdout.splitlines())
    return {name: tag for name, _, tag in lines if name}


@functools.cache
def unavailable() -> str | None:
    """None when a docker daemon answers, else why not (cached probe)."""
    if shutil.which("docker") is None:
        return "docker CLI not installed (TORCHPORT_WITH_DOCKER=1 scripts/ensure-sandbox-tools)"
    try:
        res = subprocess.run([_docker(), "info", "--format", "{{.ServerVersion}}"],
                             capture_output=True, text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker daemon not reachable: {exc}"
    if res.returncode != 0:
        return (
            "docker daemon not running "
            "(TORCHPORT_WITH_DOCKER=1 scripts/ensure-sandbox-tools starts one)"
        )
    return None
