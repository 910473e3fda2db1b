"""Plain language to a slash command, by the configured LLM.

The model only ever chooses among the session's own commands (or answers in a
sentence); it never edits code or touches the repository here, so a confused
or injected reply can at worst run a read-only command or ask for approval.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from torchport.agents.llm.repair import Redactor, loads_object
from torchport.prompts import load
from torchport.tools.catalogue import load_catalogue

from .slash_commands import BY_NAME, COMMANDS, parse

MAX_CHANGES_IN_CONTEXT = 40


def context_lines(state: Mapping[str, Any]) -> str:
    """What the model needs to resolve "line 40" or "the profiler": files, changes, verdict."""
    lines = [f"repository: {os.path.basename(state.get('source', ''))}"]
    changes = state.get("changes") or []
    undone = set(state.get("undone") or [])
    if changes:
        lines.append("proposed changes (N path:line by rules):")
        for c in changes[:MAX_CHANGES_IN_CONTEXT]:
            mark = " (undone)" if c["id"] in undone else ""
            rules = ",".join(c.get("rules") or []) or "-"
            lines.append(f"  {c['id']} {c['path']}:{c['span'][0] + 1} {c['by']} {rules}{mark}")
        codes = sorted({r for c in changes for r in c.get("rules") or []})
        catalogue = load_catalogue()
        lines.append("rule codes:")
        lines += [f"  {code}: {rule.title}" for code in codes if (rule := catalogue.get(code))]
    else:
        lines.append("nothing proposed yet")
    v = state.get("verification") or {}
    if v:
        lines.append(f"last verification: {v.get('verdict')} ({v.get('reason', '')})")
    return "\n".join(lines)


def system_prompt(state: Mapping[str, Any]) -> str:
    commands = "\n".join(f"- {c.usage}: {c.help}" for c in COMMANDS)
    return load("chat").format(
        target=state.get("target", "?"), commands=commands, context=context_lines(state)
    )


def interpret(client: Any, text: str, state: Mapping[str, Any]) -> dict[str, Any]:
    """{"command": parsed command} or {"answer": text}, or {"error": why}."""
    from torchport.agents.llm.client import LLMError

    extra = [] if getattr(client.config, "local", False) else [client.config.api_key]
    redact = Redactor(os.environ, [k for k in extra if k])
    messages = [
        {"role": "system", "content": redact.text(system_prompt(state))},
        {"role": "user", "content": redact.text(text)},
    ]
    try:
        reply = client.chat(messages)
    except LLMError as exc:
        return {"error": str(exc)}
    content = reply.content or ""
    obj = loads_object(content) or {}
    command = obj.get("command")
    if isinstance(command, str) and command.strip().startswith("/"):
        parsed = parse(command)
        if parsed["name"] in BY_NAME and "error" not in parsed:
            return {"command": parsed, "said": command.strip()}
    answer = obj.get("answer") if isinstance(obj.get("answer"), str) else None
    if answer:
        return {"answer": redact.text(answer)}
    if content.strip() and not obj:
        return {"answer": redact.text(content.strip())}
    return {"error": f"the model's reply was not a command: {content.strip()[:200]!r}"}
