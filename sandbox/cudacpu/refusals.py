"""What the CPU runner refuses (the table is ``unsupported.toml``) and how it says so."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

TABLE = Path(__file__).with_name("unsupported.toml")
DYNAMIC_PARALLELISM = "dynamic parallelism"


@dataclass(frozen=True)
class Family:
    name: str
    why: str
    pattern: re.Pattern[str] | None
    headers: tuple[str, ...] = ()
    device_only: bool = False


@dataclass(frozen=True)
class Refusal:
    """One construct the runner cannot run, where it is."""

    family: str
    construct: str
    file: str
    line: int
    function: str | None  # None: outside any function (the build cannot go on)
    why: str

    def message(self) -> str:
        where = f"{self.function} uses" if self.function else "the file uses"
        return (
            f"{self.file}:{self.line}: {where} {self.construct} ({self.family}), which "
            f"torchport's CPU runner for CUDA kernels cannot run: {self.why}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "family": self.family,
            "construct": self.construct,
            "file": self.file,
            "line": self.line,
            "function": self.function,
        }


class Refused(RuntimeError):
    """The extension cannot be built for the CPU runner at all: a refused construct
    outside every function (the message names each, with its file and line)."""

    def __init__(self, refusals: list[Refusal]) -> None:
        self.refusals = refusals
        super().__init__("; ".join(r.message() for r in refusals))


@cache
def families() -> tuple[Family, ...]:
    """The table, compiled."""
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    return tuple(
        Family(
            name=entry["name"],
            why=entry["why"],
            pattern=re.compile(entry["pattern"]) if entry.get("pattern") else None,
            headers=tuple(entry.get("headers", ())),
            device_only=bool(entry.get("device_only", False)),
        )
        for entry in data["family"]
    )


def family(name: str) -> Family:
    """The table's entry called ``name``."""
    return next(f for f in families() if f.name == name)


def header_family(include: str) -> Family | None:
    """The refused library an ``#include`` path belongs to, if any."""
    for f in families():
        if any(include == h or include.startswith(h) for h in f.headers):
            return f
    return None
