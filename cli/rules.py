"""``torchport rules``: the rule catalogue, one line a rule, or one rule's documentation."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from torchport.tools.catalogue import TARGETS, Rule, load_catalogue

from .options import EXIT_CLEAN, fail


def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "rules",
        help="list the rule catalogue, or show one rule's documentation",
        description="Without CODE: one line per rule. With CODE (e.g. TPD001 or cuda-method): "
        "the rule's full documentation and per-target fixes.",
    )
    r.add_argument("code", nargs="?", help="a rule code or name")
    r.add_argument("--category", help="only rules of this category")
    r.add_argument("--format", choices=["text", "json"], default="text")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    catalogue = load_catalogue()
    if not args.code:
        rules = [r for r in catalogue if not args.category or r.category == args.category]
        (_list_json if args.format == "json" else _list_text)(rules)
        return EXIT_CLEAN
    rule = catalogue.get(args.code)
    if rule is None:
        return fail(f"no rule {args.code!r}; `torchport rules` lists them")
    (_show_json if args.format == "json" else _show_text)(rule)
    return EXIT_CLEAN


SUMMARY = ("code", "name", "title", "category", "severity")


def _summary(rule: Rule) -> dict[str, Any]:
    """What the listing says of each rule (``torchport rules CODE --format json`` says all)."""
    data = rule.to_json()
    return {key: data[key] for key in SUMMARY}


def _show_json(rule: Rule) -> None:
    print(json.dumps(rule.to_json(), indent=2))


def _show_text(rule: Rule) -> None:
    print(rule.doc.rstrip() if rule.doc else f"{rule.code} {rule.name}: {rule.title}")
    print()
    print("Fix per target:")
    for target, fix in rule.fixes.items():
        line = f"{target:<12} {fix.kind.value:<7} {fix.hint}"
        print(textwrap.fill(line, width=100, subsequent_indent=" " * 21))


def _list_json(rules: list[Rule]) -> None:
    listed = [{**_summary(r), "fix": {t: f.kind.value for t, f in r.fixes.items()}} for r in rules]
    print(json.dumps(listed, indent=2))


def _list_text(rules: list[Rule]) -> None:
    print(f"{'code':<7} {'severity':<8} {'category':<14} {'tpu/neuron/xla/accel':<28} title")
    for r in rules:
        kinds = "/".join(r.fixes[t].kind.value for t in TARGETS)
        print(f"{r.code:<7} {r.severity.value:<8} {r.category:<14} {kinds:<28} {r.title}")
    print(f"\n{len(rules)} rules; `torchport rules CODE` shows one rule's documentation.")
