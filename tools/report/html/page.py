"""The report page: what it holds (``ReportPage``, plain data a front door fills in) and
how it is laid out: the verdict and its reason first, then the front door's leading
sections (the run's facts, the sandbox and settings), the changes side by side with what
is left for a human, the remaining sections (plots, environment, timing, ...), and the
documentation of every rule the page cites."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ...catalogue import load_catalogue
from ..hunks import Change
from .code import visible, visible_name
from .diff_view import file_view, note_html
from .safe_markdown import markdown_html
from .style import VERDICT_COLOURS, document_head


@dataclass(frozen=True)
class Note:
    """Something left for a human at a line of the port (``line``, 1-based)."""

    path: str
    line: int
    rule: str
    kind: str  # "left for you" or "performance advisory"
    text: str


@dataclass(frozen=True)
class Section:
    """A part of the page: Markdown from a report writer that escapes what it quotes."""

    anchor: str  # the page's own id
    title: str
    markdown: str


@dataclass
class ReportPage:
    title: str  # the repository's folder name
    target: str
    verdict: str
    reason: str
    lead: list[Section] = field(default_factory=list)  # shown before the changes
    before: dict[str, str] = field(default_factory=dict)  # path -> original text
    after: dict[str, str] = field(default_factory=dict)  # path -> the port's text
    hunks: list[Change] = field(default_factory=list)  # tools.report.hunks.split
    notes: list[Note] = field(default_factory=list)
    changes_intro: str = ""  # Markdown: the counts
    sections: list[Section] = field(default_factory=list)  # shown after the changes
    images: dict[str, bytes] = field(default_factory=dict)  # name in the Markdown -> PNG


def _header(page: ReportPage, anchors: list[tuple[str, str]]) -> str:
    kind = page.verdict if page.verdict in VERDICT_COLOURS else "other"
    nav = "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in anchors)
    return (
        f"<header><h1>torchport: {html.escape(visible_name(page.title))} to "
        f"{html.escape(page.target)}</h1>\n"
        f'<p class="verdict" id="verdict"><span class="badge v-{kind}">'
        f"{html.escape(page.verdict)}</span> {html.escape(visible(page.reason))}</p>\n"
        f"<nav>{nav}</nav></header>\n"
    )


def _section(section: Section, images: dict[str, bytes]) -> str:
    body = markdown_html(section.markdown, images)
    title = html.escape(section.title)
    return f'<section id="{section.anchor}"><h2>{title}</h2>\n{body}</section>\n'


def _changes(page: ReportPage, documented: dict[str, Any]) -> str:
    paths = sorted(set(page.after) | {n.path for n in page.notes if n.path in page.before})
    index = {path: k for k, path in enumerate(paths, 1)}
    out = ['<section id="changes"><h2>Changes</h2>', markdown_html(page.changes_intro)]
    if page.notes:
        out.append('<h3 id="manual">Left for a human</h3><ul class="notes">')
        for n in page.notes:
            where = html.escape(visible_name(f"{n.path}:{n.line}"))
            if n.path in index:
                where = f'<a href="#f{index[n.path]}-R{n.line}">{where}</a>'
            out.append(f"<li>{where} {note_html(n, documented)}</li>")
        out.append("</ul>")
    for path in paths:
        texts = (page.before.get(path, ""), page.after.get(path, page.before.get(path, "")))
        hunks = [h for h in page.hunks if h["path"] == path]
        notes = [n for n in page.notes if n.path == path]
        out.append(file_view(index[path], path, texts, hunks, notes, documented))
    return "\n".join([*out, "</section>\n"])


def _rule_docs(codes: list[str], documented: dict[str, Any]) -> str:
    out = ['<section id="rules"><h2>Rules cited</h2>']
    for code in codes:
        rule = documented[code]
        doc = rule.doc or f"# {code} {rule.title}\n\n{rule.message}\n"
        out.append(f'<article class="ruledoc" id="rule-{code}">{markdown_html(doc)}</article>')
    return "\n".join([*out, "</section>\n"])


def render_page(page: ReportPage) -> str:
    """The page as one HTML document (UTF-8 text)."""
    catalogue = load_catalogue().by_code
    cited = {c for h in page.hunks for c in h.get("rules") or []} | {n.rule for n in page.notes}
    codes = sorted(c for c in cited if c in catalogue)
    documented = {c: catalogue[c] for c in codes}
    anchors = [(s.anchor, s.title) for s in page.lead] + [("changes", "Changes")]
    anchors += [(s.anchor, s.title) for s in page.sections] + [("rules", "Rules")] * bool(codes)
    title = html.escape(visible_name(f"torchport report: {page.title} to {page.target}"))
    parts = [document_head(title), _header(page, anchors), "<main>\n"]
    parts += [_section(s, page.images) for s in page.lead]
    parts.append(_changes(page, documented))
    parts += [_section(s, page.images) for s in page.sections]
    if codes:
        parts.append(_rule_docs(codes, documented))
    return "".join([*parts, "</main>\n</body></html>\n"])
