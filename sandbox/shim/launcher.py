"""`python -m torchport.sandbox.shim [-m MODULE | SCRIPT] [ARGS...]`: run a program shimmed.

Behaves like `python SCRIPT ARGS` / `python -m MODULE ARGS` (same `sys.argv`, `sys.path[0]`
and `__name__ == "__main__"`), prints nothing of its own to stdout, and, when
TORCHPORT_SHIM_REPORT names a file, writes the intercepted-API record there as JSON at exit
(even when the program fails or calls sys.exit), with the reference stand-ins the program
used (``reference_standins``, see ``standins``) and the Triton kernels that ran in Triton's
interpreter (``reference_interpreters``, see ``triton_interpreter``) when there were any.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys

from . import activate, intercepted, standins, triton_interpreter

REPORT_ENV = "TORCHPORT_SHIM_REPORT"
USAGE = "usage: python -m torchport.sandbox.shim [-m MODULE | SCRIPT] [ARGS...]"


def write_report(path: str) -> None:
    """Write `intercepted()` to `path` as JSON ({"intercepted": [...]}), and the stand-ins
    and interpreted kernels, if any ({"reference_standins": [...],
    "reference_interpreters": [...]})."""
    report: dict[str, object] = {"intercepted": intercepted()}
    if standins.records():
        report["reference_standins"] = standins.records()
    if triton_interpreter.records():
        report["reference_interpreters"] = triton_interpreter.records()
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")


def main(argv: list[str] | None = None) -> int:
    """Activate the shim and run the program named by `argv` (default: sys.argv[1:])."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    report = os.environ.get(REPORT_ENV)
    if report:
        atexit.register(write_report, report)
    activate()
    standins.install()
    triton_interpreter.install()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy replaces argv[0] with the module's path
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(os.path.abspath(argv[0]), run_name="__main__")
    return 0
