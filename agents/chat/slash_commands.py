"""The chat session's slash commands, as data: one row a command, read by the parser,
``/help`` and the LLM's prompt alike, so a new command is one row and one graph node."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str
    needs_llm: bool = False  # hidden from /help, and refused by the parser, without an LLM


COMMANDS: tuple[Command, ...] = (
    Command("scan", "/scan", "list the CUDA constructs found for the target"),
    Command("plan", "/plan", "how the program will be run, what is automatic, what is manual"),
    Command("migrate", "/migrate", "propose the migration (nothing is written to the repo)"),
    Command("diff", "/diff [FILE]", "show the proposed changes, numbered (all files, or one)"),
    Command(
        "explain",
        "/explain CODE|N|FILE:LINE",
        "what a rule does (TPD001), why change N / the change at FILE:LINE was made, or "
        "why the construct at FILE:LINE is left for you",
    ),
    Command(
        "verify",
        "/verify [--steps N] [--timeout S] [--memory MIB] [CMD|auto]",
        "run the original and the proposal on the emulated device; options and CMD (how "
        "the program runs, as --entry; auto: the planner's choice) stay for later /verify",
    ),
    Command(
        "edit",
        "/edit FILE:LINE[-END] WHAT",
        "ask the LLM to change those lines (numbered as on disk) as you say (a proposal)",
        needs_llm=True,
    ),
    Command(
        "fix",
        "/fix",
        "ask the LLM to repair what the last /verify found (a proposal)",
        needs_llm=True,
    ),
    Command("apply", "/apply", "write the proposal into the repository (asks for approval first)"),
    Command(
        "undo",
        "/undo N|CODE|FILE|all",
        "take back change N, every change a rule made, a file's changes, or all",
    ),
    Command("redo", "/redo N|CODE|FILE|all", "put undone changes back"),
    Command("target", "/target [T]", "show or switch the target (tpu, neuron, xla, accelerator)"),
    Command(
        "report",
        "/report",
        "the session so far: changes, verdict, what is left for you; also as a page "
        "(index.html, opened in a browser where there is a display)",
    ),
    Command("help", "/help", "this list"),
    Command("quit", "/quit", "leave; the session is saved and can be resumed"),
)
BY_NAME = {c.name: c for c in COMMANDS}
ALIASES = {"exit": "quit", "q": "quit", "?": "help", "show": "diff"}
NEEDS_LLM = "/{name} needs an LLM: start a session with --llm local or --llm URL"


def hidden(has_llm: bool) -> frozenset[str]:
    """The commands a session without an LLM does not offer."""
    return frozenset() if has_llm else frozenset(c.name for c in COMMANDS if c.needs_llm)


def parse(line: str, hide: Collection[str] = ()) -> dict[str, str]:
    """``/name arg`` -> {"name", "arg"}; plain words -> {"name": "ask", "text"}.

    An unknown slash command parses to ``help`` with an error to show; a ``hide``-den one
    (it needs an LLM the session lacks) to ``none`` with the error saying so. Form feeds
    (Ctrl-L where no line editor took it) are blank space like any other.
    """
    text = line.strip()
    if not text.startswith("/"):
        return {"name": "ask", "arg": "", "text": text}
    head, _, arg = text[1:].partition(" ")
    name = ALIASES.get(head.lower(), head.lower())
    if name not in BY_NAME:
        return {"name": "help", "arg": "", "error": f"unknown command /{head}"}
    if name in hide:
        return {"name": "none", "arg": "", "error": NEEDS_LLM.format(name=name)}
    return {"name": name, "arg": arg.strip()}


def help_rows(hide: Collection[str] = ()) -> list[list[str]]:
    return [[c.usage, c.help] for c in COMMANDS if c.name not in hide]
