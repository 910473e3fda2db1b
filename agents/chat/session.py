"""A chat session as a langgraph graph: listen -> command node -> listen, until /quit.

Waiting for the person is a langgraph ``interrupt`` (in ``listen``, and in
``apply`` for the approval), so the whole session -- proposal, undone changes,
verdict -- is checkpointed in SQLite after every command and a killed terminal
resumes where it stopped (``torchport chat --resume ID``). Nodes speak through
langgraph's custom stream (``emit``): the driver renders those events as they
come, which is how a long verification shows its progress. Nothing is written
to the repository except by ``apply``, after the person said yes.
"""

from __future__ import annotations

from collections.abc import Callable

from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from .. import config_record
from ..llm.factory import LLMSetupError
from . import proposal, views
from .events import emit
from .slash_commands import BY_NAME, hidden, parse
from .state import ChatRuntime, ChatState

Node = Callable[[ChatState, ChatRuntime], ChatState]  # a node returns its update
# One node a command (commands.COMMANDS), each a function of (state, chat runtime).
NODES: dict[str, Node] = {
    "scan": views.scan_node,
    "plan": views.plan_node,
    "migrate": proposal.migrate_node,
    "diff": views.diff_node,
    "explain": views.explain,
    "verify": proposal.verify,
    "fix": proposal.fix,
    "edit": proposal.edit,
    "apply": proposal.apply,
    "undo": proposal.undo,
    "redo": proposal.redo,
    "target": proposal.target,
    "report": views.report,
    "help": views.help_node,
    "quit": views.quit_node,
}
assert set(NODES) == set(BY_NAME), "every command in commands.COMMANDS needs a node"


def greet(state: ChatState, chat: ChatRuntime) -> ChatState:
    """The banner of a new session; a resumed one has printed its own (``greeted``)."""
    if state.get("greeted"):
        return {}
    n = len(state.get("changes") or [])
    emit(
        "text",
        f"torchport chat: {state['source']} -> {state['target']} (session "
        f"{state['session_id']}; {n} changes proposed). Type /help for commands.",
    )
    # which torchport.toml or [tool.torchport] applies, and where each setting came from
    emit("text", config_record.summary((state.get("budget") or {}).get(config_record.KEY)))
    return {"greeted": True}


def listen(state: ChatState, chat: ChatRuntime) -> ChatState:
    line = interrupt({"kind": "input"})
    command = parse(str(line), hidden(chat.has_llm(state.get("llm", "none"))))
    if command["name"] == "none" and command.get("error"):
        emit("error", command["error"])
    return {"command": command}


def ask(state: ChatState, chat: ChatRuntime) -> ChatState:
    from .intent import interpret

    text = state["command"].get("text", "")
    if not text:
        return {"command": {"name": "none"}}
    client = chat.llm(state.get("llm", "none"))
    if client is None:
        emit(
            "text",
            "No LLM is configured, so plain language is not understood; slash commands "
            "work (/help). Start with --llm local or --llm URL for conversation.",
        )
        return {"command": {"name": "none"}}
    emit("progress", "asking the LLM what you mean")
    found = interpret(client, text, state)
    usage = client.usage_snapshot().to_json()
    if "command" in found:
        emit("text", f"-> {found['said']}")
        return {"command": found["command"], "llm_usage": usage}
    if "answer" in found:
        emit("text", found["answer"])
    else:
        emit("error", found["error"])
    return {"command": {"name": "none"}, "llm_usage": usage}


def build(runtime: ChatRuntime) -> StateGraph:
    """The session graph, uncompiled; it needs a checkpointer (interrupts do)."""

    # Callable[..., ...]: langgraph's node protocols bound their state to TypedDictLike, a
    # protocol mypy does not see a TypedDict class satisfy (graph._bound does the same).
    def bind(node: Node) -> Callable[..., ChatState]:
        def run(state: ChatState) -> ChatState:
            try:
                return node(state, runtime)
            except (GraphBubbleUp, LLMSetupError):
                raise  # an interrupt (langgraph's own), or a model that cannot start
            except Exception as exc:  # one failing command never ends the session
                emit("error", f"that command failed: {type(exc).__name__}: {exc}")
                return {}

        run.__name__ = node.__name__
        return run

    def dispatch(state: ChatState) -> str:
        name = (state.get("command") or {}).get("name", "none")
        return name if name in NODES or name == "ask" else "listen"

    g = StateGraph(ChatState)
    for name, node in {"greet": greet, "listen": listen, "ask": ask, **NODES}.items():
        g.add_node(name, bind(node))
        if name in NODES and name != "quit":
            g.add_edge(name, "listen")
    g.add_edge(START, "greet")
    g.add_edge("greet", "listen")
    g.add_conditional_edges("listen", dispatch, [*NODES, "ask", "listen"])
    g.add_conditional_edges("ask", dispatch, [*NODES, "listen"])
    g.add_edge("quit", END)
    return g
