"""torchport-report/index.html, rendered from data (the browser test loads real ones):
the changes side by side with each changed line linked to its rule's documentation on the
page, what is left for a human under the line it concerns, folded unchanged lines, safe
Markdown, and the batch's index of pages."""

from __future__ import annotations

import html
import re

from html_checks import Page, assert_self_contained
from torchport.tools.report.html import Note, ReportPage, Section, batch_index, render_page
from torchport.tools.report.html.code import highlighted_lines, visible
from torchport.tools.report.html.safe_markdown import markdown_html
from torchport.tools.report.hunks import split

BEFORE = "\n".join(
    ["import torch", *(f"a{i} = {i}" for i in range(20)), "x = torch.zeros(2).cuda()", "y = x"]
)
AFTER = BEFORE.replace("x = torch.zeros(2).cuda()", 'x = torch.zeros(2).to("tpu")')
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


def _page(**changes) -> ReportPage:
    edits = [{"rule": "TPD001", "path": "train.py", "line": 22, "end_line": 22, "reason": "r"}]
    fields = dict(
        title="repo",
        target="tpu",
        verdict="failed",
        reason="RuntimeError: boom",
        lead=[Section("run", "The run", "- target: `tpu`")],
        before={"train.py": BEFORE},
        after={"train.py": AFTER},
        hunks=split({"train.py": BEFORE}, {"train.py": AFTER}, edits),
        notes=[Note("train.py", 23, "TPD013", "left for you", "queries the GPU")],
        changes_intro="1 construct",
        sections=[Section("plots", "Losses", "![the losses](losses.png)")],
        images={"losses.png": PNG},
    )
    return ReportPage(**{**fields, **changes})


def _rows(page_html: str) -> list[str]:
    return re.findall(r"<tr[ >].*?</tr>", page_html, re.S)


def test_a_changed_line_links_to_its_rules_documentation_on_the_page():
    page_html = render_page(_page())
    page = assert_self_contained(page_html)
    changed = [row for row in _rows(page_html) if 'class="chg"' in row]
    assert len(changed) == 1
    assert 'id="f1-L22"' in changed[0] and 'id="f1-R22"' in changed[0]
    assert '<a class="rule" href="#rule-TPD001">TPD001</a>' in changed[0]
    assert {"rule-TPD001", "rule-TPD013", "verdict", "changes"} <= page.ids()
    assert "torch.zeros(2).cuda()" in Page(changed[0]).text
    assert 'torch.zeros(2).to("tpu")' in Page(changed[0]).text


def test_a_note_is_shown_under_the_line_it_concerns_and_listed_first():
    page_html = render_page(_page())
    rows = _rows(page_html)
    at = next(i for i, row in enumerate(rows) if 'id="f1-R23"' in row)
    assert 'class="note"' in rows[at + 1] and "queries the GPU" in Page(rows[at + 1]).text
    assert sum('class="note"' in row for row in rows) == 1
    assert '<a href="#f1-R23">train.py:23</a>' in page_html  # the list above the files


def test_unchanged_lines_far_from_a_change_are_folded():
    text = Page(render_page(_page())).text
    assert "18 unchanged lines" in text  # lines 1-18; 19-21 are the change's context
    assert "a0 = 0" not in text and "a18 = 18" in text


def test_the_verdict_and_its_reason_come_first_and_the_plot_is_embedded():
    page_html = render_page(_page())
    body = page_html[page_html.index("<body>") :]
    assert body.index("failed") < body.index("RuntimeError: boom") < body.index('id="run"')
    assert body.index('id="run"') < body.index('id="changes"') < body.index('id="plots"')
    assert "data:image/png;base64,iVBORw0KGgo" in page_html


def test_markdown_keeps_no_html_no_foreign_image_and_no_script_link():
    rendered = markdown_html(
        "<script>alert(1)</script> ![t](http://x.example/a.png) [a](javascript:alert(1)) "
        "[b](#rules) [c](https://pytorch.org) [d](http://x.example/) [e](file:///etc/passwd) "
        "![p](losses.png)",
        {"losses.png": PNG},
    )
    page = Page(rendered)
    assert [t for t, _ in page.elements].count("img") == 1
    assert page.elements.count(("a", {})) == 1  # plain http lost its address (file: is no link)
    assert {a.get("href") for t, a in page.elements if t == "a"} == {
        None,
        "#rules",
        "https://pytorch.org",
    }
    assert "<script>alert(1)</script>" in page.text and "<script>" not in rendered


def test_highlighted_lines_show_each_line_exactly_with_controls_escaped():
    text = 'x = """a\n<b>&amp;\x1b]0;t\x07\u202e"""  # </td></tr>\n\ny = 1\n'
    lines = highlighted_lines("t.py", text)
    shown = [html.unescape(re.sub(r"<[^>]*>", "", line)) for line in lines]
    assert shown == visible(text).splitlines()
    assert all(
        Page(line).elements == [("span", {"class": c}) for c in _classes(line)] for line in lines
    )


def _classes(line: str) -> list[str]:
    return re.findall(r'<span class="([a-z0-9]+)">', line)


def test_the_batch_index_links_each_repositorys_page_relatively():
    rows = [
        {"name": "a", "ref": None, "verdict": "verified", "reason": "ok", "report": "a-tpu/r"},
        {"name": "<b>", "ref": "v1", "verdict": "failed", "reason": "<i>x</i>", "report": None},
    ]
    summary = {
        "settings": {"target": "tpu"},
        "totals": {
            "repositories": 2,
            "verdicts": {"failed": 1, "verified": 1},
            "constructs": 3,
            "converted": 2,
            "manual_items": 1,
        },
        "repos": rows,
    }
    page = assert_self_contained(batch_index(summary), links=("a-tpu/r/index.html",))
    assert "<b> @ v1" in page.text and "<i>x</i>" in page.text
    assert [a["href"] for t, a in page.elements if t == "a"] == ["a-tpu/r/index.html"]


def test_a_very_long_file_is_shown_escaped_but_uncoloured():
    from torchport.tools.report.html.code import MAX_COLOURED_LINES

    short = highlighted_lines("t.py", "x = '<b>'\n")
    long = highlighted_lines("t.py", "x = '<b>'\n" * (MAX_COLOURED_LINES + 1))
    assert "<span" in short[0] and long[0] == "x = &#x27;&lt;b&gt;&#x27;"
    assert len(long) == MAX_COLOURED_LINES + 1
