"""``python -m torchport.sandbox.isolation``: report backends, build the docker image.

``--probe`` prints what ``torchport doctor`` prints: what each backend isolates here.

Called by scripts/ensure-sandbox-tools so that the shell script does not
duplicate the probes.
"""

from __future__ import annotations

import argparse
import sys

from . import docker
from .api import BACKENDS, backend_status
from .probe import probe_all, render_table


def main(argv: list[str] | None = None) -> int:
    """Print each backend's status; optionally build the local docker image."""
    parser = argparse.ArgumentParser(prog="python -m torchport.sandbox.isolation")
    parser.add_argument(
        "--build-docker-image", action="store_true", help="docker import the base image"
    )
    parser.add_argument(
        "--probe", action="store_true", help="measure what each backend isolates (torchport doctor)"
    )
    args = parser.parse_args(argv)
    if args.build_docker_image:
        reason = docker.unavailable()
        if reason:
            print(f"docker image not built: {reason}", file=sys.stderr)
            return 1
        docker.ensure_image()
        print(f"docker image ready: {docker.IMAGE}")
    if args.probe:
        report = probe_all()
        sys.stdout.write(render_table(report))
        return 1 if any("error" in e for e in report["backends"].values()) else 0
    status = backend_status()
    auto = next(n for n in BACKENDS if status[n] is None)
    for name in BACKENDS:
        reason = status[name]
        print(f"{name:8} {'ok' if reason is None else 'unavailable: ' + reason}")
    print(f"auto ->  {auto}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
