"""Start a ``torchport`` command as a separate process (in its own session, so a test can
kill it and everything it started, as a user's Ctrl-C or an OOM killer would)."""

from __future__ import annotations

import subprocess
import sys


def cli_process(command: str, *args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "torchport.cli", command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def migrate_process(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return cli_process("migrate", *args, env=env)
