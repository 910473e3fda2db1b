"""``torchport doctor``: what each sandbox backend isolates on this machine.

Measured by running a probe program inside every backend that can run here
(sandbox/isolation/probe.py), so that the answer is this machine's, not the
documentation's: a kernel without user namespaces, a missing tool or a daemon
that is down changes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_OK, EXIT_ERROR = 0, 2

EPILOG = """\
columns (each backend that can run here; the others are listed with the reason):
  network       interfaces and routes the program sees, and whether it can connect to a
                listener on the host's 127.0.0.1. "none (own lo)": only its own loopback,
                no default route. No traffic is sent anywhere.
  host files    can it READ a canary file torchport made in a host folder outside the
                sandbox's scratch, and WRITE a new file there (checked from the host)?
  host sockets  can it connect (nothing is sent) to a Unix socket torchport listens on in
                that folder, to an abstract Unix socket, and to docker.sock, the D-Bus
                system socket, X11 and the ssh agent where this machine has them?
  processes     does it see torchport's own process in /proc?
  secrets       can it read a secret-looking variable of a torchport process, from
                /proc/PID/environ or its memory?
  uid           its user id inside, and whether it holds any capability
  limits        what bounds memory, processes and CPU: a cgroup, rlimits, or both

exit status: 0 the probes ran (whatever they found), 2 a probe could not run.
"""


def add_parser(sub: Any) -> None:
    d = sub.add_parser(
        "doctor",
        help="measure what each sandbox backend isolates on this machine",
        description="Run a small probe program inside each sandbox backend available here "
        "(bwrap, docker, unshare, process) and print what it could reach, which backend "
        "--isolation auto picks, and which emulator (native C++ or Python) tpu/neuron runs get.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("--format", "-f", choices=["text", "json"], default="text")
    d.set_defaults(func=run)


def _emulator_backend() -> tuple[str, str]:
    """Which emulator a tpu/neuron run gets here (native C++ or Python), and why."""
    from torchport.sandbox import native

    try:
        return native.describe()
    except (OSError, ValueError) as exc:
        return "python", f"the native backend could not be checked: {exc}"


def run(args: argparse.Namespace) -> int:
    from torchport.sandbox.isolation.probe import probe_all, render_table

    try:
        report = probe_all()
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"torchport: error: the probes could not run: {exc}", file=sys.stderr)
        return EXIT_ERROR
    backend, why = _emulator_backend()
    if args.format == "json":
        print(json.dumps({**report, "emulator": {"backend": backend, "reason": why}}, indent=2))
    else:
        sys.stdout.write(render_table(report))
        print(f"emulator (tpu/neuron runs): {backend} ({why})")
    failed = any("error" in entry for entry in report["backends"].values())
    return EXIT_ERROR if failed else EXIT_OK
