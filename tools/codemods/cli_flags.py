"""Codemod for CUDA-named command-line options (TPD026).

``--no-cuda`` reads wrong on a TPU: the option gains an accelerator-named string in front
(``--no-accel``), the old one stays as an alias so scripts and READMEs that pass it keep
working, and ``dest`` is spelt out so ``args.no_cuda`` still holds the value (argparse would
otherwise name it after the new first long option).
"""

from __future__ import annotations

import re

import libcst as cst

from ..pycustom import CUDA_OPTION
from .base import FixContext, Fixed, NotApplicable, fixer, set_kwarg, string_value, with_string

CUDA_WORD = re.compile(r"\bCUDA\b")


def argparse_dest(names: list[str]) -> str:
    """The ``dest`` argparse derives: the first long option (``--x``), else the first one,
    without its dashes, ``-`` read as ``_``."""
    long = [n for n in names if n.startswith("--")]
    return (long or names)[0].lstrip("-").replace("-", "_")


@fixer("TPD026")
def accelerator_named_option(node: cst.Call, ctx: FixContext) -> Fixed:
    """``add_argument("--no-cuda", action=...)`` -> ``add_argument("--no-accel", "--no-cuda",
    dest="no_cuda", action=...)``; a plain help string's "CUDA" names the target's device."""
    strings = []
    for arg in node.args:
        value = string_value(arg.value) if arg.keyword is None and not arg.star else None
        if value is None:
            break
        strings.append((arg, value))
    if not strings:
        raise NotApplicable("the option's names are not string literals")
    names = [value for _, value in strings]
    first = next(((arg, value) for arg, value in strings if CUDA_OPTION.match(value)), None)
    if first is None:
        raise NotApplicable("no CUDA-named option string")
    first_cuda, cuda_name = first
    accel = cuda_name.replace("cuda", "accel")
    if accel in _strings_of_file(ctx):
        raise NotApplicable(f"the file already uses {accel!r}: a second one would conflict")
    new = cst.Arg(with_string(_literal(first_cuda), accel), comma=_comma(node))
    args = list(node.args)
    args.insert(args.index(first_cuda), new)
    call = node.with_changes(args=args)
    if not any(a.keyword is not None and a.keyword.value == "dest" for a in node.args):
        call = _dest_after_names(call, len(strings) + 1, argparse_dest(names), first_cuda)
    help_arg = next((a for a in call.args if a.keyword and a.keyword.value == "help"), None)
    help_text = help_arg.value if help_arg is not None else None
    text = string_value(help_text)
    if not isinstance(help_text, cst.SimpleString) or text is None:
        return call
    if CUDA_WORD.search(text) and '"' not in text and "'" not in text:
        call = set_kwarg(
            call, "help", with_string(help_text, CUDA_WORD.sub(ctx.profile.word, text))
        )
    return call


def _strings_of_file(ctx: FixContext) -> set[str]:
    """Every plain string literal of the file the option is in: a program that already
    has ``--accel`` would get argparse's "conflicting option string" from a second one."""
    root = [ctx.original, *ctx.ancestors(ctx.original)][-1]
    found: set[str] = set()

    class Strings(cst.CSTVisitor):
        def visit_SimpleString(self, string: cst.SimpleString) -> None:
            value = string.evaluated_value
            if isinstance(value, str):
                found.add(value)

    root.visit(Strings())
    return found


def _comma(call: cst.Call) -> cst.Comma:
    first = call.args[0].comma
    if isinstance(first, cst.Comma):
        return first
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _literal(arg: cst.Arg) -> cst.SimpleString:
    """The option string ``arg`` holds (``strings`` above kept only plain literals)."""
    return cst.ensure_type(arg.value, cst.SimpleString)


def _dest_after_names(call: cst.Call, count: int, dest: str, like: cst.Arg) -> cst.Call:
    """``dest=`` right after the option strings, before any other keyword (the place a
    reader looks for it), laid out as the call lays out its arguments."""
    args = list(call.args)
    value = with_string(_literal(like), dest)
    arg = cst.Arg(
        value,
        keyword=cst.Name("dest"),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
        comma=_comma(call),
    )
    if count == len(args):  # nothing after the names: the last one's comma moves over
        last = args[-1]
        arg = arg.with_changes(comma=last.comma)
        args[-1] = last.with_changes(comma=_comma(call))
    args.insert(count, arg)
    return call.with_changes(args=args)
