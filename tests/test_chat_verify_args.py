"""`/verify ARGS`: budget options first, then the entry command (or `auto`)."""

from __future__ import annotations

import pytest
from torchport.agents.chat.verify_args import KEEP, VerifyArgsError, parse


def test_no_arguments_keep_everything():
    asked = parse("")
    assert asked.budget == {} and asked.entry is KEEP


@pytest.mark.parametrize(
    ("arg", "budget", "entry"),
    [
        ("--steps 3", {"steps": 3}, KEEP),
        (
            "--steps=3 --timeout 90.5 --memory 512",
            {"steps": 3, "timeout_s": 90.5, "memory_mb": 512},
            KEEP,
        ),
        ("python train.py --lr 0.1", {}, "python train.py --lr 0.1"),
        ("--steps 2 python train.py --steps 9", {"steps": 2}, "python train.py --steps 9"),
        ("-- --weird-launcher x", {}, "--weird-launcher x"),  # after --, all is the command
        ("python train.py --name 'a b'", {}, "python train.py --name 'a b'"),
        ("auto", {}, None),  # the planner's choice again
        ("--steps 4 auto", {"steps": 4}, None),
    ],
)
def test_options_then_the_command(arg, budget, entry):
    asked = parse(arg)
    assert asked.budget == budget
    assert asked.entry == entry if entry is not KEEP else asked.entry is KEEP


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--steps 0", "--steps must be an integer at least 1, not '0'"),
        ("--steps x", "--steps must be an integer"),
        ("--timeout nan", "--timeout must be a number above 0"),
        ("--steps", "--steps needs a value"),
        ("--lr 0.1", "unknown option --lr; options: --steps, --timeout, --memory"),
        ("python 'train.py", "does not parse: No closing quotation"),
    ],
)
def test_a_bad_argument_says_which_and_why(arg, message):
    with pytest.raises(VerifyArgsError, match=message.replace("(", r"\(")):
        parse(arg)
