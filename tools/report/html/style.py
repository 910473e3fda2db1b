"""The page's look and its policy, as data: one stylesheet, inlined in every page."""

from __future__ import annotations

from functools import cache

# Nothing may be fetched: styles are inline, images are data: URIs, there is no script.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

VERDICT_COLOURS = {  # background of the verdict badge
    "verified": "#1a7f37",
    "ran": "#9a6700",
    "failed": "#cf222e",
    "not-runnable": "#6e7781",
}

BASE_CSS = """
:root { --line: #d0d7de; --muted: #57606a; }
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; padding: 1em 2em;
       max-width: 1600px; color: #1f2328; }
h1 { font-size: 1.6em; margin: .2em 0; } h2 { border-bottom: 1px solid var(--line); }
code, pre, .code { font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; } th, td { border: 1px solid var(--line);
       padding: 2px 6px; vertical-align: top; }
nav a { margin-right: 1em; }
.verdict { font-size: 1.15em; padding: .6em .8em; border: 1px solid var(--line);
           border-radius: 6px; background: #f6f8fa; }
.v-other { background: #6e7781; }
.badge { color: #fff; border-radius: 4px; padding: .1em .5em; font-weight: 600; }
.rule { font: 12px ui-monospace, monospace; background: #ddf4ff; border-radius: 3px;
        padding: 0 3px; margin-right: 2px; text-decoration: none; }
.llm { background: #fbefff; } .supporting { color: var(--muted); font-size: 12px; }
.diff { table-layout: fixed; width: 100%; margin-bottom: 1.5em; }
.diff td { border: none; padding: 0 6px; }
.diff td.n { width: 3.5em; text-align: right; color: var(--muted); user-select: none;
             border-right: 1px solid var(--line); }
.diff td.code { white-space: pre-wrap; word-break: break-all; }
.diff col.n { width: 3.5em; } .diff col.r { width: 9em; }
.diff tr.chg td.left.code, .diff tr.chg td.left.n { background: #ffebe9; }
.diff tr.chg td.right.code, .diff tr.chg td.right.n { background: #dafbe1; }
.diff tr.skip td { color: var(--muted); background: #f6f8fa; font-style: italic; }
.diff tr.note td { background: #fff8c5; border: 1px solid #d4a72c; padding: 3px 8px;
                   white-space: normal; }
.diff caption { text-align: left; font: 600 14px ui-monospace, monospace; padding: 4px;
                background: #f6f8fa; border: 1px solid var(--line); }
.notes li { margin: .2em 0; }
.ruledoc { border: 1px solid var(--line); border-radius: 6px; padding: 0 1em;
           margin-bottom: 1em; }
.ruledoc h1 { font-size: 1.2em; } .ruledoc h2 { font-size: 1.05em; border: none; }
img.plot { max-width: 100%; border: 1px solid var(--line); }
"""


@cache
def stylesheet() -> str:
    """The page's CSS: ours and Pygments' token colours (classes under ``.code``)."""
    from pygments.formatters import HtmlFormatter

    badges = "".join(f".v-{k} {{ background: {c}; }}\n" for k, c in VERDICT_COLOURS.items())
    return BASE_CSS + badges + HtmlFormatter(style="default").get_style_defs(".code")


def document_head(title: str) -> str:
    """The document up to ``<body>``: the policy, the stylesheet and ``title`` (escaped
    HTML), and an empty icon, so the browser does not ask the disk for a favicon."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f'<link rel="icon" href="data:,">\n<title>{title}</title>\n'
        f"<style>{stylesheet()}</style>\n</head>\n<body>\n"
    )
