"""TPD026: a user-facing option named after CUDA gains an accelerator-named option string
with the old one kept as an alias and the same ``dest`` (issue 31). The ported parser is
run: both spellings set the attribute the program reads, and ``--help`` shows the new one."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan

PROGRAM = """\
import argparse


def build_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true", help="disables CUDA training")
    parser.add_argument("-no_cuda_eval", action="store_true")
    parser.add_argument("-use_cuda", type=int, default=1)
    group = parser.add_argument_group("device")
    group.add_argument(
        "--cuda",
        action="store_true",
    )
    parser.add_argument("--gpu", dest="cuda_device", type=int, default=0)
    parser.add_argument("--cuda-graphs", action="store_true")
    return parser
"""
WORD = {"tpu": "TPU", "neuron": "Neuron", "xla": "XLA", "accelerator": "accelerator"}


def migrate(tmp_path: Path, source: str, target: str):
    path = tmp_path / "prog.py"
    path.write_text(source, encoding="utf-8")
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    return migrate_python(source, findings, target, path.name)


def parser_of(source: str):
    namespace: dict = {}
    exec(compile(source, "prog.py", "exec"), namespace)  # the port's own parser
    return namespace["build_parser"]()


@pytest.mark.parametrize("target", TARGETS)
def test_both_spellings_set_the_attribute_the_program_reads(tmp_path, target):
    out = migrate(tmp_path, PROGRAM, target).source
    assert '"--no-accel", "--no-cuda", dest="no_cuda", action=' in out
    assert f'help="disables {WORD[target]} training"' in out
    assert '"--cuda-graphs"' in out and "--accel-graphs" not in out  # not a name made of cuda
    parser = parser_of(out)
    for argv in (["--no-cuda"], ["--no-accel"]):
        assert parser.parse_args(argv).no_cuda is True
    assert parser.parse_args([]).no_cuda is False
    assert parser.parse_args(["--accel"]).cuda is True and parser.parse_args(["--cuda"]).cuda
    assert parser.parse_args(["-use_accel", "0"]).use_cuda == 0
    assert parser.parse_args(["-use_cuda", "0"]).use_cuda == 0
    assert parser.parse_args(["-no_cuda_eval"]).no_cuda_eval  # not a name made of cuda: kept
    assert parser.parse_args(["--gpu", "1"]).cuda_device == 1
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    assert "--no-accel, --no-cuda" in help_text.getvalue()


@pytest.mark.parametrize("target", TARGETS)
def test_a_second_migration_changes_nothing(tmp_path, target):
    once = migrate(tmp_path, PROGRAM, target).source
    again = migrate(tmp_path, once, target)
    assert again.source == once and not again.edits


def test_a_dest_named_cuda_is_an_attribute_not_a_device(tmp_path):
    """``dest="cuda"`` names ``args.cuda``: renaming it as a device string broke the
    program's own ``args.cuda``."""
    source = (
        "import argparse\n\n"
        "parser = argparse.ArgumentParser()\n"
        'parser.add_argument("--gpu", dest="cuda", action="store_true")\n'
        "args = parser.parse_args([])\nprint(args.cuda)\n"
    )
    result = migrate(tmp_path, source, "tpu")
    assert result.source == source and not result.edits


def test_an_option_the_program_already_has_is_not_added_twice(tmp_path):
    """``--cuda`` beside the program's own ``--accel``: a second ``--accel`` would make
    argparse raise "conflicting option string" when the port builds its parser."""
    source = PROGRAM.replace(
        '    parser.add_argument("--gpu"',
        '    parser.add_argument("--accel", action="store_true")\n    parser.add_argument("--gpu"',
    )
    out = migrate(tmp_path, source, "tpu").source
    assert out.count('"--accel"') == 1
    assert '"--no-accel", "--no-cuda", dest="no_cuda"' in out  # the others still gain theirs
    parser = parser_of(out)
    assert parser.parse_args(["--cuda", "--accel"]).cuda is True
