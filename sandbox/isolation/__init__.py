"""Run untrusted code (user programs, LLM-written code) isolated.

Untrusted code stays in the sandbox (docs/security.md) — no network, bounded time
and memory, no secrets in the environment, writes only to scratch. Backends,
strongest first: ``bwrap`` (bubblewrap), ``docker``, ``unshare`` (util-linux)
and ``process`` (limits only, warns that it does not isolate).
"""

from .api import BACKENDS, backend_status, choose_backend, run_isolated
from .env import looks_secret, safe_env
from .result import BackendUnavailable, IsolationResult, IsolationWarning
from .secrets import hide_own_secrets

__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "IsolationResult",
    "IsolationWarning",
    "backend_status",
    "choose_backend",
    "hide_own_secrets",
    "looks_secret",
    "run_isolated",
    "safe_env",
]
