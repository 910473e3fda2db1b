"""Which configuration a run used, and where each value that is not torchport's default
came from: the repository's file, a ``TORCHPORT_*`` variable, a flag, or a call.

A repository's ``torchport.toml`` (or ``[tool.torchport]``) changes what a run does, so
every front door says it was applied: migrate, batch and chat print ``summary``; MCP's
tools return the ``record``. The record travels in a run's settings (``configuration``),
so that the planner can say an entry came from the file and the verdict can say who
loosened a check (``loosening``). A later change of one value (chat's ``/verify --steps``,
an MCP call's ``steps``) is recorded with ``given``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

KEY = "configuration"  # the settings' key of the record
JOINED = " + "  # project_config joins the sources of a combined setting so


def record(config: Any) -> dict[str, Any]:
    """A ``project_config.ProjectConfig`` as a run keeps it: its file and, for each setting
    that is not the default, the value and its source."""
    return {
        "file": str(config.file) if config.file else None,
        "set": {
            name: {"value": s.value, "source": s.source}
            for name, s in config.settings.items()
            if s.source != "default"
        },
    }


def _set(settings: Mapping[str, Any]) -> dict[str, Any]:
    return (settings.get(KEY) or {}).get("set") or {}


def source_of(settings: Mapping[str, Any], name: str) -> str:
    """Where the setting ``name`` came from (``default`` when from nowhere else)."""
    return str(_set(settings).get(name, {}).get("source", "default"))


def policy_source(settings: Mapping[str, Any]) -> str:
    """Who named the tolerance policy: the last layer that gave a tolerance."""
    return source_of(settings, "tolerance").rpartition(JOINED)[2]


def numbers_source(settings: Mapping[str, Any]) -> str:
    """Who set a policy's numbers: only the repository's file can."""
    return str((settings.get(KEY) or {}).get("file") or source_of(settings, "tolerance"))


def is_file(source: str, record: Mapping[str, Any]) -> bool:
    """Whether ``source`` is the repository's configuration file."""
    return bool(record.get("file")) and source == record.get("file")


def given(settings: Mapping[str, Any], name: str, value: Any, source: str) -> dict[str, Any]:
    """``settings`` with ``name`` set to ``value`` by ``source`` (a call, a command)."""
    kept = dict(settings.get(KEY) or {"file": None, "set": {}})
    kept["set"] = {**kept.get("set", {}), name: {"value": value, "source": source}}
    return {**settings, name: value, KEY: kept}


def entry_reason(settings: Mapping[str, Any], given_here: bool = False) -> str:
    """How a plan says where its entry command came from: the repository's file, or the
    flag, variable or call that gave it (``given_here``: the call's own argument)."""
    if given_here:
        return "given with the call's entry"
    source = source_of(settings, "entry")
    if is_file(source, settings.get(KEY) or {}):
        return f"from {source}"
    return f"given with {'--entry' if source == 'default' else source}"


def shown(name: str, value: Any) -> str:
    """A setting's value on one line, as a person reads it."""
    if value is None or value == []:
        return "-"
    if isinstance(value, list):
        return ", ".join(value)
    if name == "tolerance":
        numbers = [
            f"{policy}: " + ", ".join(f"{k} {v:g}" for k, v in fields.items())
            for policy, fields in value.items()
            if policy != "policy"
        ]
        return "; ".join([value.get("policy", "auto"), *numbers])
    return str(value)


def summary(kept: Mapping[str, Any] | None) -> str:
    """One line: the configuration file applied (or none), then each value that is not the
    default, grouped by where it came from, the file first."""
    kept = kept or {}
    file = kept.get("file")
    groups: dict[str, list[str]] = {file: []} if file else {}
    for name, setting in (kept.get("set") or {}).items():
        value = shown(name, setting["value"])
        groups.setdefault(setting["source"], []).append(f"{name} {value}")
    parts = [
        f"{_label(source, file)} ({', '.join(v) or 'no settings'})" for source, v in groups.items()
    ]
    if not file:
        parts.insert(0, "no torchport.toml or [tool.torchport] in pyproject.toml")
    if not groups:
        parts.append("torchport's defaults")
    return "configuration: " + "; ".join(parts)


def _label(source: str, file: str | None) -> str:
    if source == file and Path(source).name == "pyproject.toml":
        return f"{source} [tool.torchport]"
    return source
