"""The defaults of a migration's settings, in one place: the graph, chat, batch, the
verifier and every front door's options read them here, so a default is changed once.

The sandbox's own limits (timeout, memory, isolation, devices) come from
``sandbox.limits``; what is decided here is what only a migration has: how many steps a
verification compares, and how far the repair loop may go.
"""

from __future__ import annotations

from torchport.sandbox.limits import DEFAULT_ISOLATION, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S

from .state import Settings

# Steps (or forward calls) each run of a verification makes: both runs, every repair
# round, so fewer than a run on its own (sandbox.limits.RUN_STEPS).
VERIFY_STEPS = 5
MAX_ITERATIONS = 3  # repair rounds after the first verification
MAX_LLM_TOKENS = 60_000  # per migration
MAX_WALL_S = 1800.0  # per migration, all rounds together
MAX_TURNS = 6  # model turns of one LLM repair (agents.llm.repair), chat's and the graph's

DEFAULTS: Settings = {
    "select": [],
    "entry": None,
    "verify": True,
    "steps": VERIFY_STEPS,
    "timeout_s": DEFAULT_TIMEOUT_S,
    "memory_mb": DEFAULT_MEMORY_MB,
    "isolation": DEFAULT_ISOLATION,
    "max_iterations": MAX_ITERATIONS,
    "max_llm_tokens": MAX_LLM_TOKENS,
    "max_wall_s": MAX_WALL_S,
    "llm": "none",
}
