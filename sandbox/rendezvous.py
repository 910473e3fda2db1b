"""A rendezvous that cannot connect fails at once, with a message that says why.

The sandbox has no network but its own loopback. A program whose process group
meets at another host (``init_method="tcp://10.1.2.3:23456"``, ``MASTER_ADDR`` of
a cluster node, a name that does not resolve) would otherwise wait out torch's
rendezvous timeout (30 minutes by default) before it fails, and the verdict would
be a timeout instead of the cause. :func:`install` wraps
``torch.distributed.init_process_group`` (outermost, over the reference shim or
the emulator) to check the address before torch connects and to bound the
rendezvous timeout. torchrun's own options (``--master-addr``, ``--rdzv-endpoint``)
are checked by the harness with :func:`refusal` before torchrun starts.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import os
import socket
from typing import Any
from urllib.parse import urlsplit

from . import patching
from .isolation.hostpaths import PRIVATE_ETC

# An init_process_group without a timeout, or with a longer one, gets this one: short
# enough to end before the run's wall clock, long enough for every rank to start.
TIMEOUT_S = 60.0
# The start of the error message; agents/data/signatures.toml (rendezvous-unreachable) keys on it.
MESSAGE = "torchport sandbox: the rendezvous address"


class RendezvousUnreachable(RuntimeError):
    """The program's process group meets at an address the sandbox cannot reach."""


@functools.cache
def sandbox_names() -> dict[str, set[str]]:
    """The names the sandbox's private /etc/hosts gives, to their addresses."""
    names: dict[str, set[str]] = {}
    text = PRIVATE_ETC["/etc/hosts"].read_text(encoding="utf-8")
    for line in text.splitlines():
        address, *aliases = line.partition("#")[0].split() or [""]
        for name in aliases:
            names.setdefault(name.lower(), set()).add(address)
    return names


def _resolve(host: str) -> set[str] | None:
    """The addresses ``host`` has here (this process's resolver), None if it has none."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None
    return {str(info[4][0]).split("%")[0] for info in infos}


def refusal(host: str, *, resolve: bool = True) -> str | None:
    """Why ``host`` cannot be a rendezvous inside the sandbox; None when it is loopback.

    With ``resolve`` (inside the sandbox, where names come from its own /etc/hosts at
    once) a name is looked up; without (on the host, before a run: no lookup may leave
    the machine) only the sandbox's own names count. Every address must be loopback;
    the unspecified address (0.0.0.0) binds locally.
    """
    host = host.strip().strip("[]")
    try:
        found: set[str] | None = {str(ipaddress.ip_address(host))}
    except ValueError:
        found = _resolve(host) if resolve else sandbox_names().get(host.lower())
    if not found:
        return "the name does not resolve inside the sandbox"
    addresses = {ipaddress.ip_address(a) for a in found}
    outside = sorted(str(a) for a in addresses if not (a.is_loopback or a.is_unspecified))
    if outside:
        return f"{', '.join(outside)} is not a loopback address"
    return None


def unreachable_message(address: str, source: str, why: str) -> str:
    """The one-line error: the address, where it came from, why, what the sandbox has."""
    return (
        f"{MESSAGE} {address} ({source}) cannot be reached: {why}; the sandbox has no "
        "network but loopback, so ranks can meet only at localhost or 127.0.0.1"
    )


def rendezvous_host(init_method: str | None, env: dict[str, str]) -> tuple[str, str, str] | None:
    """(host, address as written, where it came from) of a tcp:// or env:// rendezvous.

    None when there is no host to check: file://, a store passed in, or an env://
    without MASTER_ADDR (torch itself fails on that at once).
    """
    if init_method is None or init_method.startswith("env://"):
        host = env.get("MASTER_ADDR")
        if not host:
            return None
        port = env.get("MASTER_PORT", "")
        return host, f"{host}:{port}" if port else host, "MASTER_ADDR"
    if init_method.startswith("tcp://"):
        parts = urlsplit(init_method)
        return parts.hostname or "", parts.netloc, "init_method"
    return None


def check(init_method: str | None, env: dict[str, str] | None = None) -> None:
    """Raise RendezvousUnreachable when the rendezvous names a host not on loopback."""
    found = rendezvous_host(init_method, dict(os.environ) if env is None else env)
    if found is None:
        return
    host, address, source = found
    why = refusal(host)
    if why is not None:
        raise RendezvousUnreachable(unreachable_message(address, source, why))


def bounded_timeout(timeout: Any, limit_s: float = TIMEOUT_S) -> datetime.timedelta:
    """The program's timeout when it is shorter than ``limit_s``, else ``limit_s``."""
    limit = datetime.timedelta(seconds=limit_s)
    if isinstance(timeout, datetime.timedelta) and timeout < limit:
        return timeout
    return limit


def _guarded(real: Any) -> Any:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        """torch.distributed.init_process_group, refusing an unreachable rendezvous at once
        and with a bounded timeout (torchport's sandbox)."""
        given = list(args)  # (backend, init_method, timeout, world_size, rank, store, ...)
        store = given[5] if len(given) > 5 else kwargs.get("store")
        if store is None:
            check(given[1] if len(given) > 1 else kwargs.get("init_method"))
        if len(given) > 2:
            given[2] = bounded_timeout(given[2])
        else:
            kwargs["timeout"] = bounded_timeout(kwargs.get("timeout"))
        return real(*given, **kwargs)

    functools.update_wrapper(
        init_process_group, real, assigned=(), updated=()
    )  # sets __wrapped__ only
    return init_process_group


def install() -> None:
    """Guard every init_process_group of this process (idempotent; undone by uninstall)."""
    import torch.distributed as dist

    if patching.active("rendezvous") or not dist.is_available():
        return
    c10d = dist.distributed_c10d
    guarded = _guarded(dist.init_process_group)
    for owner in (dist, c10d):
        patching.patch(owner, "init_process_group", guarded, by="rendezvous")


def uninstall() -> None:
    """Put back what install replaced (in-process tests)."""
    patching.undo_all("rendezvous")
