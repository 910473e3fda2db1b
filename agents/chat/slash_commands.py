"""The chat session's slash commands, as data: one row a command, read by the parser,
``/help`` and the LLM's prompt alike, so a new command is one row and one graph node."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("scan", "/scan", "list the CUDA constructs found for the target"),
    Command("plan", "/plan", "how the program will be run, what is automatic, what is manual"),
    Command("migrate", "/migrate", "propose the migration (nothing is written to the repo)"),
    Command("diff", "/diff [FILE]", "show the proposed changes, numbered (all files, or one)"),
    Command(
        "explain",
        "/explain CODE|N|FILE:LINE",
        "what a rule does (TPD001), or why change N / the change at FILE:LINE was made",
    ),
    Command("verify", "/verify", "run the original and the proposal on the emulated device"),
    Command(
        "edit",
        "/edit FILE:LINE[-END] WHAT",
        "ask the LLM to change those lines (numbered as on disk) as you say (a proposal)",
    ),
    Command("fix", "/fix", "ask the LLM to repair what the last /verify found (a proposal)"),
    Command("apply", "/apply", "write the proposal into the repository (asks for approval first)"),
    Command(
        "undo",
        "/undo N|CODE|FILE|all",
        "take back change N, every change a rule made, a file's changes, or all",
    ),
    Command("redo", "/redo N|CODE|FILE|all", "put undone changes back"),
    Command("target", "/target [T]", "show or switch the target (tpu, neuron, xla, accelerator)"),
    Command("report", "/report", "the session so far: changes, verdict, what is left for you"),
    Command("help", "/help", "this list"),
    Command("quit", "/quit", "leave; the session is saved and can be resumed"),
)
BY_NAME = {c.name: c for c in COMMANDS}
ALIASES = {"exit": "quit", "q": "quit", "?": "help", "show": "diff"}


def parse(line: str) -> dict[str, str]:
    """``/name arg`` -> {"name", "arg"}; plain words -> {"name": "ask", "text"}.

    An unknown slash command parses to ``help`` with an error to show.
    """
    text = line.strip()
    if not text.startswith("/"):
        return {"name": "ask", "arg": "", "text": text}
    head, _, arg = text[1:].partition(" ")
    name = ALIASES.get(head.lower(), head.lower())
    if name not in BY_NAME:
        return {"name": "help", "arg": "", "error": f"unknown command /{head}"}
    return {"name": name, "arg": arg.strip()}


def help_rows() -> list[list[str]]:
    return [[c.usage, c.help] for c in COMMANDS]
