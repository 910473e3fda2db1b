#!/usr/bin/env python3
"""Scaffold a catalogue rule, in the spirit of ruff's ``scripts/add_rule.py``.

A rule lives in four places that must agree: its TOML table
(``tools/catalogue/data/<category>.toml``), its doc page
(``tools/catalogue/docs/<CODE>.md``), its codemod per ``auto`` target (registered
in a ``tools/codemods`` module) and, when it has one, a golden input
(``tests/fixtures/golden/<CODE>.py``). Writing them by hand is where they drift
apart; this writes all four consistently, with TODOs where a human must decide,
so that the catalogue loads and the codemod registry agrees with it at once.

    python scripts/new_rule.py TPD900 device "`torch.cuda.foo()` calls" \\
        --targets tpu,neuron --fix auto --ref torch.cuda.foo

Then replace the TODOs, and run ``python tests/golden.py`` for the golden outputs.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter
from pathlib import Path

from torchport.tools.catalogue import (
    CATEGORIES,
    TARGETS,
    CatalogueError,
    FixKind,
    load_catalogue_from,
)

ROOT = Path(__file__).resolve().parents[1]
CODE = re.compile(r"TP[A-Z]\d{3}")
CATALOGUE = Path("tools/catalogue")
CODEMODS = Path("tools/codemods")
GOLDEN = Path("tests/fixtures/golden")
APPLICABILITY = CATALOGUE / "applicability.toml"
REGISTERED = re.compile(r"""@fixer\(\s*["'](TP[A-Z]\d{3})["']""")
# what a fixer stub uses from its module: the house import of base.fixer, and the types
STUB_NAMES = ("fixer", "FixContext", "NotApplicable", "cst")


class ScaffoldError(Exception):
    """The rule cannot be scaffolded as asked; nothing has been written."""


def slug(title: str) -> str:
    """A rule name from its title: ``"`torch.cuda.foo()` calls"`` -> ``torch-cuda-foo-calls``."""
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))


def category_file(root: Path, category: str) -> Path:
    return root / CATALOGUE / "data" / f"{category.replace('-', '_')}.toml"


def codemod_module(root: Path, category: str) -> Path:
    """The codemods module that already holds most fixers of ``category``'s rules: read
    from the registrations in the source, so no table of modules is kept by hand."""
    catalogue = load_catalogue_from(root / CATALOGUE)
    votes: Counter[Path] = Counter()
    for path in sorted((root / CODEMODS).glob("*.py")):
        for code in REGISTERED.findall(path.read_text(encoding="utf-8")):
            rule = catalogue.by_code.get(code)
            if rule is not None and rule.category == category:
                votes[path] += 1
    if not votes:
        raise ScaffoldError(f"no codemods module holds a {category} fixer yet: pass --module")
    return votes.most_common(1)[0][0]


def _module_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
    return names


def toml_table(args: argparse.Namespace, name: str) -> str:
    q = json.dumps  # a JSON string is a valid TOML basic string
    fix = {"all": "manual: TODO what a human does"}
    fix.update({t: f"{args.fix}: TODO what the {args.fix} fix does" for t in args.targets})
    if set(args.targets) == set(TARGETS):
        fix = {"all": fix[args.targets[0]]}
    refs = ", ".join(q(r) for r in args.ref)
    return (
        "\n[[rule]]\n"
        f"code = {q(args.code)}\n"
        f"name = {q(name)}\n"
        f"title = {q(args.title)}\n"
        f"category = {q(args.category)}\n"
        f"severity = {q(args.severity)}\n"
        f"message = {q(args.message or 'TODO: what breaks on the target, in one line')}\n"
        f"match = {{ ref = [{refs}], called = true }}\n"
        f"fix = {{ {', '.join(f'{k} = {q(v)}' for k, v in fix.items())} }}\n"
    )


def doc_page(args: argparse.Namespace, name: str) -> str:
    kinds = {t: (args.fix if t in args.targets else "manual") for t in TARGETS}
    why = "\n".join(f"- **{t}**: TODO." for t in TARGETS)
    how = "\n".join(f"- **{t}** ({kinds[t]}): TODO." for t in TARGETS)
    call = f"{args.ref[0]}()"
    return (
        f"# {args.code} {name}: {args.title}\n\n"
        f"## What it finds\nCalls of {', '.join(f'`{r}`' for r in args.ref)}. TODO.\n\n"
        f"## Why it breaks\n{why}\n\n"
        f"## How it is fixed\n{how}\n\n"
        "## Example\n"
        f"```python\n# before (CUDA)\nresult = {call}\n```\n"
        f"```python\n# after ({args.targets[0]})\nTODO\n```\n"
    )


def fixer_stub(args: argparse.Namespace) -> str:
    chosen = ", ".join(f'"{t}"' for t in sorted(args.targets))
    targets = "" if set(args.targets) == set(TARGETS) else f", {{{chosen}}}"
    return (
        f'\n\n@fixer("{args.code}"{targets})\n'
        f"def fix_{args.code.lower()}(node: cst.CSTNode, ctx: FixContext):\n"
        f'    """{args.code}: TODO say why the target needs this form (cite its source:\n'
        '    sandbox/data/torch_tpu.toml, or the target\'s documentation)."""\n'
        f'    raise NotApplicable("{args.code}: the codemod is not written yet")\n'
    )


def applicability_stub(args: argparse.Namespace) -> str:
    """What the new fix may change: "behaviour" until its author says otherwise, so a new
    fix is never taken for safe by ``--safe-only`` before someone has read it."""
    return (
        f"\n[{args.code}]\n"
        'applicability = "behaviour"  # TODO: safe, numerics or behaviour (the header says)\n'
        'why = "TODO: what applying the fix changes in what the program computes or does"\n'
    )


def golden_input(args: argparse.Namespace) -> str:
    module = args.ref[0].rsplit(".", 1)[0]
    return f"import {module.split('.')[0]}\n\nresult = {args.ref[0]}()\n"


def plan(root: Path, args: argparse.Namespace) -> dict[Path, tuple[str, bool]]:
    """Every file to write, as (text, append?); raises before anything is written."""
    if not CODE.fullmatch(args.code):
        raise ScaffoldError(f"{args.code!r} is not a rule code (TP, a letter, three digits)")
    if args.category not in CATEGORIES:
        raise ScaffoldError(f"unknown category {args.category!r}; one of {', '.join(CATEGORIES)}")
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown or not args.targets:
        raise ScaffoldError(f"unknown target(s) {unknown}; from {', '.join(TARGETS)}")
    catalogue = load_catalogue_from(root / CATALOGUE)
    name = args.name or slug(args.title)
    if not name:
        raise ScaffoldError("the title gives no name: pass --name")
    doc = root / CATALOGUE / "docs" / f"{args.code}.md"
    golden = root / GOLDEN / f"{args.code}.py"
    if args.code in catalogue.by_code or doc.exists() or golden.exists():
        raise ScaffoldError(f"{args.code} exists already")
    if name in catalogue.by_name:
        raise ScaffoldError(f"the name {name!r} is {catalogue.by_name[name].code}'s: pass --name")
    files = {
        category_file(root, args.category): (toml_table(args, name), True),
        doc: (doc_page(args, name), False),
    }
    if args.fix == FixKind.AUTO:
        module = root / CODEMODS / f"{args.module}.py" if args.module else None
        module = module or codemod_module(root, args.category)
        if not module.is_file():
            raise ScaffoldError(f"no codemods module {module.name}: name one of {CODEMODS}/*.py")
        missing = [n for n in STUB_NAMES if n not in _module_names(module.read_text())]
        if missing:
            raise ScaffoldError(f"{module.name} does not import {missing}: pass another --module")
        files[module] = (fixer_stub(args), True)
        files[golden] = (golden_input(args), False)
        files[root / APPLICABILITY] = (applicability_stub(args), True)
    return files


def scaffold(root: Path, args: argparse.Namespace) -> list[Path]:
    """Write the rule's files under ``root``, then load the catalogue again to prove it."""
    files = plan(root, args)
    before = {path: path.read_bytes() if append else None for path, (_, append) in files.items()}
    for path, (text, append) in files.items():
        with path.open("a" if append else "x", encoding="utf-8") as out:
            out.write(text)
    try:
        load_catalogue_from(root / CATALOGUE)
    except CatalogueError as exc:  # the arguments made a table the loader refuses: undo
        for path, old in before.items():
            if old is None:
                path.unlink()
            else:
                path.write_bytes(old)
        raise ScaffoldError(f"the catalogue would not load: {exc}") from exc
    return list(files)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("code", help="new rule code, e.g. TPD900")
    p.add_argument("category", help=", ".join(CATEGORIES))
    p.add_argument("title", help="one line, Markdown allowed")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets")
    p.add_argument("--fix", default="manual", choices=[k.value for k in FixKind])
    p.add_argument("--ref", action="append", help="qualified name the rule matches (repeat)")
    p.add_argument("--name", help="kebab-case name (default: from the title)")
    p.add_argument("--severity", default="warning", choices=["error", "warning", "info"])
    p.add_argument("--message", help="one-line finding message")
    p.add_argument("--module", help="codemods module for the fixer stub (default: by category)")
    p.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.ref = args.ref or [f"torch.cuda.{(args.name or slug(args.title)).replace('-', '_')}"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        written = scaffold(args.root, args)
    except ScaffoldError as exc:
        print(f"new_rule: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path.relative_to(args.root))
    print("next: replace the TODOs, then `python tests/golden.py` and read its diff")
    return 0


if __name__ == "__main__":
    sys.exit(main())
