"""MkDocs hook (mkdocs.yml ``hooks:``): pages that live elsewhere in the repository join
the documentation site at build time instead of being copied into ``docs/``.

Each rule's documentation is ``tools/catalogue/docs/<CODE>.md``, the text that
``torchport rules CODE`` prints; the site shows the same text at ``rules/<CODE>.md``,
read through the catalogue's own loader, so a rule added with ``scripts/new_rule.py``
appears without touching ``docs/``; the page adds one generated line, what the fix may
change, from ``tools/catalogue/applicability.toml``. ``rules/all.md`` lists them by
category, made from the same data as ``torchport rules``. ``DEVELOPERS.md`` stays at the
repository's root, where developers look for it, and is the site's ``developers.md``. The
README is the site's home page, its links into ``docs/`` made relative to the site.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from torchport.tools.catalogue import CATEGORIES, TARGETS, FixKind, Rule, load_catalogue
from torchport.tools.catalogue.applicability import of
from torchport.tools.catalogue.doc_sections import fix_changes_line, with_fix_changes

ROOT = Path(__file__).resolve().parents[1]
ALL_RULES = "rules/all.md"
# A list item at the margin, and one two spaces in (a nested item).
ITEM = re.compile(r"^(?:[-*+]|[0-9]+\.) ")
# A link's target in the README, and the root files that are pages of the site.
README_LINK = re.compile(r"\]\(([^)\s]+)\)")
SITE_NAMES = {"DEVELOPERS.md": "developers.md"}
NESTED_ITEM = re.compile(r"^  (?:[-*+]|[0-9]+\.) ")


def _cell(text: str) -> str:
    """A table cell: a pipe outside a code span would end the cell (Python-Markdown's
    tables keep the pipes of a code span, and would show a backslash there)."""
    parts = re.split(r"(`+[^`]*`+)", text)
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


def python_markdown_lists(markdown: str) -> str:
    """The rule docs write lists as GitHub and a terminal read them: nested two spaces
    deep, an item's second paragraph two spaces in, and sometimes a list straight after a
    paragraph's last line. Python-Markdown nests only at four spaces and starts a list
    only after a blank line, so it would flatten the nesting, end the item before its
    second paragraph and run the list into the paragraph. Nested items and second
    paragraphs move two spaces in; a list item that follows a paragraph (or a second
    paragraph) gets the blank line before it."""
    lines: list[str] = []
    fenced = nested = in_item = blank_in_item = inner_paragraph = False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            lines.append(line)
            continue
        if line.strip() and not line.startswith(" "):
            if ITEM.match(line) and inner_paragraph:
                lines.append("")  # else it would read as that paragraph's lazy continuation
            in_item, blank_in_item, inner_paragraph = bool(ITEM.match(line)), False, False
        elif not line.strip():
            blank_in_item = in_item
        elif blank_in_item and not NESTED_ITEM.match(line):
            inner_paragraph = True
        if NESTED_ITEM.match(line):
            nested = True
        elif line.strip() and not line.startswith("    "):
            nested = False
        previous = lines[-1] if lines else ""
        after_text = previous.strip() and not previous.startswith((" ", "#"))
        if ITEM.match(line) and after_text and not ITEM.match(previous):
            lines.append("")
        inner = nested or (inner_paragraph and line.startswith("  "))
        lines.append("  " + line if inner and line.strip() else line)
    return "\n".join(lines)


def _fix_kinds(rule: Rule) -> str:
    """Each target's fix kind, targets that agree merged (``all: auto``, or
    ``tpu, neuron: auto; xla, accelerator: manual``), as ``torchport scan`` shows them."""
    by_kind: dict[str, list[str]] = {}
    for target in TARGETS:
        by_kind.setdefault(rule.fixes[target].kind.value, []).append(target)
    if len(by_kind) == 1:
        return f"all: {next(iter(by_kind))}"
    return "; ".join(f"{', '.join(targets)}: {kind}" for kind, targets in by_kind.items())


def fix_changes(rule: Rule) -> str:
    """The page's generated ``What the fix may change`` line: what applicability.toml
    declares for each target whose fix (in code, or in text) is automatic, the targets
    ``torchport migrate`` edits."""
    fixes = [rule.fixes, rule.text_fixes]
    auto = [t for t in TARGETS if any(f.get(t) and f[t].kind == FixKind.AUTO for f in fixes)]
    if not auto:
        return ""
    declared = {t: of(rule.code, t) for t in auto}
    return fix_changes_line(
        {t: d.applicability.value for t, d in declared.items()}, declared[auto[0]].why
    )


def rule_page(rule: Rule) -> str:
    """A rule's page: its doc, with the generated line on what its fix may change."""
    return python_markdown_lists(with_fix_changes(rule.doc, fix_changes(rule)))


def _row(rule: Rule) -> str:
    cells = (f"[{rule.code}]({rule.code}.md)", _cell(rule.title), rule.severity.value)
    return "| " + " | ".join((*cells, _fix_kinds(rule))) + " |"


def all_rules_page(rules: list[Rule]) -> str:
    """The generated index: every rule, by category, with its fix kind per target."""
    lines = [
        "# All rules",
        "",
        f"{len(rules)} rules, generated from `tools/catalogue/` when the site is built "
        "(`torchport rules` prints the same list). The fix kinds, per target: `auto` a "
        "codemod, `llm` for the LLM, `manual` for a person, `none` when the target needs "
        "nothing. Each code links to its page, which is what `torchport rules CODE` prints.",
    ]
    header = "| rule | title | severity | fix per target |"
    rule_line = "|---|---|---|---|"
    for category in CATEGORIES:
        members = [r for r in rules if r.category == category]
        if not members:
            continue
        lines += ["", f"## {category}", "", header, rule_line]
        lines += [_row(r) for r in members]
    return "\n".join(lines) + "\n"


def readme_as_home(readme: str) -> str:
    """The README links to pages as ``docs/PAGE.md`` (from the repository's root, as GitHub
    reads it); from the site's root the same page is ``PAGE.md``. Any other link is left
    as it is, so strict mode fails on one the site cannot follow."""

    def relink(match: re.Match[str]) -> str:
        target = match.group(1)
        target = SITE_NAMES.get(target, target.removeprefix("docs/"))
        return f"]({target})"

    return README_LINK.sub(relink, readme)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the rule pages, their index, DEVELOPERS.md and the README (as the home page)."""
    rules = list(load_catalogue())
    for rule in rules:
        files.append(File.generated(config, f"rules/{rule.code}.md", content=rule_page(rule)))
    files.append(File.generated(config, ALL_RULES, content=all_rules_page(rules)))
    developers = (ROOT / "DEVELOPERS.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "developers.md", content=developers))
    home = readme_as_home((ROOT / "README.md").read_text(encoding="utf-8"))
    files.append(File.generated(config, "index.md", content=home))
    return files
