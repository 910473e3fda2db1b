"""``torchport chat``: the terminal loop around the session graph.

The graph decides; this module only reads lines, renders events and feeds the
person's answers back into langgraph (``Command(resume=...)``). Ctrl-C stops a
long command and leaves the session resumable; Ctrl-D at the prompt quits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchport.tools.catalogue import TARGETS

from .options import (
    BuiltIn,
    add_exclude,
    add_llm,
    add_run_budget,
    add_tolerance,
    apply_project_config,
    budget_settings,
    fail,
)

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

EXIT_OK, EXIT_INTERRUPTED, EXIT_ERROR = 0, 130, 2
PROMPT = "torchport> "

EPILOG = """\
commands inside the session (plain language works too with an LLM):
  /scan /plan /migrate /diff [FILE] /explain CODE|N|FILE:LINE /verify [ARGS]
  /apply /undo N|CODE|FILE|all /redo ... /target [T] /report /help /quit
  and, with an LLM: /edit FILE:LINE WHAT, /fix

/verify ARGS: [--steps N] [--timeout S] [--memory MIB] [CMD ...|auto]: the budget and
the command the runs use (CMD as --entry; auto: the planner's choice), kept for later
/verify, e.g. /verify --steps 3 python train.py --lr 0.1

The repository changes only at /apply, after you answer yes; the originals are
backed up first. Every command is checkpointed in $TORCHPORT_HOME/checkpoints.sqlite,
so a closed terminal loses nothing: torchport chat --resume SESSION.

examples:
  torchport chat repo/                       rules only unless an LLM is found (--llm auto)
  torchport chat repo/ --target neuron --llm local
  torchport chat repo/ --entry "python train.py --epochs 1"
  torchport chat --resume 20261130-101500-ab12cd
"""


def add_parser(sub: Any) -> None:
    c = sub.add_parser(
        "chat",
        help="port a repository in conversation: propose, inspect, undo, verify, apply",
        description="An interactive session over the agent graph. Slash commands work with "
        "or without an LLM; with one (--llm), say what you want in plain words.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("path", nargs="?", help="repository folder to port")
    c.add_argument(
        "--target",
        "-t",
        choices=TARGETS,
        default=BuiltIn("tpu"),
        help="where the code goes (or, when set, TORCHPORT_TARGET or the repository's "
        "`target` setting)",
    )
    add_llm(c, "auto", "; with --resume, the session's own unless given")
    c.set_defaults(llm=None)  # None: not given (a new session takes auto)
    c.add_argument("--resume", metavar="SESSION", help="continue a saved session")
    add_exclude(c)
    verification = c.add_argument_group("verification (/verify)")
    verification.add_argument(
        "--entry",
        metavar="CMD",
        help="how /verify runs the program, as migrate's --entry, e.g. \"python train.py "
        "--lr 0.1\" (default: the planner's choice; /verify CMD changes it in the session)",
    )
    add_run_budget(verification, deps=True)
    add_tolerance(verification)
    c.add_argument(
        "--plain", action="store_true", help="plain text even on a terminal (no colour, no boxes)"
    )
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torchport.agents import runs
    from torchport.agents.chat import session
    from torchport.agents.chat.render import renderer_for
    from torchport.agents.chat.state import ChatRuntime, new_state
    from torchport.agents.checkpoints import open_checkpointer
    from torchport.agents.llm.factory import llm_factory
    from torchport.agents.project_config import ConfigError

    renderer = renderer_for(plain=args.plain)
    _line_editor()

    def say(message: str) -> None:
        renderer.show({"kind": "progress", "text": message})

    if args.resume and args.entry:
        return fail("--entry is a new session's; in a resumed one, /verify CMD changes it")
    if args.resume:
        session_id = args.resume
    else:
        if not args.path:
            return fail("chat needs PATH (or --resume SESSION)")
        source = Path(args.path).resolve()
        if not source.is_dir():
            return fail(f"{args.path}: not a folder")
        try:  # the repository's settings; `entry` reaches args.entry where chat has --entry
            apply_project_config(args, source)
        except ConfigError as exc:
            return fail(str(exc))
        session_id = runs.new_run_id()
    config: RunnableConfig = {
        "configurable": {"thread_id": f"chat-{session_id}"},
        "recursion_limit": 200,
    }
    runtime = ChatRuntime(session_id, llm_factory(say), llm_flag=args.llm if args.resume else None)
    with open_checkpointer(runs.checkpoint_db()) as saver:
        app = session.build(runtime).compile(checkpointer=saver)
        snapshot = app.get_state(config)
        if not args.resume:
            budget = {**budget_settings(args), "skip": args.skip, "exclude": args.exclude}
            first = new_state(
                session_id, source, args.target, args.llm or "auto", budget, args.entry
            )
            return _converse(app, config, renderer, session_id, first, None)
        if not snapshot.values:
            return fail(f"no chat session {session_id!r} in {runs.checkpoint_db()}")
        v = snapshot.values
        renderer.show(
            {
                "kind": "text",
                "text": f"resuming session {session_id}: {v['source']} -> {v['target']}; "
                f"{len(v.get('changes') or [])} changes proposed, "
                f"{len(v.get('undone') or [])} undone. Type /help for commands.",
            }
        )
        # a session that ended (/quit) starts again at its greeting, which stays quiet:
        # the line above was the banner
        payload = None if snapshot.next else {"command": {"name": "none"}, "greeted": True}
        return _converse(app, config, renderer, session_id, payload, _pending(snapshot))


def _converse(
    app: Any,
    config: RunnableConfig,
    renderer: Any,
    session_id: str,
    payload: Any,
    pending: Any,
) -> int:
    """Run the graph to each question, ask it, feed the answer back, until the session ends."""
    from langgraph.types import Command
    from torchport.agents.llm.factory import LLMSetupError

    try:
        while True:
            if pending is None:
                pending = _drive(app, payload, config, renderer)
            if pending is None:
                return EXIT_OK
            payload = Command(resume=_answer(renderer, pending))
            pending = None
    except KeyboardInterrupt:
        renderer.progress_done()
        print(f"\ninterrupted; resume with: torchport chat --resume {session_id}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except LLMSetupError as exc:
        renderer.progress_done()
        return fail(f"{exc} (resume with: torchport chat --resume {session_id} --llm none)")


def _drive(app: Any, payload: Any, config: RunnableConfig, renderer: Any) -> dict | None:
    """Run the graph until it waits for the person (returns what it asks) or ends (None)."""
    from torchport.agents.checkpoints import DURABILITY

    pending = None
    modes = ["custom", "updates"]
    for mode, chunk in app.stream(payload, config, stream_mode=modes, durability=DURABILITY):
        if mode == "custom":
            renderer.show(chunk)
        elif "__interrupt__" in chunk:
            pending = chunk["__interrupt__"][0].value
    renderer.progress_done()
    return pending


def _line_editor() -> None:
    """On a terminal, lines are read with readline: editing, history within the session,
    and Ctrl-L clearing the screen (the prompt and what was typed shown again). Piped
    input needs none; a form feed that arrives there is blank space to the parser."""
    if not sys.stdin.isatty():
        return
    try:
        import readline
    except ImportError:  # a Python built without it: plain input() still works
        return
    if "libedit" not in (readline.__doc__ or ""):
        readline.parse_and_bind(r'"\C-l": clear-screen')


def _pending(snapshot: Any) -> dict | None:
    for task in snapshot.tasks:
        for item in task.interrupts:
            return item.value
    return None


def _answer(renderer: Any, pending: dict[str, Any]) -> str:
    """A line from the person; Ctrl-D quits at the prompt and says no to a question."""
    confirm = pending.get("kind") == "confirm"
    try:
        return renderer.ask(pending["question"] if confirm else PROMPT)
    except EOFError:
        print(file=sys.stderr)
        return "n" if confirm else "/quit"
