"""A one-file program migrated and verified rules-only through the agent graph, as
``torchport migrate --llm none`` would: the helper the port tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchport.agents import graph, runs


def migrate_rules_only(tmp_path: Path, program: str, target: str = "tpu", steps: int = 5) -> Any:
    """``program`` as ``src/train.py``, migrated into ``out/``; the graph's final state."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(program)
    settings = {"source": str(src), "target": target, "out": str(tmp_path / "out"), "llm": "none"}
    return graph.start({**settings, "steps": steps}, graph.Runtime(runs.new_run_id()))
