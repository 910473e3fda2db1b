"""A repository of hostile file names and code, through every report and terminal output.

Issue 12, item 6: a name like ``\\x1b]0;pwned\\x07.py`` retitled the terminal, ``<img
onerror=...>.py`` and backticks in code became HTML in manual.md and summary.md,
``=HYPERLINK(1).py`` became a formula in changes.csv, and SARIF URIs were not URIs.
Each test runs the real command (or the real writer, for summaries whose inputs a test
cannot reach cheaply) and checks what a person, a CommonMark renderer (with raw HTML
enabled: what makes injected HTML dangerous), a spreadsheet or a SARIF consumer gets.

Left out: the name ``b"caf\\xe9.py"`` (not UTF-8) is only scanned here, because writing
migrate's changes.json crashes on it before any report is shown (issue 12 item 5, fixed
by another change); once migrate writes it, add it to ``MIGRATED``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote_to_bytes

import jsonschema
import pytest
from html_checks import assert_self_contained
from markdown_it import MarkdownIt
from torchport.tools.filenames import printable
from torchport.tools.safetext import terminal_text

# file name -> how a person must see it (control characters visibly escaped); no '/' in names
SHOWN = {
    "\x1b]0;pwned\x07.py": r"\x1b]0;pwned\x07.py",  # OSC 0: sets the terminal's title
    "\x1b]8;;http:x.example\x1b\\a\x1b]8;;\x1b\\.py": (  # OSC 8: a hidden hyperlink
        r"\x1b]8;;http:x.example\x1b\a\x1b]8;;\x1b\.py"
    ),
    "\x9b2J.py": r"\x9b2J.py",  # C1 CSI: clears the screen
    "\u202etxt.py": r"\u202etxt.py",  # right-to-left override (Trojan Source)
    "new\nline.py": r"new\nline.py",  # forges a line of output
    "<img src=x onerror=alert(1)>.py": "<img src=x onerror=alert(1)>.py",
    "![t](http:%2F%2Fx%2Fa.png).py": "![t](http:%2F%2Fx%2Fa.png).py",  # a tracking image
    "[x](javascript:alert(1)).py": "[x](javascript:alert(1)).py",
    "[link=https:x.example]y.py": "[link=https:x.example]y.py",  # rich markup
    "p|q.py": "p|q.py",  # ends a table cell
    "a b#c%d?.py": "a b#c%d?.py",  # not a URI as it is
    "=HYPERLINK(1).py": "=HYPERLINK(1).py",  # spreadsheet formulas
    "@SUM(1).py": "@SUM(1).py",
    "-2+3.py": "-2+3.py",
}
NOT_UTF8 = b"caf\xe9.py"
NOT_UTF8_SHOWN = r"caf\xe9.py"
MIGRATED = set(SHOWN)

# Backticks to end a code span early, HTML to run once out, control characters and a bidi
# override in comments and strings; one construct left for a human (TPD013), one converted.
CODE = "\n".join(
    [
        "import torch",
        "# ``` </code> <script>alert(1)</script> `x` ``",
        "cap = torch.cuda.get_device_capability()  # `</code>` ``<script>alert(2)</script>`` "
        "```<img src=x onerror=alert(3)>",
        "x = torch.zeros(2).cuda()  # `</code>` <img src=x onerror=alert(4)> "
        "\x1b]0;code\x07 \u202e",
        's = "`</code><script>alert(5)</script>`"',
        'q = "</textarea></title></style><!-- <a href=\'javascript:alert(6)\'>\\"x"',
        "",
        'if __name__ == "__main__":',
        "    print(cap, x, s)",
        "",
    ]
)

# What must never reach a terminal: C0 controls but newline and tab, DEL, C1, bidi controls
# and line separators, and undecodable bytes (a surrogate after decoding with
# surrogateescape).
TERMINAL_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"
)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
URI_REFERENCE = re.compile(r"(?:[A-Za-z0-9\-._~/]|%[0-9A-F]{2})+")
# The elements the reports' own Markdown makes (with GFM tables: the table's elements).
STRUCTURE = {"h1", "h2", "p", "ul", "li", "code", "strong"}
TABLES = {"table", "thead", "tbody", "tr", "th", "td"}
ALIGNMENT = {("style", "text-align:right")}
SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
ENV = {k: v for k, v in os.environ.items() if k != "TORCHPORT_LLM_BASE_URL"}


def torchport(*args: str, stdin: str = "", timeout: float = 120) -> tuple[int, str, str]:
    """The real command line; output decoded as a terminal would get it (bytes kept)."""
    done = subprocess.run(
        [sys.executable, "-m", "torchport.cli", *args],
        input=stdin.encode(),
        capture_output=True,
        timeout=timeout,
        env=ENV,
    )
    return done.returncode, _decoded(done.stdout), _decoded(done.stderr)


def _decoded(output: bytes) -> str:
    return output.decode("utf-8", "surrogateescape")


def assert_terminal_safe(text: str) -> None:
    found = sorted(set(TERMINAL_UNSAFE.findall(text)))
    assert not found, f"reached the terminal: {found!r}"


class Elements(HTMLParser):
    """Every element, attribute, comment and text node of rendered HTML."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, tuple]] = []
        self.texts: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, tuple(attrs)))

    def handle_comment(self, data):
        self.elements.append(("<!--", ()))

    def handle_decl(self, decl):
        self.elements.append(("<!", ()))

    def handle_pi(self, data):
        self.elements.append(("<?", ()))

    def handle_data(self, data):
        self.texts.append(data)


def render(markdown: str, tables: bool = False) -> str:
    """CommonMark with raw HTML on; ``tables``: GFM tables too (how the reports are read)."""
    md = MarkdownIt("commonmark", {"html": True})
    return (md.enable("table") if tables else md).render(markdown)


def assert_renders_only_its_own_structure(
    markdown: str, links: set[str] = frozenset(), images: dict[str, str] | None = None
) -> str:
    """No element but the report's own (links only to ``links``, images only the report's
    charts: ``images`` maps each file to its alt text), no cell split in two, no attacker
    text in an attribute; returns the rendered text (with GFM tables)."""
    images = images or {}
    allowed = STRUCTURE | TABLES | ({"a"} if links else set()) | ({"img"} if images else set())
    for html in (render(markdown), render(markdown, tables=True)):
        for tag, attrs in Elements(html).elements:
            assert tag in allowed, (tag, attrs)
            if tag == "a":
                assert [k for k, _ in attrs] == ["href"] and dict(attrs)["href"] in links, attrs
            elif tag == "img":
                expected = [[("src", src), ("alt", alt)] for src, alt in images.items()]
                assert list(attrs) in expected, attrs
            else:
                assert set(attrs) <= ALIGNMENT, (tag, attrs)
    html = render(markdown, tables=True)
    for table in re.findall(r"<table>(.*?)</table>", html, re.S):
        widths = {len(re.findall(r"<t[hd][ >]", row)) for row in table.split("<tr>")[1:]}
        assert len(widths) == 1, f"a table cell was split: {widths}"
    return "".join(Elements(html).texts)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "repo"
    root.mkdir()
    for name in SHOWN:
        (root / name).write_text(CODE, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def scanned(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``torchport scan`` in each format, on the repository plus a name that is not UTF-8."""
    both = tmp_path_factory.mktemp("scan") / "repo"
    shutil.copytree(repo, both)
    with open(os.path.join(os.fsencode(both), NOT_UTF8), "wb") as handle:
        handle.write(CODE.encode())
    outputs = {}
    for fmt in ("text", "markdown", "sarif", "json"):
        code, out, err = torchport("scan", str(both), "--format", fmt)
        assert code == 1 and err == "", err
        outputs[fmt] = out
    return outputs


@pytest.fixture(scope="module")
def migrated(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    out = tmp_path_factory.mktemp("migrated") / "out"
    code, stdout, stderr = torchport(
        "migrate", str(repo), "-t", "tpu", "--no-verify", "--llm", "none", "--out", str(out)
    )
    assert code == 1, stderr  # constructs are left for a human
    return stdout, stderr, out / "torchport-report"


def test_scan_text_prints_every_name_escaped_on_its_own_line(scanned):
    text = scanned["text"]
    assert_terminal_safe(text)
    lines = text.splitlines()
    for shown in [*SHOWN.values(), NOT_UTF8_SHOWN]:
        assert f"  {shown}" in lines  # the file's heading line: the name, whole, on one line
    assert "  line.py" not in lines
    assert r"# `</code>` <img src=x onerror=alert(4)> \x1b]0;code\x07 \u202e" in text


def test_scan_json_and_sarif_reach_the_terminal_escaped(scanned):
    assert_terminal_safe(scanned["json"])
    assert_terminal_safe(scanned["sarif"])
    paths = {f["path"] for f in json.loads(scanned["json"])["findings"]}
    # JSON holds no lone surrogate: a byte that is not UTF-8 is written as \\xNN
    assert paths == set(SHOWN) | {printable(os.fsdecode(NOT_UTF8))}


def test_sarif_uris_are_rfc3986_and_decode_back_to_the_files(scanned):
    log = json.loads(scanned["sarif"])
    jsonschema.validate(log, json.loads(SCHEMA.read_text()), cls=jsonschema.Draft4Validator)
    run = log["runs"][0]
    uris = {
        location["physicalLocation"]["artifactLocation"]["uri"]
        for result in run["results"]
        for location in result["locations"]
    }
    for uri in uris:
        assert URI_REFERENCE.fullmatch(uri), uri
    assert {unquote_to_bytes(uri) for uri in uris} == {os.fsencode(n) for n in SHOWN} | {NOT_UTF8}
    root = run["originalUriBaseIds"]["SRCROOT"]["uri"]
    assert root.startswith("file:///") and root.endswith("/repo/")


def test_scan_markdown_renders_no_html_link_or_image(scanned):
    text = assert_renders_only_its_own_structure(scanned["markdown"])
    for shown in [*SHOWN.values(), NOT_UTF8_SHOWN]:
        assert f"{shown}:3" in text  # each finding's location, shown as written


def test_migrate_prints_names_escaped(migrated):
    stdout, stderr, report = migrated
    assert_terminal_safe(stdout)
    assert_terminal_safe(stderr)
    assert f"report: {report}" in stdout.splitlines()


def test_manual_summary_and_verification_render_no_html_link_or_image(migrated):
    report = migrated[2]
    manual = assert_renders_only_its_own_structure((report / "manual.md").read_text())
    summary = assert_renders_only_its_own_structure((report / "summary.md").read_text())
    verification = (report / "verification.md").read_text()
    assert_renders_only_its_own_structure(verification)
    for name in MIGRATED:
        assert f"{SHOWN[name]}:3" in manual and SHOWN[name] in summary
    # the code, backticks and all, as one code span each
    snippet = (
        "cap = torch.cuda.get_device_capability()  # `</code>` ``<script>alert(2)</script>`` "
        "```<img src=x onerror=alert(3)>"
    )
    assert manual.count(snippet) == len(MIGRATED)
    for text in (manual, (report / "summary.md").read_text(), verification):
        assert_terminal_safe(text)


def test_changes_csv_cells_are_never_formulas(migrated):
    rows = list(csv.reader(io.StringIO((migrated[2] / "changes.csv").read_text())))
    assert len(rows) == 1 + len(MIGRATED)  # a header and one edit per file
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_START), row
            assert_terminal_safe(cell.replace("\n", ""))
    files = {row[1] for row in rows[1:]}
    assert {"'=HYPERLINK(1).py", "'@SUM(1).py", "'-2+3.py", "p|q.py"} <= files


def test_index_html_shows_names_and_code_as_text_and_loads_nothing(migrated):
    page = assert_self_contained((migrated[2] / "index.html").read_text())
    text = page.text
    assert_terminal_safe(text)
    captions = [t for t in page.texts if t in SHOWN.values()]
    assert sorted(captions) == sorted(SHOWN[name] for name in MIGRATED)  # a view per file
    for name in MIGRATED:
        assert f"{SHOWN[name]}:3" in text  # the construct left for a human, listed
    for line in CODE.splitlines()[1:6]:  # the hostile lines, as code, per file
        assert text.count(terminal_text(line)) >= len(MIGRATED), line


def test_index_html_escapes_the_programs_words():
    from torchport.agents.deliver import verification_sections
    from torchport.tools.report.html import Note, ReportPage, Section, render_page

    record = _hostile_record()
    parts = verification_sections(record)
    name = "<img src=x onerror=alert(1)>\n\"'</textarea>.py"
    page = ReportPage(
        title=name,
        target="tpu",
        verdict="failed",
        reason=HOSTILE,
        lead=[Section("run", "The run", "\n".join(parts["summary"]))],
        before={name: CODE},
        after={name: CODE.replace(".cuda()", '.to("tpu")')},
        hunks=[],
        notes=[Note(name, 3, "TPD013", "left for you", HOSTILE)],
        sections=[Section(k, k, "\n".join(v)) for k, v in parts.items() if k != "summary"],
    )
    shown = assert_self_contained(render_page(page))
    assert_terminal_safe(shown.text)
    escaped = r"<img src=x onerror=alert(1)> [x](javascript:alert(1)) `a` \x1b]0;t\x07\n# h"
    assert shown.text.count(escaped) >= 5  # the reason, its note, the entry's, decisions
    assert r"<img src=x onerror=alert(1)>\n" + "\"'</textarea>.py:3" in shown.text
    assert "`x</code>` ``<img src=y>.py" in shown.text and "python <script>.py" in shown.text


def test_chat_plain_shows_names_and_code_escaped(repo: Path):
    lines = ["/scan", "/migrate", "/diff", "/report", "/quit"]
    code, out, err = torchport("chat", str(repo), "--llm", "none", stdin="\n".join(lines) + "\n")
    assert code == 0, err
    assert_terminal_safe(out)
    assert_terminal_safe(err)
    for shown in SHOWN.values():
        assert f"{shown}:3" in out  # /scan's table
        assert f"@@ {shown}:4 @@" in out.splitlines()  # /diff's hunk header, one line
    assert r"<img src=x onerror=alert(4)> \x1b]0;code\x07 \u202e" in out
    assert not any(line.startswith("line.py") for line in out.splitlines())
    pages = [line.partition(": ")[2] for line in out.splitlines() if "as a page: " in line]
    page = assert_self_contained(Path(pages[-1]).read_text())  # /report's page
    assert_terminal_safe(page.text)
    for name in MIGRATED:
        assert f"{SHOWN[name]}:3" in page.text


def test_chat_on_a_terminal_prints_no_escape_sequence_or_rich_markup_of_the_repository(
    repo: Path,
):
    pexpect = pytest.importorskip(
        "pexpect", reason="pexpect drives the terminal: pip install -e .[dev]"
    )
    screen = io.BytesIO()
    env = {**ENV, "NO_COLOR": "1", "TERM": "xterm"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "torchport.cli", "chat", str(repo), "--llm", "none"],
        env=env,
        timeout=120,
        dimensions=(60, 250),
    )
    child.logfile_read = screen
    for line in ("/scan", "/migrate", "/diff", "/quit"):
        child.expect_exact(b"torchport> ")
        child.sendline(line)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    shown = screen.getvalue().decode("utf-8", "surrogateescape")
    # rich draws with CSI sequences of its own; what the repository could add is gone:
    # OSC (titles, hyperlinks, also from rich's [link=...] markup), BEL, C1, bidi controls
    assert "\x1b]" not in shown and "\x07" not in shown
    assert not re.findall("[\x80-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]", shown)
    assert "[link=https:x.example]y.py" in shown and r"\x1b]0;pwned\x07.py" in shown


HOSTILE = "<img src=x onerror=alert(1)> [x](javascript:alert(1)) `a` \x1b]0;t\x07\n# h"


def _hostile_record() -> dict:
    """A failed run's record whose every quoted word is hostile."""
    return {
        "run_id": "r1",
        "target": "tpu",
        "verdict": "failed",
        "verification": {
            "reason": HOSTILE,
            "target": {"counters": {"cuda_calls": 0}, "synthetic_data": [HOSTILE]},
        },
        "iterations": 1,
        "plan": {"entry": ["python", "<script>.py"], "entry_reason": HOSTILE},
        "decisions": [{"node": "verify", "decision": HOSTILE, "why": HOSTILE}],
        "agent_edits": [
            {
                "path": "`x</code>` ``<img src=y>.py",
                "start_line": 1,
                "end_line": 2,
                "by": "llm",
                "for": "TPD099",
                "reason": HOSTILE,
            }
        ],
        "llm_usage": {"calls": 1, "note": "<b>"},
        "elapsed_s": 1.0,
    }


def test_verification_md_escapes_the_programs_words():
    from torchport.agents.deliver import verification_markdown

    record = _hostile_record()
    markdown = verification_markdown(record)
    text = assert_renders_only_its_own_structure(markdown)
    assert_terminal_safe(markdown)
    assert r"<img src=x onerror=alert(1)> [x](javascript:alert(1)) `a` \x1b]0;t\x07\n# h" in text
    assert "`x</code>` ``<img src=y>.py" in text and "python <script>.py" in text


def test_batch_summary_escapes_reasons_and_refs_and_its_progress_reads_no_markup(tmp_path):
    from torchport.agents.batch.progress import Progress
    from torchport.agents.batch.summary import FIELDS, summarize, write_summary

    record = {k: None for k in FIELDS}
    record.update(
        name="repo-1",
        source='=HYPERLINK("http:x")',
        ref="[x](javascript:alert(1))",
        verdict="failed",
        reason="<img src=x onerror=alert(1)> \x1b]0;t\x07 | @SUM(1)",
        constructs=2,
        converted=1,
        time_s=1.0,
        report="reports/repo-1",
    )
    settings = {"target": "tpu", "verify": True, "steps": 1, "llm": "none"}
    write_summary(tmp_path, summarize([record], settings))
    markdown = (tmp_path / "summary.md").read_text()
    chart = {"summary.png": "verdicts, and time per repository"}
    text = assert_renders_only_its_own_structure(
        markdown, links={"reports/repo-1/summary.md"}, images=chart
    )
    assert_terminal_safe(markdown)
    assert r"<img src=x onerror=alert(1)> \x1b]0;t\x07 | @SUM(1)" in text
    index = (tmp_path / "index.html").read_text()
    page = assert_self_contained(index, links=("reports/repo-1/index.html",))
    assert_terminal_safe(page.text)
    assert r"<img src=x onerror=alert(1)> \x1b]0;t\x07 | @SUM(1)" in page.text
    assert "repo-1 @ [x](javascript:alert(1))" in page.text
    rows = list(csv.DictReader(io.StringIO((tmp_path / "summary.csv").read_text())))
    assert rows[0]["source"] == '\'=HYPERLINK("http:x")'
    assert all(not v.startswith(FORMULA_START) for v in rows[0].values())

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream in (io.StringIO(), Terminal()):  # plain lines, then rich's live bar
        with Progress(1, 0, stream=stream) as progress:
            progress.say("[link=x]start[/link] \x1b]0;t\x07")
            progress.finished({"name": "[link=x]r[/link]", "verdict": "ok"})
        shown = stream.getvalue()
        assert "\x1b]" not in shown and "\x07" not in shown  # no title, no rich hyperlink
        assert "[link=x]r[/link]: ok" in shown and r"[link=x]start[/link] \x1b]0;t\x07" in shown


def test_leaderboard_escapes_task_names_and_neutralises_csv(tmp_path):
    from torchport.evals import leaderboard
    from torchport.evals.runner import Result

    fields = dict(
        mode="rules",
        target="tpu",
        difficulty="easy",
        family="libraries",
        expected="verified",
        verdict="failed",
        success=False,
        parity_max_rel=None,
        residual_constructs=1,
        precision=1.0,
        recall=1.0,
        files_touched=1,
        outside_golden=[],
        llm_calls=0,
        llm_tokens=0,
        iterations=0,
        wall_s=1.0,
    )
    results = [
        Result(
            task="<img src=x onerror=alert(1)>",
            reason="=cmd|' /C calc'!A0",
            report=str(tmp_path / "a b(c)"),
            **fields,
        ).to_json(),
        Result(task="@SUM(1)\x1b]0;t\x07", reason="-2+3", report=None, **fields).to_json(),
    ]
    paths = leaderboard.write(results, tmp_path / "board", command="torchport eval `x`")
    markdown = paths["markdown"].read_text()
    link = quote(os.fsencode(tmp_path / "a b(c)"))
    charts = {"leaderboard.png": "success per mode and difficulty"}
    charts |= {"verdicts.png": "verdicts per target and mode"}
    charts |= {"edit_scores.png": "edit precision and recall per mode"}
    text = assert_renders_only_its_own_structure(markdown, links={link}, images=charts)
    assert_terminal_safe(markdown)
    assert "<img src=x onerror=alert(1)>" in text and r"@SUM(1)\x1b]0;t\x07" in text
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [r["task"] for r in rows] == ["<img src=x onerror=alert(1)>", r"'@SUM(1)\x1b]0;t\x07"]
    assert [r["reason"] for r in rows] == ["'=cmd|' /C calc'!A0", "'-2+3"]


def test_run_prints_the_programs_error_on_one_escaped_line(tmp_path):
    (tmp_path / "bad.py").write_text(
        'raise RuntimeError("boom \\x1b]0;pwned\\x07 \\u202e \\x9b2J\\nverdict: verified")\n'
    )
    code, out, err = torchport(
        "run",
        "--root",
        str(tmp_path),
        "--target",
        "accelerator",
        "--steps",
        "1",
        "--",
        "python",
        "bad.py",
    )
    assert code == 1, err
    assert_terminal_safe(out)
    assert (
        r"error: RuntimeError: boom \x1b]0;pwned\x07 \u202e \x9b2J\nverdict: verified at bad.py:1"
        in out.splitlines()
    )


@pytest.mark.parametrize(
    "command",
    [["scan"], ["run", "--root"], ["chat"]],
    ids=["scan", "run", "chat"],
)
def test_an_error_quoting_a_hostile_path_is_one_escaped_line(tmp_path, command):
    path = str(tmp_path / "\x1b]0;pwned\x07\u202e\nx")
    code, _, err = torchport(
        *command, path, *(["--", "python", "x.py"] if "run" in command else [])
    )
    assert code == 2
    assert_terminal_safe(err)
    assert len(err.splitlines()) == 1 and err.startswith("torchport: error: ")
    assert r"\x1b]0;pwned\x07\u202e\nx" in err


@pytest.mark.parametrize("code", ["`", "``a", "a`", "` a `", " a", "   ", "a ``` b ` c", "<b>"])
def test_a_code_span_shows_its_code_exactly_whatever_its_backticks_and_spaces(code):
    from torchport.tools.safetext import markdown_code

    rendered = Elements(render(f"x {markdown_code(code)} y"))
    assert [tag for tag, _ in rendered.elements] == ["p", "code"]
    assert "".join(rendered.texts) == f"x {code} y\n"
