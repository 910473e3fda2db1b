"""Argument lowering that respects the program: its parser's choices, a refusal at run
time, and the user's --keep-args (``sandbox.commandline``, ``sandbox.program_options``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from torchport.sandbox.commandline import Rewrite, refused, rewrite
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.program_options import entry_file, program_options

# The pattern: a size option whose parser takes only some values, one whose range lives in a
# ``type`` function the static reading cannot see, and the usual epochs.
PARSER = """\
import argparse
from opts import add_data_options

def at_least_16(text):
    value = int(text)
    if value < 16:
        raise argparse.ArgumentTypeError(f"must be at least 16, not {value}")
    return value

parser = argparse.ArgumentParser()
parser.add_argument("--img-size", "-s", type=int, default=224, choices=[224, 384])
parser.add_argument("--crop-size", type=int, choices=(32, 224, 384))
parser.add_argument("--epochs", type=int, default=300)
parser.add_argument("--batch-size", type=at_least_16, default=256)
add_data_options(parser)
args = parser.parse_args()
print("ran with", args.img_size, args.crop_size, args.epochs, args.batch_size, args.workers)
"""
OPTS = """\
def add_data_options(parser):
    parser.add_argument("--workers", type=int, choices=range(4, 9))
"""


def _program(tmp_path: Path) -> Path:
    root = tmp_path / "prog"
    root.mkdir()
    (root / "train.py").write_text(PARSER)
    (root / "opts.py").write_text(OPTS)
    return root


def test_the_parser_is_read_from_the_entry_script_and_its_own_imports(tmp_path):
    root = _program(tmp_path)
    options = program_options(root, entry_file(root, ["train.py", "--epochs", "3"]))
    assert options["--img-size"] is options["-s"]
    assert options["--img-size"].choices == ("224", "384")
    assert options["--img-size"].where == "train.py:11"
    assert options["--workers"].choices == tuple(str(n) for n in range(4, 9))  # from opts.py
    assert options["--batch-size"].type == "at_least_16" and options["--epochs"].choices is None


def test_a_lowered_value_stays_among_the_options_choices(tmp_path):
    root = _program(tmp_path)
    options = program_options(root, root / "train.py")
    args = ["--img-size", "224", "--crop-size=224", "--epochs", "300", "--workers", "8"]
    fitted = rewrite(args, root, options=options)
    # 64 is no choice of --img-size and none is below 224: left; --crop-size takes 32
    assert fitted.args == ["--img-size", "224", "--crop-size=32", "--epochs", "1", "--workers", "4"]
    assert [(k.argument, k.before, k.after) for k in fitted.kept] == [("--img-size", "224", "64")]
    assert "not among the option's choices (224, 384) at train.py:11" in fitted.kept[0].why
    crop = fitted.rewrites[0]
    assert (crop.argument, crop.after) == ("--crop-size", "32")
    assert "do not include 64" in crop.why
    # the lowered values are ones the real parser takes
    done = subprocess.run(
        [sys.executable, "train.py", *fitted.args], cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_without_lowering_the_command_stays_as_given(tmp_path):
    root = _program(tmp_path)
    args = ["--epochs", "300", "--batch-size", "256", "--gpus", "8"]
    fitted = rewrite(args, root, options=program_options(root, root / "train.py"), lower=False)
    # ranks are still capped at the devices the run has: that is not a shortening
    assert fitted.args == ["--epochs", "300", "--batch-size", "256", "--gpus", "2"]
    assert not fitted.lowered and not fitted.kept


def test_a_refusal_names_the_lowered_options_argparse_refused(tmp_path):
    root = _program(tmp_path)
    done = subprocess.run(
        [sys.executable, "train.py", "--batch-size", "8", "--epochs", "1"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    lowered = [Rewrite("--batch-size", "256", "8", "batch size"), Rewrite("--epochs", "3", "1", "")]
    found = refused(done.returncode, done.stderr, lowered)
    assert list(found) == ["--batch-size"]
    assert "must be at least 16, not 8" in found["--batch-size"]
    assert refused(1, done.stderr, lowered) == {}  # not argparse's exit status


@pytest.mark.slow
def test_a_run_the_program_refuses_is_repeated_with_the_value_as_given(tmp_path):
    root = _program(tmp_path)
    command = ["python", "train.py", "--img-size", "384", "--batch-size", "256", "--epochs", "9"]
    result = run(RunSpec(root=root, command=command, steps=1, timeout_s=120))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "ran with 224 None 1 256 None" in result.stdout_tail  # 224: the choice below 384
    rewrites = [(r["argument"], r["after"]) for r in result.command_rewrites]
    assert rewrites == [("--img-size", "224"), ("--epochs", "1")]
    kept = {k["argument"]: k for k in result.command_kept}
    assert list(kept) == ["--batch-size"]
    assert "the program refused 8" in kept["--batch-size"]["why"]
    assert "run again with 256 as given" in kept["--batch-size"]["why"]
    kept_off = run(RunSpec(root=root, command=command, steps=1, timeout_s=120, lower_args=False))
    assert "ran with 384 None 9 256 None" in kept_off.stdout_tail
    assert kept_off.command_rewrites == [] and kept_off.command_kept == []


@pytest.mark.parametrize(
    ("file", "flags", "lowered"),
    [("", [], True), ("keep-args = true\n", [], False), ("", ["--keep-args"], False)],
)
def test_keep_args_from_the_flag_or_the_projects_file_reaches_the_runs(
    tmp_path, file, flags, lowered
):
    from torchport.agents.verifier import budget_of
    from torchport.cli import migrate
    from torchport.cli.main import _build_parser
    from torchport.cli.options import apply_project_config

    root = _program(tmp_path)
    (root / "torchport.toml").write_text(file)
    args = _build_parser().parse_args(["migrate", str(root), "-t", "tpu", *flags])
    apply_project_config(args, root)
    assert budget_of(migrate._settings(args)).lower_args is lowered
    run_args = _build_parser().parse_args(["run", *flags, "--", "python", "train.py"])
    assert run_args.keep_args is bool(flags)  # run reads no project file: the flag only


def test_the_report_lists_each_lowered_argument_and_each_left_as_given():
    from torchport.agents.data_notes import data_notes

    run_record = {
        "command_rewrites": [
            {"argument": "--crop-size", "before": "224", "after": "32", "why": "image size"}
        ],
        "command_kept": [
            {"argument": "--batch-size", "before": "256", "after": "8", "why": "refused"}
        ],
    }
    lines = data_notes(run_record)
    assert "--crop-size 224 -> 32 (image size)" in lines[0]
    assert lines[1] == "arguments NOT lowered (run as given): --batch-size 256 (not 8: refused)"
