"""What a run reached for on the network, so that a download the sandbox refused is named.

The sandbox has no network but loopback. A program that downloads its pretrained weights
with ``urllib`` (a library's own loader, such as ``clip.load``) then fails with
``URLError: Name or service not known``, which names no file: the user cannot tell what to
give locally. Python's audit events say it: ``urllib.Request`` carries the full URL, and
``socket.getaddrinfo`` the host any other client (requests, http.client) looked up. They are
recorded here, a few at most, and the run's report carries them (``network``). Standard
library only: this runs in every sandboxed process, before the program.
"""

from __future__ import annotations

import sys
from typing import Any

MAX = 8  # a program that retries in a loop is named by its first addresses
_LOOPBACK = ("localhost", "127.", "::1", "0.0.0.0")
_seen: list[str] = []
_installed = False


def _add(what: str) -> None:
    if what not in _seen and len(_seen) < MAX:
        _seen.append(what)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "urllib.Request":
        _add(str(args[0]))
    elif event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else str(args[0] or "")
        if host and not host.startswith(_LOOPBACK):
            _add(f"host {host}")


def install() -> None:
    """Record from now on (once per process: an audit hook cannot be removed)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def records() -> list[str]:
    """The URLs (``https://...``) and looked-up hosts (``host example.org``), in order."""
    return list(_seen)


def urls(records: list[str]) -> list[str]:
    """The full URLs among ``records`` (a host lookup of the same request follows them)."""
    return [r for r in records if "://" in r]
