"""Command-line options the front doors share (migrate, chat, batch), defined once so that
their names, defaults and help read the same everywhere."""

from __future__ import annotations

import sys
from typing import Any

from torchport.tools.safetext import terminal_line

EXIT_ERROR = 2  # every front door: nothing was done (bad input or option)

ISOLATION = ["auto", "bwrap", "docker", "unshare", "process"]
LLM_FLAGS = "none|local|auto|URL"
LLM_HELP = (
    "none: rules only; local: the embedded model; URL: an OpenAI-compatible endpoint; "
    "auto: TORCHPORT_LLM_BASE_URL if set, else local if installed, else none"
)


def add_run_budget(group: Any, what: str = "per run") -> None:
    """--steps, --timeout, --memory, --isolation: how each sandboxed run is bounded."""
    group.add_argument(
        "--steps", type=int, default=5, help="optimizer steps (or forward calls) per run"
    )
    group.add_argument("--timeout", type=float, default=300.0, help=f"{what}, seconds")
    group.add_argument("--memory", type=int, default=4096, help=f"{what}, MiB")
    group.add_argument(
        "--isolation",
        choices=ISOLATION,
        default="auto",
        help="sandbox backend (auto: the strongest available)",
    )


def add_llm(group: Any, default: str, note: str = "") -> None:
    """--llm, with the front door's own default said in its help."""
    group.add_argument(
        "--llm",
        default=default,
        metavar=LLM_FLAGS,
        help=f"{LLM_HELP} (default: {default}{note})",
    )


def add_agent_limits(group: Any, per: str) -> None:
    """--max-iterations and --max-llm-tokens: how far the repair loop may go."""
    group.add_argument(
        "--max-iterations", type=int, default=3, help="repair rounds after the first verification"
    )
    group.add_argument("--max-llm-tokens", type=int, default=60_000, help=f"LLM token budget {per}")


def fail(message: str) -> int:
    """Say what is wrong on standard error, on one line with no escape sequences (it may
    quote a path); the exit status for 'nothing was done'."""
    print(f"torchport: error: {terminal_line(message)}", file=sys.stderr)
    return EXIT_ERROR


def budget_settings(args: Any) -> dict[str, Any]:
    """The graph settings of ``add_run_budget``'s options."""
    return {
        "steps": args.steps,
        "timeout_s": args.timeout,
        "memory_mb": args.memory,
        "isolation": args.isolation,
    }
