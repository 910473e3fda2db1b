"""The dependency overlay cache is kept under its budget, least recently used first,
and never loses an overlay a migration may be reading (tools/overlay_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path

from torchport.tools import overlay_cache
from torchport.tools.overlay_cache import IN_USE_S, evict

NOW = 1_900_000_000.0


def _overlay(envs: Path, key: str, size: int, used_s_ago: float) -> Path:
    folder = envs / key
    (folder / "prefix").mkdir(parents=True)
    (folder / "prefix" / "lib.so").write_bytes(b"x" * size)
    (folder / ".complete").write_text("")
    overlay_cache.used(folder)
    os.utime(folder / ".last-used", (NOW - used_s_ago, NOW - used_s_ago))
    return folder


def test_the_least_recently_used_go_until_the_rest_fit(tmp_path):
    old = _overlay(tmp_path, "a" * 24, 1000, IN_USE_S + 300)
    older = _overlay(tmp_path, "b" * 24, 1000, IN_USE_S + 900)
    recent = _overlay(tmp_path, "c" * 24, 1000, IN_USE_S + 10)
    assert evict(tmp_path, budget=2500, now=NOW) == [older]
    assert old.exists() and recent.exists()
    assert evict(tmp_path, budget=1500, now=NOW) == [old]
    assert evict(tmp_path, budget=5000, now=NOW) == []


def test_an_overlay_in_use_stays_over_the_budget_and_staging_is_not_touched(tmp_path):
    in_use = _overlay(tmp_path, "d" * 24, 1000, 60)
    stale = _overlay(tmp_path, "e" * 24, 1000, IN_USE_S * 2)
    staging = tmp_path / ("f" * 24 + ".123.tmp")  # another process is making it
    staging.mkdir()
    assert evict(tmp_path, budget=0, now=NOW) == [stale]
    assert in_use.exists() and staging.exists()


def test_the_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(overlay_cache.BUDGET_ENV, "0.5")
    assert overlay_cache.budget_bytes() == 512 * 1024**2
    monkeypatch.setenv(overlay_cache.BUDGET_ENV, "lots")
    assert overlay_cache.budget_bytes() == int(overlay_cache.DEFAULT_GB * 1024**3)
