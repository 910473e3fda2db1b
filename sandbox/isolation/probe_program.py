"""The program ``torchport doctor`` runs inside each backend: what can it reach?

Standard library only, run as ``python -I -c <this file's text> <config JSON>``,
prints one JSON object. It never sends traffic: the network is judged from the
interfaces and routes it sees, plus a connect() to a TCP listener on the host's
127.0.0.1 (a sandbox's loopback is its own, so that connect must fail), and
Unix sockets are connected to and closed, with nothing sent.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import socket
import sys
from collections.abc import Callable


def _attempt(action: Callable[[], object]) -> bool:
    try:
        action()
    except OSError:
        return False
    return True


def _connect(family: int, address: tuple[str, int] | str, timeout: float = 2.0) -> bool:
    def connect() -> None:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(address)

    return _attempt(connect)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _network(cfg: dict) -> dict:
    dev = (_read("/proc/net/dev") or b"").decode().splitlines()[2:]
    interfaces = sorted(line.split(":")[0].strip() for line in dev)
    v4 = (_read("/proc/net/route") or b"").decode().splitlines()[1:]
    v6 = (_read("/proc/net/ipv6_route") or b"").decode().splitlines()
    default = any(line.split()[1] == "00000000" for line in v4 if line.split())
    default = default or any(
        f.split()[:2] == ["0" * 32, "00"] and f.split()[-1] != "lo" for f in v6
    )
    return {
        "interfaces": interfaces,
        "default_route": default,
        "host_loopback": _connect(socket.AF_INET, ("127.0.0.1", cfg["tcp_port"])),
    }


def _files(cfg: dict) -> dict:
    data = _read(cfg["canary"])
    seen = data is not None and hashlib.sha256(data).hexdigest() == cfg["canary_sha256"]

    def write() -> None:
        with open(cfg["target"], "x") as fh:
            fh.write("written from inside the sandbox\n")

    return {"read": seen, "write": _attempt(write)}


def _sockets(cfg: dict) -> dict:
    found = {path: _connect(socket.AF_UNIX, path) for path in cfg["sockets"]}
    found["@" + cfg["abstract"]] = _connect(socket.AF_UNIX, "\0" + cfg["abstract"])
    return found


def _process_visible(pid: int, start: str) -> bool:
    stat = (_read(f"/proc/{pid}/stat") or b"").decode()
    return bool(stat) and stat[stat.rindex(")") + 2 :].split()[19] == start


def _secrets(cfg: dict) -> dict:
    environ = _read(f"/proc/{cfg['holder_pid']}/environ")
    values = (entry.partition(b"=")[2] for entry in (environ or b"").split(b"\0"))
    found = any(hashlib.sha256(v).hexdigest() == cfg["secret_sha256"] for v in values)
    return {
        "environ_readable": environ is not None,
        "memory_map_readable": _read(f"/proc/{cfg['holder_pid']}/maps") is not None,
        "found": found,
    }


def _identity() -> dict:
    status = (_read("/proc/self/status") or b"").decode()
    caps = next((line.split()[1] for line in status.splitlines() if line.startswith("CapEff")), "")
    return {"uid": os.getuid(), "capabilities": caps}


def _rlimits() -> dict:
    names = {
        "data": resource.RLIMIT_DATA,
        "nproc": resource.RLIMIT_NPROC,
        "cpu": resource.RLIMIT_CPU,
    }
    return {k: resource.getrlimit(v)[0] != resource.RLIM_INFINITY for k, v in names.items()}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    report = {
        "network": _network(cfg),
        "files": _files(cfg),
        "sockets": _sockets(cfg),
        "torchport_visible": _process_visible(cfg["torchport_pid"], cfg["torchport_start"]),
        "secrets": _secrets(cfg),
        "identity": _identity(),
        "rlimits": _rlimits(),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
