"""The repair loop: one problem, a few LLM turns of tool calls, a verified edit or nothing.

The model sees the problem and the numbered code around it, asks for tools (natively,
or as one JSON object in its answer for servers and small models without tool
calling), and we run them in the ``Workspace``. The loop is bounded by turns, tokens
and wall time; it ends "edited" only when the model finished with edits and the
verifier (when given) passed; any other ending puts the files back as they were.
Everything sent to the model, and the transcript kept, has secrets masked.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from torchport.prompts import load as load_prompt

from ...tools.targets import profiles
from ..defaults import MAX_TURNS
from .client import LLMClient, LLMError, Reply
from .config import NO_KEY
from .toolbox import EDIT_TOOLS, EditRecord, Workspace, describe_tools, tool_schemas, verifier_text

CONTEXT_LINES = 5
PROTOCOLS = ("tools", "span")
SPAN_LINES = 3  # code lines shown either side of the span in the span protocol
SPAN_CONTEXT_CHARS = 800
MAX_PROBLEM_CHARS = 1000
MAX_CONTEXT_CHARS = 3000
# A kernel request's context is the kernel's source and how it is called: read from its
# start (a traceback matters at its end, a kernel from its first line).
MAX_KERNEL_CONTEXT_CHARS = 8000

# what the model is told of each target: its profile's llm_note (tools/data/targets.toml)
TARGET_NOTES: dict[str, str] = {name: p.llm_note for name, p in profiles().items()}

# Names of environment variables whose values are secrets, and shapes of well-known tokens.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL", re.IGNORECASE)
SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
)
MASK = "[REDACTED]"
MIN_SECRET_CHARS = 6  # shorter values ("1", "true") would mask ordinary code

REFUSAL = re.compile(
    r"\b(I\s*(?:can(?:no|')t|cannot|won't|will not|am unable|'m unable|am not able)"
    r"|I'm sorry|I am sorry|unable to (?:help|assist|comply))",
    re.IGNORECASE,
)
FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
LINE_NUMBER = re.compile(r"^\s*\d+\| ?")


@dataclass
class RepairRequest:
    # "construct" (a catalogue finding marked llm/manual) | "failure" (verifier) |
    # "instruction" (a person's request in a chat session, for these lines) |
    # "kernel" (a custom kernel's call site, with the kernel's source: agents.kernel_lane)
    kind: str
    target: str  # tpu | neuron | xla | accelerator
    path: str  # workspace-relative file
    start_line: int
    end_line: int  # the span to look at
    problem: str  # rule message or error "Type: message"
    context: str = ""  # traceback tail, the rule's doc, hints


@dataclass
class RepairResult:
    status: str  # "edited" | "no-change" | "refused" | "gave-up" | "error"
    edits: list[EditRecord]  # the edits in effect (none unless "edited")
    summary: str
    turns: int
    usage: dict
    transcript: list[dict]
    error: str | None = None
    verify_calls: int = 0
    rolled_back: list[str] = field(default_factory=list)  # files put back as they were

    def to_json(self) -> dict:
        data = dict(self.__dict__)
        data["edits"] = [e.to_json() for e in self.edits]
        return data


class Redactor:
    """Masks secret values (from the environment and the client) and token-shaped strings."""

    def __init__(self, env: Mapping[str, str], extra: Collection[str] = ()) -> None:
        values = {v for k, v in env.items() if SECRET_NAME.search(k)} | set(extra)
        self.values = sorted(
            (v for v in values if v and len(v.strip()) >= MIN_SECRET_CHARS), key=len, reverse=True
        )

    def text(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, MASK)
        for pattern in SECRET_PATTERNS:
            text = pattern.sub(MASK, text)
        return text

    def data(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        return value


@dataclass
class _Action:
    name: str
    arguments: dict
    call_id: str | None = None  # set for native tool calls, which need an answer each
    error: str | None = None  # could not be understood; this text goes back instead


def user_message(request: RepairRequest, workspace: Workspace) -> str:
    """The problem, the target and the numbered code around the span."""
    first = max(1, request.start_line - CONTEXT_LINES)
    code = workspace.read_file(request.path, first, request.end_line + CONTEXT_LINES)
    context = request.context.strip()
    if request.kind == "kernel":
        context = context[:MAX_KERNEL_CONTEXT_CHARS]
    elif len(context) > MAX_CONTEXT_CHARS:  # tracebacks matter at their end
        context = "..." + context[-MAX_CONTEXT_CHARS:]
    parts = [
        f"Target: {request.target} ({TARGET_NOTES.get(request.target, 'another accelerator')})",
        f"Problem ({request.kind}): {request.problem.strip()[:MAX_PROBLEM_CHARS]}",
        f"File: {request.path}, lines {request.start_line}-{request.end_line}",
    ]
    if context:
        parts.append(f"Context:\n{context}")
    parts.append(f"Code ({request.path}):\n{code}")
    return "\n".join(parts)


def span_message(request: RepairRequest, workspace: Workspace) -> str:
    """The span protocol's request: short and concrete, for a small model.

    Measured with the embedded 1.5B model: a long target description, a
    "Context:" block and file trailers made it copy the prompt's example instead
    of fixing the code; this plain layout made it fix apex/CUDA lines correctly.
    """
    numbered = workspace.read_file(
        request.path, max(1, request.start_line - SPAN_LINES), request.end_line + SPAN_LINES
    )
    code = "\n".join(line for line in numbered.splitlines() if not line.startswith("["))
    lines = (
        f"line {request.start_line}"
        if request.start_line == request.end_line
        else f"lines {request.start_line}-{request.end_line}"
    )
    context = request.context.strip()
    hint = context.removeprefix("Suggested approach:").strip() if context else ""
    parts = [f"Target: {request.target}", f"Problem: {request.problem.strip()[:MAX_PROBLEM_CHARS]}"]
    if request.kind == "kernel":
        parts.append(context[:MAX_KERNEL_CONTEXT_CHARS])
    elif hint and request.kind == "construct":
        parts.append(f"Suggested fix: {hint[:MAX_PROBLEM_CHARS]}")
    elif context:
        parts.append(f"Error details:\n{context[-SPAN_CONTEXT_CHARS:]}")
    answer = {
        "edits": [
            {"start_line": request.start_line, "end_line": request.end_line, "new_code": "..."}
        ],
        "summary": "...",
    }
    parts += [
        f"Code ({request.path}):\n{code}",
        f"\nRewrite {lines} of {request.path}. Answer with one JSON object: {json.dumps(answer)}",
    ]
    return "\n".join(parts)


def loads_object(text: str) -> dict | None:
    """The first JSON object in ``text`` (fences stripped), or None."""
    fenced = FENCE.search(text)
    candidates = [fenced.group(1)] if fenced else []
    candidates.append(text)
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for match in re.finditer(r"\{", candidate):
            try:
                value, _ = decoder.raw_decode(candidate, match.start())
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


SALVAGE = re.compile(
    r'"start_line"\s*:\s*(\d+)\s*,\s*"end_line"\s*:\s*(\d+)\s*,\s*"new_code"\s*:\s*"(.*?)"?\s*\}\s*\]',
    re.DOTALL,
)


def _salvaged_edit(content: str) -> dict | None:
    """An ``edits`` answer whose JSON is broken in the way small models break it.

    The embedded 1.5B model sometimes drops the closing quote of ``new_code``
    (``..."new_code": "x = f(y)}], "summary": ...``). When the answer still has
    the shape of one edit, take its code as written rather than waste a turn;
    the edit tool checks the code parses, so a wrong guess is refused there.
    """
    match = SALVAGE.search(content)
    if match is None:
        return None
    try:
        code = json.loads(f'"{match.group(3)}"')
    except json.JSONDecodeError:
        code = match.group(3)
    edit = {"start_line": int(match.group(1)), "end_line": int(match.group(2)), "new_code": code}
    return {"edits": [edit], "summary": "edit (answer's JSON repaired)"}


def _arguments(raw: Any) -> dict | str:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            return f"arguments are not valid JSON ({exc.msg})"
    return raw if isinstance(raw, dict) else "arguments must be a JSON object"


def _content_actions(content: str, request: RepairRequest) -> list[_Action] | str:
    """Actions from a JSON answer, or an error text for the model."""
    default_path = request.path
    obj = loads_object(content)
    if obj is None:
        obj = _salvaged_edit(content)
    if obj is not None and isinstance(obj.get("new_code"), str) and "tool" not in obj:
        # shorthand of the span protocol: the request's own lines, rewritten
        span = {"start_line": request.start_line, "end_line": request.end_line}
        obj = {"edits": [{**span, "new_code": obj["new_code"]}], "summary": obj.get("summary")}
    if obj is None:
        return (
            'answer with one JSON object: {"tool": NAME, "arguments": {...}}; '
            "no JSON object was found"
        )
    if isinstance(obj.get("edits"), list):  # shorthand: edits + summary, then finish
        if not obj["edits"]:
            return [_Action("finish", {"summary": str(obj.get("summary") or "no change")})]
        actions = []
        for edit in obj["edits"]:
            if not isinstance(edit, dict):
                return "each item of edits must be an object with start_line, end_line, new_code"
            actions.append(_Action("replace_lines", {"path": default_path, **edit}))
        # Bottom-up, so each edit's line numbers still hold when it is made.
        actions.sort(key=lambda a: _int_or(a.arguments.get("start_line")), reverse=True)
        summary = obj.get("summary") or "edited"
        return [*actions, _Action("finish", {"summary": str(summary)})]
    name = obj.get("tool") or obj.get("name") or obj.get("function")
    if not isinstance(name, str):
        return 'the JSON object needs "tool" (a tool name) and "arguments" (an object)'
    arguments = _arguments(obj.get("arguments", obj.get("parameters", {})))
    if isinstance(arguments, str):
        return arguments
    return [_Action(name, arguments)]


def _int_or(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _strip_line_numbers(code: str) -> str:
    """Drop ``   12| `` prefixes a model copied from a listing along with the code."""
    lines = code.splitlines(keepends=True)
    body = [x for x in lines if x.strip()]
    if body and all(LINE_NUMBER.match(x) for x in body):
        return "".join(LINE_NUMBER.sub("", x, count=1) for x in lines)
    return code


class _Loop:
    """One repair's conversation and bookkeeping; ``repair`` drives it turn by turn."""

    def __init__(
        self,
        request: RepairRequest,
        workspace: Workspace,
        client: LLMClient,
        verify: Callable[[], dict] | None,
        edit_paths: Collection[str] | None,
        env: Mapping[str, str] | None,
        protocol: str = "tools",
    ) -> None:
        self.request = request
        self.workspace = workspace
        self.client = client
        self.verify = verify if verify is not None else workspace.verify
        self.edit_paths = set(edit_paths) if edit_paths is not None else {request.path}
        extra = [] if client.config.api_key == NO_KEY else [client.config.api_key]
        self.redact = Redactor(os.environ if env is None else env, extra)
        self.protocol = protocol
        self.specs = workspace.specs(with_verifier=self.verify is not None)
        self.names = {s.name for s in self.specs}
        self.messages: list[dict] = []
        self.verify_calls = 0
        self.first_edit = workspace.mark()  # edits from here on are this repair's
        self.turns = 0
        self.usage_before = client.usage_snapshot()

    def open(self) -> None:
        """The system prompt for the protocol and the problem as the first user message."""
        if self.protocol == "span":
            self.send({"role": "system", "content": load_prompt("rewriter_span")})
            self.send({"role": "user", "content": span_message(self.request, self.workspace)})
            return
        system = load_prompt("rewriter").replace("{tools}", describe_tools(self.specs))
        self.send({"role": "system", "content": system})
        self.send({"role": "user", "content": user_message(self.request, self.workspace)})

    def result(self, status: str, summary: str = "", error: str | None = None) -> RepairResult:
        """The repair's outcome; anything but "edited" puts the files back first."""
        edits = self.workspace.edits[self.first_edit :]
        rolled_back: list[str] = []
        if status != "edited":
            rolled_back = self.workspace.undo()
            edits = []
        return RepairResult(
            status=status,
            edits=list(edits),
            summary=self.redact.text(summary),
            turns=self.turns,
            usage=self.client.usage.since(self.usage_before).to_json(),
            transcript=self.messages,
            error=self.redact.text(error) if error else None,
            verify_calls=self.verify_calls,
            rolled_back=rolled_back,
        )

    def send(self, message: dict) -> None:
        self.messages.append(self.redact.data(message))

    def ask(self) -> Reply:
        native = self.client.tools_supported and self.protocol == "tools"
        tools = tool_schemas(self.specs) if native else None
        return self.client.chat(self.messages, tools=tools)

    def actions(self, reply: Reply) -> list[_Action] | str:
        if reply.tool_calls:
            self.send(
                {
                    "role": "assistant",
                    "content": reply.content,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments_json},
                        }
                        for c in reply.tool_calls
                    ],
                }
            )
            out = []
            for call in reply.tool_calls:
                arguments = _arguments(call.arguments_json)
                if isinstance(arguments, str):
                    out.append(_Action(call.name, {}, call.id, arguments))
                else:
                    out.append(_Action(call.name, arguments, call.id))
            return out
        content = reply.content or ""
        self.send({"role": "assistant", "content": content})
        if not content.strip():
            return 'empty answer; answer with one JSON object: {"tool": NAME, "arguments": {...}}'
        actions = _content_actions(content, self.request)
        if isinstance(actions, str) and reply.finish_reason == "length":
            return "your answer was cut off; give a shorter one: one JSON object only"
        if isinstance(actions, str) and self.protocol == "span":
            return (
                "answer with exactly one valid JSON object: "
                '{"edits": [{"start_line": N, "end_line": M, "new_code": "..."}], '
                '"summary": "..."}'
            )
        return actions

    def run_tool(self, action: _Action) -> str:
        if action.error:
            return f"error: {action.error}"
        if action.name not in self.names:
            return (
                f"error: unknown tool {action.name!r}; available: {', '.join(sorted(self.names))}"
            )
        if action.name == "run_verifier" and self.verify is not None:  # offered only then
            self.verify_calls += 1
            passed, text = verifier_text(self.verify)
            return ("ok: " if passed else "failed: ") + text
        if action.name in EDIT_TOOLS:
            path = PurePosixPath(str(action.arguments.get("path", "")).strip()).as_posix()
            if path not in self.edit_paths:
                return (
                    f"error: only {', '.join(sorted(self.edit_paths))} may be edited for this "
                    f"problem, not {path}"
                )
            if any(MASK in str(v) for v in action.arguments.values()):
                return (
                    f"error: new code contains {MASK}; leave lines holding secrets out of the edit"
                )
            if isinstance(action.arguments.get("new_code"), str):
                action.arguments["new_code"] = _strip_line_numbers(action.arguments["new_code"])
        return self.workspace.call(action.name, action.arguments)

    def answer(self, results: list[tuple[_Action, str]], native: bool) -> None:
        if native:
            for action, text in results:
                self.send({"role": "tool", "tool_call_id": action.call_id, "content": text})
        else:
            text = "\n\n".join(f"Result of {a.name}:\n{t}" for a, t in results)
            self.send({"role": "user", "content": text})


def repair(
    request: RepairRequest,
    workspace: Workspace,
    client: LLMClient,
    *,
    verify: Callable[[], dict] | None = None,
    max_turns: int = MAX_TURNS,
    max_tokens_total: int | None = None,
    deadline_s: float | None = None,
    edit_paths: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    protocol: str = "tools",
) -> RepairResult:
    """Ask the model to fix ``request`` through tools; bounded; verified when ``verify`` is given.

    ``edit_paths``: the files edits may touch (default: only ``request.path``).
    ``env``: where secret values to mask come from (default: ``os.environ``).
    ``protocol``: "tools" (the model may read, search and edit through tools) or
    "span" (for small models: no tools offered; the model answers with the
    rewritten lines of the request's span as JSON, applied by the same AST tool).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}")
    started = time.monotonic()
    loop = _Loop(request, workspace, client, verify, edit_paths, env, protocol)
    try:
        workspace.resolve(request.path, editable=True)
    except ValueError as exc:
        return loop.result("error", error=f"cannot repair {request.path}: {exc}")
    loop.open()
    while loop.turns < max_turns:
        if deadline_s is not None and time.monotonic() - started >= deadline_s:
            return loop.result("gave-up", error=f"deadline of {deadline_s:g}s reached")
        ended = _one_turn(loop)
        if ended is not None:
            return loop.result(*ended)
        used = client.usage.since(loop.usage_before).tokens
        if max_tokens_total is not None and used >= max_tokens_total:
            error = f"token budget of {max_tokens_total} reached ({used})"
            return loop.result("gave-up", error=error)
    return loop.result("gave-up", error=f"no finished repair after {max_turns} turns")


def _one_turn(loop: _Loop) -> tuple[str, str] | tuple[str, str, str] | None:
    """Ask the model once and act on its answer: (status, summary[, error]) when the
    repair is over, else None."""
    try:
        reply = loop.ask()
    except LLMError as exc:
        return "error", "", str(exc)
    loop.turns += 1
    if reply.refusal:
        loop.send({"role": "assistant", "content": reply.refusal})
        return "refused", reply.refusal
    actions = loop.actions(reply)
    if isinstance(actions, str):
        if not reply.tool_calls and REFUSAL.search(reply.content or ""):
            return "refused", reply.content or ""
        loop.send({"role": "user", "content": f"error: {actions}"})
        return None
    return _run_turn(loop, actions, reply)


def _run_turn(loop: _Loop, actions: list[_Action], reply: Reply) -> tuple[str, str] | None:
    """Run one turn's tool calls; (status, summary) when the loop is over, else None."""
    native = bool(reply.tool_calls)
    results: list[tuple[_Action, str]] = []
    for action in actions:
        if action.name != "finish" or action.error:
            results.append((action, loop.run_tool(action)))
            continue
        failed = [a.name for a, text in results if text.startswith("error:")]
        if failed:
            results.append((action, f"finish ignored: {', '.join(failed)} failed; fix that first"))
            continue
        summary = str(action.arguments.get("summary", "")).strip()
        if len(loop.workspace.edits) == loop.first_edit:
            return "no-change", summary
        if loop.verify is None:
            return "edited", summary
        loop.verify_calls += 1
        passed, text = verifier_text(loop.verify)
        if passed:
            return "edited", summary
        results.append(
            (action, f"The verifier failed after your edits:\n{text}\nFix it, then call finish.")
        )
    loop.answer(results, native)
    return None
