"""Prompt templates, one per agent role, versioned with the code (see load())."""

from __future__ import annotations

from importlib import resources


def load(role: str) -> str:
    """The prompt template ``<role>.md`` shipped next to this module.

    Read through importlib.resources so it works the same from a checkout, an
    editable install and a wheel.
    """
    if not role.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"not a prompt role name: {role!r}")
    resource = resources.files(__package__).joinpath(f"{role}.md")
    if not resource.is_file():
        raise FileNotFoundError(f"no prompt template for role {role!r} ({role}.md)")
    return resource.read_text(encoding="utf-8")
