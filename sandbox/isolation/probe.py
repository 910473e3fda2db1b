"""What each sandbox backend isolates on this machine: measured, not claimed.

For ``torchport doctor`` and ``python -m torchport.sandbox.isolation --probe``.
Torchport lays bait on the host (a canary file and a folder to write in outside
any scratch, a Unix socket listener there, an abstract Unix socket, a TCP
listener on the host's 127.0.0.1, and a torchport process holding a
secret-looking variable), runs probe_program inside each usable backend through
the same ``run_isolated`` a verification uses, and combines what the program
says with what the host saw (a file that appeared, a connection that arrived).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..hostpython import private_cwd, python_command
from . import owner, probe_program
from .api import BACKENDS, backend_status, choose_backend, run_isolated
from .cgroup import make_cgroup
from .env import safe_env
from .result import IsolationWarning

# Host sockets a program must never reach; each that exists here is tried (connect only).
KNOWN_SOCKETS = (
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/dbus/system_bus_socket",
    "/var/run/dbus/system_bus_socket",
    "/tmp/.X11-unix/X0",
)
_SECRET_NAME = "TORCHPORT_DOCTOR_API_KEY"
# A torchport process holding a secret, protected like every torchport process.
_HOLDER = (
    "import sys\n"
    "from torchport.sandbox.isolation.secrets import hide_own_secrets\n"
    "hide_own_secrets()\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


@dataclass
class Bait:
    """What torchport set up on the host for one doctor run."""

    folder: Path
    config: dict[str, Any]
    listeners: dict[str, socket.socket] = field(default_factory=dict)


def _bait_parent() -> str | None:
    """/var/tmp where it is writable: outside /tmp, so the probe measures the whole
    filesystem view and not only the private /tmp every backend but process has."""
    return "/var/tmp" if os.access("/var/tmp", os.W_OK | os.X_OK) else None


def _listener(family: int, address: Any) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind(address)
    sock.listen(8)
    sock.setblocking(False)
    return sock


def _start_time(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()[19]


def _host_sockets() -> list[str]:
    paths = list(KNOWN_SOCKETS)
    if os.environ.get("SSH_AUTH_SOCK"):
        paths.append(os.environ["SSH_AUTH_SOCK"])
    found = []
    for path in paths:
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.stat(path).st_mode):
                found.append(path)
    return found


def _start_holder(secret: str) -> subprocess.Popen[bytes]:
    """A torchport process holding ``secret`` in a credential-like variable, once it has
    hidden it as every torchport process does (it imports torchport as this one does)."""
    env = {**safe_env(), _SECRET_NAME: secret}
    # -I, in a folder of torchport's: the working folder (a repository?) cannot stand in
    holder = subprocess.Popen(
        python_command("-c", _HOLDER),
        env=env,
        cwd=private_cwd(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    if holder.stdout is None or holder.stdout.readline().strip() != b"ready":
        holder.kill()
        holder.wait()
        raise OSError("the secret-holding torchport process did not start")
    return holder


@contextlib.contextmanager
def host_bait() -> Iterator[Bait]:
    """Lay the bait; take all of it away afterwards."""
    secret = secrets.token_hex(16)
    folder = Path(tempfile.mkdtemp(prefix="torchport-doctor-", dir=_bait_parent()))
    bait = Bait(folder, {})
    holder = None
    try:
        holder = _start_holder(secret)
        canary = folder / "canary.txt"
        canary.write_bytes(secrets.token_bytes(32))
        abstract = f"torchport-doctor-{secrets.token_hex(8)}"
        bait.listeners = {
            "unix": _listener(socket.AF_UNIX, str(folder / "probe.sock")),
            "abstract": _listener(socket.AF_UNIX, "\0" + abstract),
            "tcp": _listener(socket.AF_INET, ("127.0.0.1", 0)),
        }
        bait.config = {
            "canary": str(canary),
            "canary_sha256": hashlib.sha256(canary.read_bytes()).hexdigest(),
            "target": str(folder / "written-from-sandbox.txt"),
            "sockets": [str(folder / "probe.sock"), *_host_sockets()],
            "abstract": abstract,
            "tcp_port": bait.listeners["tcp"].getsockname()[1],
            "torchport_pid": os.getpid(),
            "torchport_start": _start_time(os.getpid()),
            "holder_pid": holder.pid,
            "secret_sha256": hashlib.sha256(secret.encode()).hexdigest(),
        }
        yield bait
    finally:
        for sock in bait.listeners.values():
            sock.close()
        if holder is not None:
            holder.kill()
            holder.wait()
        shutil.rmtree(folder)


def _arrived(sock: socket.socket) -> bool:
    """Whether a connection arrived at a listener since the last call (all are taken)."""
    arrived = False
    while True:
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, OSError):
            return arrived
        conn.close()
        arrived = True


def _cgroup_binds() -> bool:
    group = make_cgroup(owner=owner.tag(), memory_mb=64, pids=16, cpus=1)
    if group is None:
        return False
    group.remove()
    return True


def probe_backend(name: str, bait: Bait) -> dict[str, Any]:
    """Run the probe program inside backend ``name``; what it reached, host-checked."""
    source = Path(probe_program.__file__).read_text()
    argv = [sys.executable, "-I", "-c", source, json.dumps(bait.config)]
    with (
        owner.temp_dir() as scratch,  # named for the sweep, should doctor be killed
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", IsolationWarning)  # the table says it
        res = run_isolated(argv, scratch=Path(scratch), timeout_s=60, memory_mb=1024, backend=name)
    target = Path(bait.config["target"])
    written = target.exists()
    target.unlink(missing_ok=True)
    arrived = {kind: _arrived(sock) for kind, sock in bait.listeners.items()}
    try:
        inside = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (res.stderr.strip() or f"exit {res.returncode}")[-500:]
        return {"error": f"the probe did not report: {tail}"}
    inside["files"]["write"] = inside["files"]["write"] or written
    inside["network"]["host_loopback"] = inside["network"]["host_loopback"] or arrived["tcp"]
    for path, kind in (
        (bait.config["sockets"][0], "unix"),
        ("@" + bait.config["abstract"], "abstract"),
    ):
        inside["sockets"][path] = inside["sockets"][path] or arrived[kind]
    inside["limits"] = {"cgroup": name == "docker" or _cgroup_binds(), **inside.pop("rlimits")}
    return inside


def probe_all() -> dict[str, Any]:
    """Every backend: why it cannot run here, or what its probe measured."""
    status = backend_status()
    report: dict[str, Any] = {"auto": choose_backend("auto"), "backends": {}}
    with host_bait() as bait:
        for name in BACKENDS:
            entry: dict[str, Any] = {"available": status[name] is None, "reason": status[name]}
            if status[name] is None:
                entry.update(probe_backend(name, bait))
            report["backends"][name] = entry
        report["sockets_tried"] = [*bait.config["sockets"], "@" + bait.config["abstract"]]
    return report


# The table's columns: what each says for one probed backend.
def _network(e: dict[str, Any]) -> str:
    net = e["network"]
    others = [i for i in net["interfaces"] if i != "lo"]
    leaks = [others[0] + (f" +{len(others) - 1}" if len(others) > 1 else "")] if others else []
    leaks += ["route"] if net["default_route"] else []
    leaks += ["127.0.0.1"] if net["host_loopback"] else []
    return "none (own lo)" if not leaks else "HOST: " + ", ".join(leaks)


def _files(e: dict[str, Any]) -> str:
    got = [k.upper() for k in ("read", "write") if e["files"][k]]
    return "+".join(got) if got else "hidden"


def _sockets(e: dict[str, Any]) -> str:
    reached = sorted(
        {"abstract" if p[0] == "@" else Path(p).name for p, ok in e["sockets"].items() if ok}
    )
    return "REACHED: " + ", ".join(reached) if reached else "unreachable"


def _secrets(e: dict[str, Any]) -> str:
    s = e["secrets"]
    return "READABLE" if s["found"] or s["memory_map_readable"] else "hidden"


def _identity(e: dict[str, Any]) -> str:
    caps = e["identity"]["capabilities"]
    return f"{e['identity']['uid']} " + ("no caps" if int(caps or "0", 16) == 0 else f"caps {caps}")


def _limits(e: dict[str, Any]) -> str:
    lim = e["limits"]
    kinds = ["cgroup"] if lim["cgroup"] else []
    kinds += ["rlimits"] if any(lim[k] for k in ("data", "nproc", "cpu")) else []
    return "+".join(kinds) or "NONE"


COLUMNS = {
    "network": _network,
    "host files": _files,
    "host sockets": _sockets,
    "processes": lambda e: "SEES torchport" if e["torchport_visible"] else "own only",
    "secrets": _secrets,
    "uid": _identity,
    "limits": _limits,
}


def render_table(report: dict[str, Any]) -> str:
    """The report as a table a person can read, then which backend ``auto`` picks."""
    rows = [["backend", *COLUMNS]]
    notes = []
    for name, e in report["backends"].items():
        if not e["available"]:
            notes.append(f"{name}: cannot run here: {e['reason']}")
        elif "error" in e:
            notes.append(f"{name}: {e['error']}")
        else:
            rows.append([name, *(column(e) for column in COLUMNS.values())])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join([*lines, *notes, f"auto picks: {report['auto']}"]) + "\n"
