"""What each backend isolates, in one line a report can carry.

Reports name the backend a verification ran under, and a name alone tells a
reader little ("was the network off?"). These lines say what the hostile tests
(tests/test_hostile_sandbox.py, tests/test_hostile_kill.py) measure of each
backend; `torchport doctor` measures the same on the machine at hand.
"""

from __future__ import annotations

_ISOLATED = (
    "no network (its own loopback only), host files and Unix sockets out of reach, "
    "writes only to its scratch copy, torchport's keys unreadable, bounded time, memory "
    "and processes, and its processes die with torchport"
)

GUARANTEES: dict[str, str] = {
    "bwrap": f"bubblewrap namespaces: {_ISOLATED}",
    "docker": f"a docker container: {_ISOLATED}",
    "unshare": f"unshare namespaces with a private root: {_ISOLATED}",
    "process": (
        "NOT isolated: the program can use the network, read and write the host's files and "
        "reach its Unix sockets (docker.sock); only torchport's keys, the limits and the "
        "scratch working folder hold"
    ),
}


def describe(backend: str | None) -> str:
    """One line on what ``backend`` isolates; an unknown or absent name says so."""
    if not backend:
        return "no sandboxed run took place"
    return GUARANTEES.get(backend, f"unknown backend {backend!r}")
