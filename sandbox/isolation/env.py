"""An allowlisted environment for untrusted code.

The parent process may hold API keys, tokens and cloud credentials (the LLM
client needs them). Untrusted code must never see them, so the sandbox does not
filter the parent's environment: it builds a new one from a short allowlist.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

# Copied from the parent when set: locale and thread-count knobs only.
_PASSTHROUGH = (
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TORCH_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "CUBLAS_WORKSPACE_CONFIG",
)

# Names that look like credentials; refused even when passed explicitly.
_SECRET = re.compile(
    r"(^|_)(API_?KEY|KEY_?ID|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|ACCESS_?KEY|"
    r"PRIVATE_?KEY|SESSION_?KEY|AUTH)(_|$)|^(AWS|AZURE|OPENAI|ANTHROPIC)_",
    re.IGNORECASE,
)


def looks_secret(name: str) -> bool:
    """True when an environment variable name looks like a credential."""
    return bool(_SECRET.search(name))


def safe_env(
    extra: Mapping[str, str] | None = None,
    *,
    home: Path | None = None,
    cpus: float = 1.0,
) -> dict[str, str]:
    """Return a fresh environment for untrusted code.

    PATH is fixed (the running interpreter's directory, then the system bin
    directories), HOME and TMPDIR point at ``home`` (the scratch directory) so
    that caches land where writes are allowed, hashing is deterministic, and
    thread counts follow ``cpus``. ``extra`` is layered on top; a name in it
    that looks like a credential raises ``ValueError`` rather than leaking.
    """
    threads = str(max(1, int(cpus)))
    env = {
        "PATH": os.pathsep.join(
            dict.fromkeys([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
        ),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
    }
    for name in _PASSTHROUGH:
        if name in os.environ:
            env[name] = os.environ[name]
    if home is not None:
        env["HOME"] = str(home)
        env["TMPDIR"] = str(home)
    for name, value in (extra or {}).items():
        if looks_secret(name):
            raise ValueError(f"refusing to pass {name!r} into the sandbox: it looks like a secret")
        env[name] = value
    return env
