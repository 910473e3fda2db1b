"""A batch's ``index.html``: each repository's verdict, linked to its own report page.

Links are relative (``reports/NAME/torchport-report/index.html``), so the batch folder can be
moved or copied whole and still works from ``file://``. Names, refs and reasons come from
the list and from the programs: escaped text, as on the repositories' own pages.
"""

from __future__ import annotations

import html
from typing import Any

from ...safetext import uri_path
from .code import visible, visible_name
from .style import VERDICT_COLOURS, document_head

COLUMNS = ("repository", "verdict", "constructs", "converted", "manual", "time", "reason")


def _row(r: dict[str, Any]) -> str:
    name = f"{r['name']} @ {r['ref']}" if r.get("ref") else str(r["name"])
    shown = html.escape(visible_name(name))
    if r.get("report"):
        href = html.escape(uri_path(f"{r['report']}/index.html"))
        shown = f'<a href="{href}">{shown}</a>'
    verdict = str(r.get("verdict"))
    kind = verdict if verdict in VERDICT_COLOURS else "other"
    cells = [
        shown,
        f'<span class="badge v-{kind}">{html.escape(verdict)}</span>',
        str(r.get("constructs") or 0),
        str(r.get("converted") or 0),
        str(r.get("manual_items") or 0),
        f"{r.get('time_s') or 0:.1f} s",
        html.escape(visible(str(r.get("reason") or ""))),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def batch_index(summary: dict[str, Any]) -> str:
    """The page of ``agents.batch.summary.summarize``'s data."""
    s, t = summary["settings"], summary["totals"]
    verdicts = ", ".join(f"{n} {v}" for v, n in t["verdicts"].items())
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    rows = "\n".join(_row(r) for r in summary["repos"])
    target = html.escape(str(s.get("target")))
    return (
        document_head(f"torchport batch: {t['repositories']} repositories to {target}")
        + f"<h1>torchport batch: {t['repositories']} repositories to {target}</h1>\n"
        + f"<p>verdicts: {html.escape(verdicts)}; {t['constructs']} constructs found, "
        + f"{t['converted']} converted automatically, {t['manual_items']} left for a human</p>\n"
        + f"<table><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table>\n"
        + "</body></html>\n"
    )
