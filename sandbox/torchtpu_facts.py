"""What the torch-tpu wheel says about TorchTPU, as data (``sandbox/data/torch_tpu.toml``).

The wheel is the authority on what the emulated ``tpu`` device accepts and refuses; the
emulator, the rule catalogue's ``tpu`` fixes and the codemods read these facts instead of
restating them, and ``tests/test_torchtpu_conformance.py`` derives them again from the wheel.
Stdlib only: the sandbox's launcher and the host's tools both load it before torch.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FACTS_FILE = Path(__file__).parent / "data" / "torch_tpu.toml"


@dataclass(frozen=True)
class InternalApi:
    """A ``torch.tpu`` device API TorchTPU refuses from user code on torch >= ``since``."""

    name: str
    since: tuple[int, ...]
    prefer: str

    def internal_on(self, torch_version: str) -> bool:
        """Whether TorchTPU refuses this API under ``torch_version`` ("2.13.0+cpu")."""
        return version_tuple(torch_version) >= self.since


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``: TorchTPU compares torch's numeric release only."""
    numbers = []
    for part in version.split("+", 1)[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


@functools.cache
def facts() -> dict[str, Any]:
    """The whole table, parsed once."""
    return tomllib.loads(FACTS_FILE.read_text(encoding="utf-8"))


def internal_apis() -> tuple[InternalApi, ...]:
    return tuple(
        InternalApi(row["name"], version_tuple(row["since_torch"]), row["prefer"])
        for row in facts()["internal"]
    )


def internal_for(torch_version: str) -> dict[str, InternalApi]:
    """The internal APIs under ``torch_version``, by name."""
    return {api.name: api for api in internal_apis() if api.internal_on(torch_version)}


def public_names(module: str = "torch.tpu") -> frozenset[str]:
    for row in facts()["public"]:
        if row["module"] == module:
            return frozenset(row["names"])
    raise KeyError(module)


def public_properties(module: str = "torch.tpu") -> frozenset[str]:
    for row in facts()["public"]:
        if row["module"] == module:
            return frozenset(row["properties"])
    raise KeyError(module)


def public_modules() -> tuple[str, ...]:
    return tuple(row["module"] for row in facts()["public"])


def section(name: str) -> dict[str, Any]:
    """One table of the facts: ``precision``, ``distributed``, ``environment``, ``autocast``,
    ``device_module``, ``wheel``."""
    return facts()[name]
