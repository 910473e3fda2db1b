"""Acceptance: rules only, offline, every easy and medium corpus program migrated to
`tpu` and to `neuron` reaches `verified` (it ran on the emulated device and its
losses or outputs match the original's on the CUDA reference shim). Hard programs
need the LLM or a human by definition (tests/fixtures/corpus/expected.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from torchport.agents import graph, runs

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
EXAMPLE = Path(__file__).parents[1] / "examples" / "cuda_mnist"


def programs(*difficulties: str) -> list[str]:
    labels = tomllib.loads((CORPUS / "expected.toml").read_text())["files"]
    found = {name.split("/")[0]: spec["difficulty"] for name, spec in labels.items()}
    return sorted(p for p, d in found.items() if d in difficulties)


def verify(source: Path, target: str, out: Path) -> dict:
    runtime = graph.Runtime(runs.new_run_id())
    settings = {"source": str(source), "target": target, "out": str(out), "llm": "none"}
    return graph.start({**settings, "steps": 3}, runtime)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu", "neuron"])
@pytest.mark.parametrize("program", programs("easy", "medium"))
def test_easy_and_medium_programs_verify_rules_only(tmp_path, program, target):
    final = verify(CORPUS / program, target, tmp_path / "out")
    v = final["verification"]
    assert final["outcome"] == "verified", (v["reason"], final["decisions"])
    assert v["parity"]["steps"] >= 1 and (v["target"]["counters"].get("ops") or 0) > 0


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu", "neuron"])
def test_the_bundled_example_verifies(tmp_path, target):
    final = verify(EXAMPLE, target, tmp_path / "out")
    assert final["outcome"] == "verified", final["verification"]["reason"]
