"""The verifier's diagnose step: a failed run -> a known failure signature -> what fixes it.

A run of a migrated program fails in a small number of recurring ways (a CUDA call left
behind, a tensor left on the CPU, a dependency that only exists for NVIDIA GPUs, a limit
of the sandbox). Each has a recognisable error text, and most have a fix the rule
catalogue already knows as a codemod. Recognising them here keeps the loop
deterministic: only what no signature knows goes to the LLM, with the traceback and the
code; what no code change can fix (hardware, limits, emulator gaps) goes to a human
instead of burning LLM rounds.

The signatures are data (``data/signatures.toml``; its header documents the fields and
the match order). ``diagnose`` is a pure function of a run result
(``sandbox.harness.RunResult.to_json()``) and the target:

    d = diagnose(result.to_json(), "tpu")
    d.signature, d.action, d.rules, d.file, d.line   # "cuda-unavailable", "rules", ...
"""

from __future__ import annotations

import functools
import os
import re
import string
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, cast

from torchport.sandbox.exception_line import exception_start
from torchport.sandbox.launch import OWN_CODE
from torchport.tools.catalogue import TARGETS, Catalogue, FixKind, load_catalogue

if TYPE_CHECKING:
    from .state import DiagnosisRecord

__all__ = [
    "ACTIONS",
    "Diagnosis",
    "Signature",
    "SignatureError",
    "diagnose",
    "load_signatures",
    "parse_signatures",
]

Action = Literal["rules", "llm", "human", "none"]
# What a signature may ask for; "none" is only for a run that did not fail.
ACTIONS: tuple[str, ...] = ("rules", "llm", "human")
STATUSES: tuple[str, ...] = ("ok", "failed", "timeout", "killed")
UNKNOWN = "unknown"
OK = "ok"
EVIDENCE_MAX = 500
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_KEYS = {
    "id", "patterns", "status", "code", "warning", "cuda", "limitation", "cause", "hint", "rules",
    "action",
}  # fmt: skip
# A traceback line of stderr: where the failing code is when the error has no frame.
_TB_FILE = re.compile(
    r'^(?:\[[^\]\n]*\]:)?\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE
)
# The error the harness writes when a run left no result (its signature: run-crashed).
_NO_RESULT = "NoResult: "
# The harness copies the program to <tmp>/torchport-run-XXXX/program/ (sandbox.harness.run):
# paths under it are reported relative to the program, as the error frame is.
_SCRATCH = re.compile(r"^.*?/torchport-run-[^/]+/program/")


class SignatureError(ValueError):
    """The signature table is malformed; raised at load time, so a bad entry never ships."""


@dataclass(frozen=True)
class Signature:
    """One known failure: how to recognise it and what to do about it (see the TOML header)."""

    id: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    rules: tuple[str, ...]
    action: Action
    hint: str = ""
    status: tuple[str, ...] = ()
    code: re.Pattern[str] | None = None
    warning: bool = False
    cuda: bool = False
    limitation: bool = False


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong in a run and who should fix it.

    ``rules`` are catalogue codes: with action ``"rules"`` their codemods fix it (re-run
    them on ``file``/``line``); with ``"llm"`` they are context for the model.
    ``matched_in`` says which text the evidence came from (``message``, ``stderr``,
    ``status``), so a report can show it in place. ``limitation``: the cause is torchport's
    own sandbox or emulator (a tool limitation), not the port.
    """

    signature: str
    cause: str
    rules: tuple[str, ...]
    action: Action
    file: str | None
    line: int | None
    evidence: str
    hint: str = ""
    target: str = ""
    matched_in: str = ""
    limitation: bool = False

    def to_json(self) -> DiagnosisRecord:
        data = asdict(self)
        data["rules"] = list(self.rules)
        return cast("DiagnosisRecord", data)


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _compile(sig_id: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise SignatureError(f"{sig_id}: bad regex {pattern!r}: {exc}") from exc


def _parse_one(table: Mapping[str, Any], catalogue: Catalogue) -> Signature:
    sig_id = table.get("id")
    if not isinstance(sig_id, str) or not _ID.match(sig_id) or sig_id in (UNKNOWN, OK):
        raise SignatureError(f"bad or reserved signature id {sig_id!r}")
    extra = set(table) - _KEYS
    if extra:
        raise SignatureError(f"{sig_id}: unknown field(s) {sorted(extra)}")
    for key in ("cause", "rules", "action"):
        if key not in table:
            raise SignatureError(f"{sig_id}: missing {key!r}")
    patterns = tuple(_compile(sig_id, p) for p in table.get("patterns", ()))
    status = tuple(table.get("status", ()))
    if not patterns and not status:
        raise SignatureError(f"{sig_id}: neither patterns nor a status to match")
    if bad := [s for s in status if s not in STATUSES]:
        raise SignatureError(f"{sig_id}: unknown status {bad}; choose from {STATUSES}")
    if table["action"] not in ACTIONS:
        raise SignatureError(f"{sig_id}: action {table['action']!r} is not one of {ACTIONS}")
    rules = tuple(table["rules"])
    if unknown := [c for c in rules if c not in catalogue.by_code]:
        raise SignatureError(f"{sig_id}: rule(s) {unknown} are not in the catalogue")
    cause, hint = table["cause"], table.get("hint", "")
    # Every placeholder must be filled whichever pattern matched.
    for template in (cause, hint):
        for name in _fields(template) - {"target"}:
            if not patterns or any(name not in p.groupindex for p in patterns):
                raise SignatureError(f"{sig_id}: {{{name}}} is not a group of every pattern")
    code = table.get("code")
    return Signature(
        id=sig_id,
        patterns=patterns,
        cause=cause,
        rules=rules,
        action=cast(Action, table["action"]),
        hint=hint,
        status=status,
        code=_compile(sig_id, code) if code else None,
        warning=bool(table.get("warning", False)),
        cuda=bool(table.get("cuda", False)),
        limitation=bool(table.get("limitation", False)),
    )


def parse_signatures(text: str, catalogue: Catalogue | None = None) -> tuple[Signature, ...]:
    """Parse and check a signature table (TOML text), in match order."""
    catalogue = catalogue or load_catalogue()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SignatureError(f"signatures: {exc}") from exc
    table = tuple(_parse_one(t, catalogue) for t in data.get("signature", []))
    seen: set[str] = set()
    for sig in table:
        if sig.id in seen:
            raise SignatureError(f"duplicate signature id {sig.id}")
        seen.add(sig.id)
    return table


@functools.cache
def load_signatures() -> tuple[Signature, ...]:
    """The packaged table, parsed and its regexes compiled once per process."""
    text = resources.files(__package__).joinpath("data", "signatures.toml").read_text("utf-8")
    return parse_signatures(text)


def _relative(path: str) -> str:
    return _SCRATCH.sub("", path)


def _is_user_file(path: str) -> bool:
    """Not torch or another library, not torchport, not the interpreter's own files."""
    return not (
        "site-packages" in path
        or path.startswith("<")
        or path.startswith(OWN_CODE + os.sep)
        or path.startswith(os.path.join(sys.base_prefix, "lib") + os.sep)
    )


def _stderr_location(stderr: str) -> tuple[str, int] | None:
    """The innermost user frame of the last traceback in stderr."""
    frames = [m for m in _TB_FILE.finditer(stderr) if _is_user_file(m["file"])]
    if not frames:
        return None
    last = frames[-1]
    return _relative(last["file"]), int(last["line"])


def _cuda_call_location(counters: Any) -> tuple[str, int] | None:
    """The one site in the run's record of CUDA calls, if it names exactly one (several
    sites do not say which one failed). The record is a list of ``{api, file, line,
    count}``: the emulator's ``counters()["cuda_call_sites"]``, or the reference shim's
    ``intercepted()``, which is the whole of ``counters`` in a reference run."""
    if isinstance(counters, Mapping):
        counters = counters.get("cuda_call_sites")
    if not isinstance(counters, list):
        return None
    sites = {
        (_relative(str(r["file"])), r["line"])
        for r in counters
        if isinstance(r, Mapping)
        and _is_user_file(str(r.get("file") or "<unknown>"))
        and isinstance(r.get("line"), int)
        and r["line"] > 0
    }
    return next(iter(sites)) if len(sites) == 1 else None


def _frame(result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    error = result.get("error") or {}
    frame = error.get("frame") if isinstance(error, Mapping) else None
    return frame if isinstance(frame, Mapping) else None


def _locate(result: Mapping[str, Any], sig: Signature | None) -> tuple[str | None, int | None]:
    """Where to fix: the error frame; else the stderr traceback; else, for a CUDA
    signature, the run's record of CUDA calls."""
    frame = _frame(result)
    if frame and frame.get("file"):
        line = frame.get("line")
        return str(frame["file"]), int(line) if isinstance(line, int) else None
    found = _stderr_location(str(result.get("stderr_tail") or ""))
    if found is None and sig is not None and sig.cuda:
        found = _cuda_call_location(result.get("counters"))
    return found if found is not None else (None, None)


def _evidence(text: str, match: re.Match[str] | None, from_message: bool = True) -> str:
    """The whole line(s) the match is on: a regex match alone is often a fragment."""
    if match is None:  # no signature: the error's first line, or stderr's last one
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return (lines[0] if from_message else lines[-1])[:EVIDENCE_MAX] if lines else ""
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end != -1 else len(text)].strip()[:EVIDENCE_MAX]


def _code_matches(sig: Signature, result: Mapping[str, Any]) -> bool:
    if sig.code is None:
        return True
    frame = _frame(result)
    code = str(frame.get("code") or "") if frame else str(result.get("stderr_tail") or "")
    return sig.code.search(code) is not None


def _match(
    sig: Signature, text: str, result: Mapping[str, Any], failed: bool
) -> re.Match[str] | Literal[True] | None:
    """The pattern match, True when the status alone matched, or None."""
    status = str(result.get("status") or "")
    if sig.status and status not in sig.status:
        return None
    if sig.warning and failed:
        return None
    if not sig.patterns:
        return True
    for pattern in sig.patterns:
        m = pattern.search(text)
        if m is not None and _code_matches(sig, result):
            return m
    return None


def _resolve(sig: Signature, target: str, catalogue: Catalogue) -> tuple[tuple[str, ...], Action]:
    """The rules that apply to ``target`` (fix not "none"), and the action for it: "rules"
    needs one of them to have a codemod ("auto") there, else the LLM gets it."""
    rules = tuple(c for c in sig.rules if catalogue.by_code[c].fixes[target].kind != FixKind.NONE)
    action = sig.action
    if action == "rules" and not any(
        catalogue.by_code[c].fixes[target].kind == FixKind.AUTO for c in rules
    ):
        action = "llm"
    return rules, action


def _error_text(result: Mapping[str, Any]) -> str:
    error = result.get("error")
    if not isinstance(error, Mapping):
        return ""
    return f"{error.get('type') or 'Error'}: {error.get('message') or ''}"


def traceback_exception(stderr: str) -> str | None:
    """The exception line ("Type: message") of the last Python traceback in ``stderr``.

    A rank whose launcher wrote no result (killed by its peers' failure, or dying in
    torchrun's own code) still printed its traceback: that, not "a native crash", is
    what the run died of.
    """
    found = exception_start(stderr)
    if found is None:
        return None
    offset, prefix = found
    line = stderr[offset:].partition("\n")[0].removeprefix(prefix)
    return line.strip()[:EVIDENCE_MAX]


def _failure_text(result: Mapping[str, Any], stderr: str) -> tuple[str, str]:
    """The error to classify and where it came from: the run's own error, or, when the
    run left no Python error (no result), the last traceback's exception in stderr."""
    message = _error_text(result)
    if message and not message.startswith(_NO_RESULT):
        return message, "message"
    found = traceback_exception(stderr)
    return (found, "stderr") if found else (message, "message")


def diagnose(
    result: Mapping[str, Any],
    target: str,
    signatures: Sequence[Signature] | None = None,
) -> Diagnosis:
    """Classify a run result (``RunResult.to_json()``) for a migration to ``target``.

    First match wins: every signature against "Type: message", then every signature
    against ``stderr_tail``. A failure nothing matches is "unknown" (action "llm"); a run
    that did not fail and shows no warning signature is "ok" (action "none").
    """
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    table = load_signatures() if signatures is None else signatures
    catalogue = load_catalogue()
    status = str(result.get("status") or "")
    stderr = str(result.get("stderr_tail") or "")
    message, message_from = _failure_text(result, stderr)
    failed = status != "ok" or bool(message)
    for where, text in ((message_from, message), ("stderr", stderr)):
        for sig in table:
            m = _match(sig, text, result, failed)
            if m is None:
                continue
            groups = {} if m is True else {k: v or "" for k, v in m.groupdict().items()}
            rules, action = _resolve(sig, target, catalogue)
            file, line = _locate(result, sig)
            return Diagnosis(
                signature=sig.id,
                cause=sig.cause.format(**groups, target=target),
                rules=rules,
                action=action,
                file=file,
                line=line,
                evidence=_evidence(text, None if m is True else m),
                hint=sig.hint.format(**groups, target=target),
                target=target,
                matched_in="status" if m is True else where,
                limitation=sig.limitation,
            )
    file, line = _locate(result, None)
    if not failed:
        return Diagnosis(
            OK, "The run finished without an error.", (), "none", None, None, "", target=target
        )
    return Diagnosis(
        signature=UNKNOWN,
        cause="A failure no known signature matches.",
        rules=(),
        action="llm",
        file=file,
        line=line,
        evidence=_evidence(message or stderr, None, from_message=bool(message)),
        hint="Give the LLM the traceback and the code around the failing line.",
        target=target,
        matched_in=message_from if message else "stderr",
    )
