"""The tolerance policies a verification judges numbers by, and which one applies.

``data/tolerance.toml`` holds torchport's own (``fp32``, ``bf16``); a project's
``tolerance`` setting (``agents.project_config``) may change their numbers or name the one
every comparison uses. A policy is chosen from the migrated program's text alone, so the
choice is the same for every run of the same port.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from . import precision_check

_BF16 = re.compile(r"\bbfloat16\b|\bbf16\b|\bautocast\b|\bhalf\(\)|\bfloat16\b")


@dataclass(frozen=True)
class Policy:
    name: str
    rtol: float
    atol: float
    max_steps: int
    note: str = ""  # what the project's ``tolerance`` changed, said with the name
    own: str = ""  # the policy torchport itself would choose for the program (choose_policy)

    @property
    def label(self) -> str:
        """The name as verdicts say it: with the project's change, when there is one."""
        return f"{self.name} ({self.note})" if self.note else self.name


POLICY_FIELDS = {"rtol": float, "atol": float, "max_steps": int}


@cache
def policies() -> dict[str, Policy]:
    text = importlib.resources.files("torchport.agents").joinpath("data/tolerance.toml")
    data = tomllib.loads(text.read_text(encoding="utf-8"))
    return {
        name: Policy(name, **values)
        for name, values in data.items()
        if name != precision_check.DefaultPolicy.name  # (b) against (a), not the original
    }


def policies_for(tolerance: Mapping[str, Any] | None) -> dict[str, Policy]:
    """The policies under a project's ``tolerance`` setting (``agents.project_config``):
    its numbers for a policy replace the file's, and a policy it names (not ``auto``)
    is the one every comparison uses, whatever the program computes in."""
    tolerance = tolerance or {}
    chosen = {}
    for name, base in policies().items():
        numbers = {k: v for k, v in (tolerance.get(name) or {}).items() if k in POLICY_FIELDS}
        said = ", ".join(f"{k} {v:g}" for k, v in numbers.items())
        chosen[name] = replace(base, **numbers, note=f"{said} from the project" if said else "")
    forced = tolerance.get("policy", "auto")
    if forced != "auto":
        picked = chosen[forced]
        note = f"{picked.note}; " if picked.note else ""
        picked = replace(picked, note=f"{note}chosen by the project")
        chosen = dict.fromkeys(chosen, picked)
    return chosen


def choose_policy(
    migrated_sources: Iterable[str], tolerance: Mapping[str, Any] | None = None
) -> Policy:
    """bf16 when the migrated program may compute in reduced precision on the target
    (unless the project's ``tolerance`` names the policy: ``policies_for``).

    The reference shim disables CUDA autocast (as a CPU-only torch does), so an
    original that autocasts ran in fp32 while its migration autocasts on the
    emulated device: any autocast or bfloat16/float16 in the migrated program's
    files means the two runs differ by rounding, and the looser policy applies.
    """
    uses_low_precision = any(_BF16.search(text) for text in migrated_sources)
    own = "bf16" if uses_low_precision else "fp32"
    return replace(policies_for(tolerance)[own], own=own)
