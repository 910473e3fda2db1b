"""Loopback by name in every isolation backend, and still nothing but loopback.

torch's rendezvous (TCPStore, ``MASTER_ADDR=localhost``, ``torchrun --standalone``)
resolves ``localhost`` or the hostname; without a usable /etc/hosts it hangs until
its timeout. Each backend present runs a program that listens on 127.0.0.1 and
connects to itself by both names. Isolation is judged from inside, by interfaces
and routes; no traffic is sent anywhere but loopback.
"""

from __future__ import annotations

import json
import socket
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from test_isolation import backend  # noqa: F401  (the fixture: each backend present)
from torchport.sandbox.isolation import IsolationResult, IsolationWarning, run_isolated
from torchport.sandbox.isolation.hostpaths import HOSTNAME

# Listens on 127.0.0.1, connects by each name, and reports what the sandbox has.
_PROBE = """
import json, os, socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(2)
port = server.getsockname()[1]
reached = {}
for name in ("localhost", socket.gethostname()):
    try:
        socket.create_connection((name, port), timeout=5).close()
        server.accept()[0].close()
        reached[name] = True
    except OSError as exc:
        reached[name] = repr(exc)
routes = [r.split() for r in open("/proc/net/route").read().splitlines()[1:] if r.split()]
dev = open("/proc/net/dev").read().splitlines()[2:]
print(json.dumps({
    "hostname": socket.gethostname(),
    "reached": reached,
    "interfaces": sorted(line.split(":")[0].strip() for line in dev),
    "sys_class_net": sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net")
    else None,
    "default_route": any(r[1] == "00000000" for r in routes),
    "routes": len(routes),
    "resolv_conf": os.path.exists("/etc/resolv.conf") and open("/etc/resolv.conf").read(),
}))
"""


def _probe(name: str, scratch: Path) -> dict:
    argv = [sys.executable, "-c", textwrap.dedent(_PROBE)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)  # the process backend warns
        res: IsolationResult = run_isolated(
            argv, scratch=scratch, backend=name, timeout_s=30, memory_mb=512
        )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_loopback_by_name_and_nothing_else(backend: str, tmp_path: Path) -> None:  # noqa: F811
    if backend == "process":
        pytest.skip("the process backend is the host's network; see test_process_backend_...")
    seen = _probe(backend, tmp_path / "scratch")
    assert seen["hostname"] == HOSTNAME
    assert seen["reached"] == {"localhost": True, HOSTNAME: True}
    # Still only loopback: one interface, no route at all (so no default route).
    assert seen["interfaces"] == ["lo"]
    assert seen["sys_class_net"] in (None, ["lo"])  # bwrap and unshare mount no /sys
    assert (seen["default_route"], seen["routes"]) == (False, 0)
    # The host's resolver configuration is not shown (docker would copy the host's).
    assert "nameserver" not in seen["resolv_conf"]


def test_process_backend_uses_the_hosts_own_names(tmp_path: Path) -> None:
    """The process backend shares the host's network and files: names resolve as on the
    host, which is why it is documented as no isolation at all."""
    try:
        socket.getaddrinfo("localhost", None)
        socket.getaddrinfo(socket.gethostname(), None)
    except OSError as exc:
        pytest.skip(f"this host does not resolve its own names: {exc}")
    seen = _probe("process", tmp_path / "scratch")
    assert seen["hostname"] == socket.gethostname()
    assert seen["reached"] == {"localhost": True, socket.gethostname(): True}
