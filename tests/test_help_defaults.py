"""`--help` says every option's default (the parser's formatter adds it; no help string
has to remember) and which options are required."""

from __future__ import annotations

import argparse

import pytest
from torchport.cli.main import COMMANDS, _build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


MEANINGLESS = (None, False, True, [], argparse.SUPPRESS)


def test_every_command_is_checked():
    assert len(_commands()) == len(COMMANDS)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_with_a_default_says_it(name):
    parser = _commands()[name]
    shown = []
    for action in parser._actions:
        default = getattr(action.default, "value", action.default)
        if action.help == argparse.SUPPRESS or any(default is m for m in MEANINGLESS):
            continue
        if default in MEANINGLESS or not (action.option_strings or action.nargs in ("?", "*")):
            continue
        text = " ".join(parser._get_formatter()._format_action(action).split())
        assert "default" in text, (name, action.dest, text)
        shown.append(action.dest)
    assert shown or name in ("rules",), name  # most commands have defaults to say


def test_an_option_without_a_meaningful_default_says_none():
    migrate = _commands()["migrate"]
    entry = next(a for a in migrate._actions if a.dest == "entry")
    assert "default" not in migrate._get_formatter()._format_action(entry)


def test_the_built_in_default_is_what_help_says():
    text = " ".join(_commands()["migrate"].format_help().split())
    assert "(default: 5)" in text and "--tolerance auto|fp32|bf16" in text
    assert "format {text,json}, -f {text,json} default: text" in text


def test_target_says_where_it_is_required():
    batch = " ".join(_commands()["batch"].format_help().split())
    assert "batch [-h] --target {tpu,neuron,xla,accelerator} --out DIR" in batch
    assert "for every repository (required)" in batch
    migrate = " ".join(_commands()["migrate"].format_help().split())
    assert "required unless --resume: this flag, TORCHPORT_TARGET or the repository's" in migrate
    chat = " ".join(_commands()["chat"].format_help().split())
    assert "the repository's `target` setting) (default: tpu)" in chat
    scan = " ".join(_commands()["scan"].format_help().split())
    assert "(default: all targets)" in scan
