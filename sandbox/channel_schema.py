"""The shape of what a run may report on the results channel, checked on the host.

A program in the sandbox can put anything on the channel, so the host takes a report's
fields only in the shapes torchport's own launcher sends: a field in another shape makes
the process's result a failure that names the field, instead of reaching the verifier,
the diagnosis or a report writer that would trip over it. Kept as a table: a new field of
the report is one line here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeGuard

# JSON nested deeper than this, or with more items, is not something torchport sent.
MAX_DEPTH = 12
MAX_ITEMS = 2_000_000


def _json(value: Any, depth: int = 0, budget: list[int] | None = None) -> bool:
    """Plain JSON (str keys), bounded in depth and size."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        return False
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, list):
        return all(_json(v, depth + 1, budget) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json(v, depth + 1, budget) for k, v in value.items())
    return False


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v) and _json(v)


def _dict_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: (
        isinstance(v, dict) and all(isinstance(k, str) and check(x) for k, x in v.items())
    )


def _error(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and isinstance(v.get("type"), str)
        and isinstance(v.get("message"), str)
        and (v.get("frame") is None or (isinstance(v["frame"], dict) and _json(v["frame"])))
        and _json(v)
    )


def _interpreters(v: Any) -> bool:
    """Each entry's ``kernels`` is a name -> count table (data_notes reads it so)."""
    return _list_of(lambda e: isinstance(e, dict) and _optional(_dict_of(_int))(e.get("kernels")))(
        v
    )


_dicts = _list_of(lambda e: isinstance(e, dict))

# field of an end report -> the shape it must have
END_FIELDS: dict[str, Callable[[Any], bool]] = {
    "mode": lambda v: isinstance(v, str),
    "program": _list_of(lambda e: isinstance(e, str)),
    "status": lambda v: v in ("ok", "failed"),
    "exit_code": _optional(_int),
    "error": _optional(_error),
    "stopped": _optional(lambda v: isinstance(v, str)),
    "clock": _dict_of(_optional(_num)),
    "rank": _optional(_int),
    "pid": _int,
    "elapsed_s": _num,
    "ended_at": _num,
    # the emulator's counters (a table) or the shim's intercepted calls (a list of them)
    "counters": lambda v: isinstance(v, dict | list) and _json(v),
    "synthetic_data": _dicts,
    "standin_modules": _list_of(lambda e: isinstance(e, str)),
    "network": _list_of(lambda e: isinstance(e, str)),
    "reference_standins": _list_of(lambda e: isinstance(e, str)),
    "reference_interpreters": _interpreters,
    "cuda_kernel_runner": _dicts,
    "kernel_site_calls": _dicts,
    "site_check": lambda v: isinstance(v, dict) and _json(v),
    "module_trace": lambda v: isinstance(v, dict) and _json(v),
}
# The numbers travel as their own messages, the moment they are recorded; a report's own
# copy of them is not read.
STREAMED = ("losses", "steps", "forwards", "outputs")


def check_end(value: Any) -> tuple[dict[str, Any], str | None]:
    """(the report's known fields, None) or ({}, what is wrong with it)."""
    if not isinstance(value, dict):
        return {}, "reported its end in a malformed message"
    if "status" not in value:
        return {}, "reported its end without a status"
    out = {}
    for name, item in value.items():
        if name in STREAMED or name not in END_FIELDS:
            continue
        if not END_FIELDS[name](item):
            return {}, f"reported a malformed {name!r}"
        out[name] = item
    return out, None


SUMMARY_FIELDS = ("mean", "std", "abs_max")


def check_summary(value: Any) -> dict[str, Any] | None:
    """An output's summary (``budget.summarize``) in its own shape, or None."""
    if not isinstance(value, dict):
        return None
    shape = value.get("shape")
    if not (isinstance(shape, list) and len(shape) <= 16 and all(_int(d) for d in shape)):
        return None
    numbers = {k: float(v) for k in SUMMARY_FIELDS if _num(v := value.get(k))}
    if len(numbers) != len(SUMMARY_FIELDS):
        return None
    return {
        "shape": shape,
        **{k: v if math.isfinite(v) else math.nan for k, v in numbers.items()},
    }
