"""Every default of a run has one home: the front doors, the verifier and the sandbox's
specs read it there, so changing it in that place changes it everywhere."""

from __future__ import annotations

import dataclasses

import pytest
from torchport.agents import defaults, verifier
from torchport.cli.main import _build_parser
from torchport.sandbox import limits
from torchport.sandbox.harness import RunSpec

# What each settings key is called on the command line.
OPTION_OF = {
    "steps": "steps",
    "timeout_s": "timeout",
    "memory_mb": "memory",
    "isolation": "isolation",
    "max_iterations": "max_iterations",
    "max_llm_tokens": "max_llm_tokens",
}


# The settings a front door does not take on its command line (chat's loop is the
# conversation: no rounds or token budget of its own). Any other option must be there, so
# a renamed or dropped flag fails here instead of passing unchecked.
NOT_ON = {"migrate": set(), "batch": set(), "chat": {"max_iterations", "max_llm_tokens"}}


@pytest.mark.parametrize(
    "argv",
    [["migrate", "repo", "-t", "tpu"], ["batch", "repo", "-t", "tpu", "-o", "out"], ["chat", "."]],
)
def test_a_front_door_defaults_to_the_settings_defaults(argv: list[str]) -> None:
    args = _build_parser().parse_args(argv)
    taken = {key: option for key, option in OPTION_OF.items() if key not in NOT_ON[argv[0]]}
    missing = [option for option in taken.values() if not hasattr(args, option)]
    assert missing == [], f"{argv[0]} lost its option(s) {missing}"
    for key, option in taken.items():
        assert getattr(args, option) == defaults.DEFAULTS[key], (argv[0], option)
    for key in NOT_ON[argv[0]]:  # a setting listed as absent that has appeared: list it again
        assert not hasattr(args, OPTION_OF[key]), (argv[0], key)
    assert args.devices == limits.DEFAULT_DEVICES


def test_the_verifier_runs_with_the_settings_defaults() -> None:
    limits_of_run = verifier.budget_of({})
    assert limits_of_run.steps == limits_of_run.forwards == defaults.VERIFY_STEPS
    for key in ("timeout_s", "memory_mb", "isolation"):
        assert getattr(limits_of_run, key) == defaults.DEFAULTS[key]
    assert limits_of_run.devices == limits.DEFAULT_DEVICES


def test_a_run_on_its_own_takes_more_steps_than_a_verification() -> None:
    """``torchport run`` and a library RunSpec: RUN_STEPS; both runs of a verification,
    every repair round: VERIFY_STEPS."""
    spec = {f.name: f.default for f in dataclasses.fields(RunSpec)}
    assert spec["steps"] == spec["forwards"] == limits.RUN_STEPS > defaults.VERIFY_STEPS
    args = _build_parser().parse_args(["run", "--", "python", "train.py"])
    assert args.steps == limits.RUN_STEPS
    assert (args.timeout, args.memory, args.isolation, args.devices) == (
        spec["timeout_s"],
        spec["memory_mb"],
        spec["isolation"],
        spec["devices"],
    )
