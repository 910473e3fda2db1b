"""``verification.md`` for one Verification, as deliver writes it for a migration's report:
the helper the verdict tests share."""

from __future__ import annotations

from typing import Any

from torchport.agents.deliver import verification_markdown


def verification_md(v: Any, target: str = "tpu") -> str:
    """The report's markdown for verdict ``v`` of a one-round migration to ``target``."""
    record = {
        "verdict": v.verdict,
        "verification": v.to_json(),
        "target": target,
        "run_id": "r1",
        "iterations": 1,
        "elapsed_s": 1.0,
        "agent_edits": [],
        "decisions": [],
    }
    return verification_markdown(record)
