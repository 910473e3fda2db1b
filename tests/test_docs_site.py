"""The documentation: a README a newcomer reads in ten minutes, and a site (mkdocs.yml,
docs/) that holds everything else and builds with no warning in strict mode.

The site's checks are MkDocs' own: ``--strict`` with mkdocs.yml's ``validation`` settings
makes a broken link, a missing anchor, an absolute link or a page left out of the nav a
failed build. A scratch copy with one of each shows that those settings still bite. The
README's checks are here: its length, its links, and a home in docs/ for every section
the README had before the site took them over."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 250
IMAGE_MAX_BYTES = 200 * 1024
# What the site is built from: the hook reads README.md and DEVELOPERS.md beside it.
SITE_SOURCES = ("mkdocs.yml", "docs", "scripts/docs_hooks.py", "README.md", "DEVELOPERS.md")

# Every section heading of the README before the site (1846 lines, at db75bf8), and the
# page that holds it now, under the same heading.
OLD_README_SECTIONS = (
    ("The two commands", "getting-started.md"),
    ("Quick start", "scan.md"),
    ("In pre-commit and CI", "scan.md"),
    ("Project configuration", "configuration.md"),
    ("Migrating", "migrating.md"),
    ("Verification and the agent loop", "verification.md"),
    ("The LLM", "llm.md"),
    ("Porting in conversation: `torchport chat`", "chat.md"),
    ("Porting many repositories: `torchport batch`", "batch.md"),
    ("Using torchport from a coding agent (MCP)", "mcp.md"),
    ("Evaluating migrations", "evaluation.md"),
    ("The hard tier", "benchmarks/eval-suite.md"),
    ("Real repositories", "benchmarks/realworld.md"),
    ("Both tables, measured for issue 31", "benchmarks/realworld.md"),
    ("Earlier measurements (first table)", "benchmarks/realworld.md"),
    ("What a reviewer's linter says about those ports", "benchmarks/review.md"),
    ("What a reviewer would still ask for", "benchmarks/review.md"),
    ("Against ports people merged", "benchmarks/human-ports.md"),
    ("Running programs in the sandbox", "sandbox.md"),
    ("How faithful is the emulated device", "fidelity.md"),
    ("Where the neuron and xla facts come from", "fidelity.md"),
    ("Security", "security.md"),
    ("What a verdict rests on", "security.md"),
    ("Paths and values a repository chooses", "security.md"),
    ("The front doors", "security.md"),
    ("A repository's own configuration", "security.md"),
    ("The rule catalogue", "rules/index.md"),
    ("Layout", "layout.md"),
    ("Speed and memory", "benchmarks/speed.md"),
    ("Development", "development.md"),
)
# Parts of the old "Verification and the agent loop" that are pages of their own now.
SPLIT_OUT = (
    ("The program's dependencies", "dependencies.md"),
    ("CUDA-only code on the reference", "reference.md"),
)
MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def headings(page: Path) -> list[str]:
    """The page's Markdown headings, without their '#'s, code blocks left out."""
    found, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6} (.+?)\s*$", line)):
            found.append(m.group(1))
    return found


def build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict``, as ``make docs`` runs it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    return subprocess.run(
        command, cwd=config_dir, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    pytest.importorskip("mkdocs", reason="MkDocs is the `docs` extra: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="the Material theme is the `docs` extra")
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT, out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout + done.stderr


def test_the_site_builds_in_strict_mode_with_no_warning(site):
    out, log = site
    assert not re.search(r"WARNING|ERROR", log), log
    for page in ("index.html", "getting-started.html", "security.html", "developers.html"):
        assert (out / page).is_file(), page
    assert (out / "img" / "report.png").is_file()
    # The workflow the scanning page tells people to copy is served beside it.
    assert (out / "github-code-scanning.yml").read_bytes() == (
        DOCS / "github-code-scanning.yml"
    ).read_bytes()


def test_every_rule_has_a_page_and_a_row_in_the_list_of_all_rules(site):
    from torchport.tools.catalogue import load_catalogue

    out, _ = site
    everything = (out / "rules" / "all.html").read_text(encoding="utf-8")
    for rule in load_catalogue():
        page = (out / "rules" / f"{rule.code}.html").read_text(encoding="utf-8")
        assert rule.name in page, rule.code
        assert f'href="{rule.code}.html"' in everything, rule.code


def test_the_readme_is_the_sites_home_with_its_links_made_relative_to_the_site(site):
    out, _ = site
    home = (out / "index.html").read_text(encoding="utf-8")
    assert 'href="getting-started.html"' in home
    assert 'src="img/report.png"' in home
    assert "docs/getting-started" not in home


def test_strict_mode_fails_on_a_broken_link_a_missing_anchor_and_a_page_not_in_the_nav(
    tmp_path,
):
    pytest.importorskip("mkdocs", reason="MkDocs is the `docs` extra: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="the Material theme is the `docs` extra")
    for name in SITE_SOURCES:
        source, copy = ROOT / name, tmp_path / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, copy)
        else:
            shutil.copy2(source, copy)
    page = tmp_path / "docs" / "chat.md"
    page.write_text(
        page.read_text(encoding="utf-8")
        + "\nSee [gone](no-such-page.md) and [the rules](rules/index.md#no-such-anchor).\n",
        encoding="utf-8",
    )
    (tmp_path / "docs" / "orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    done = build(tmp_path, tmp_path / "site")
    log = done.stdout + done.stderr
    assert done.returncode != 0, log
    assert "no-such-page.md" in log
    assert "no-such-anchor" in log
    assert "orphan.md" in log


def test_the_readme_is_at_most_250_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


def test_every_section_of_the_old_readme_has_a_home_in_docs():
    for heading, page in OLD_README_SECTIONS + SPLIT_OUT:
        path = DOCS / page
        assert path.is_file(), page
        assert heading in headings(path), f"{heading!r} is not a heading of docs/{page}"


def test_every_page_of_the_old_readme_is_in_the_sites_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in {page for _, page in OLD_README_SECTIONS + SPLIT_OUT}:
        assert re.search(rf":\s*{re.escape(page)}\s*$", nav, re.M), page


def test_the_readmes_links_resolve_and_its_images_are_small():
    """Relative links as GitHub reads them, from the repository's root; an anchor must
    be a heading of the page it points into."""
    toc = pytest.importorskip("markdown.extensions.toc", reason="Markdown is the `docs` extra")
    slugify = toc.slugify  # MkDocs' own heading ids
    links = MD_LINK.findall(README.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"^[a-z]+://", link)]
    assert any(link.startswith("docs/") for link in local)
    for link in local:
        target, _, anchor = link.partition("#")
        path = ROOT / target
        assert path.exists(), link
        if anchor:
            ids = {slugify(h.replace("`", ""), "-") for h in headings(path)}
            assert anchor in ids, link
        if path.suffix in (".png", ".jpg", ".svg", ".gif"):
            assert path.stat().st_size < IMAGE_MAX_BYTES, link


def _hooks():
    """scripts/docs_hooks.py, the hook mkdocs.yml names (it imports MkDocs)."""
    pytest.importorskip("mkdocs", reason="MkDocs is the `docs` extra: pip install -e '.[docs]'")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return docs_hooks


RULE_DOC_LISTS = """## How it is fixed
A list straight after a paragraph:
- **tpu** (auto): the first paragraph
  goes on here.
  - a nested item
    with its own continuation
  - another nested item

  A second paragraph of the tpu item.
- **neuron** (none): nothing to do.

```python
  - not a list: code
```
"""


def test_rule_docs_lists_render_as_lists_in_python_markdown():
    """The rule docs' GitHub-style lists keep their shape on the site: a nested list
    inside its item, a second paragraph inside its item, the next item a new item."""
    hooks = _hooks()
    import markdown

    html = markdown.markdown(
        hooks.python_markdown_lists(RULE_DOC_LISTS), extensions=["fenced_code"]
    )
    assert "<p>A list straight after a paragraph:</p>\n<ul>" in html
    tpu = html[html.index("<strong>tpu</strong>") : html.index("<strong>neuron</strong>")]
    assert "<ul>\n<li>a nested item" in tpu
    assert "<li>another nested item</li>" in tpu
    assert "<p>A second paragraph of the tpu item.</p>\n</li>\n<li>" in html
    assert "  - not a list: code" in html


def test_the_readme_becomes_the_home_page_with_site_relative_links():
    hooks = _hooks()
    text = (
        "[a](docs/scan.md) ![b](docs/img/report.png) [c](DEVELOPERS.md) "
        "[d](https://example.org/docs/x.md) [e](docs/benchmarks/speed.md#scanning)"
    )
    assert hooks.readme_as_home(text) == (
        "[a](scan.md) ![b](img/report.png) [c](developers.md) "
        "[d](https://example.org/docs/x.md) [e](benchmarks/speed.md#scanning)"
    )


def test_the_list_of_all_rules_merges_targets_that_agree_and_keeps_code_pipes():
    hooks = _hooks()
    from torchport.tools.catalogue import load_catalogue

    catalogue = load_catalogue()
    assert hooks._fix_kinds(catalogue.get("TPD001")) == "all: auto"
    assert hooks._fix_kinds(catalogue.get("TPD012")) == "tpu, accelerator: llm; neuron, xla: manual"
    assert hooks._cell("`a|b` or c|d") == "`a|b` or c\\|d"


def _how_it_is_fixed(page: str) -> str:
    return page[page.index("## How it is fixed") : page.index("## Example")]


def test_a_rule_page_says_what_its_fix_may_change_as_the_applicability_table_declares():
    """Generated from tools/catalogue/applicability.toml (what ``--safe-only`` reads), so a
    page cannot call a fix safe that the migration reports as changing the numbers."""
    hooks = _hooks()
    from torchport.tools.catalogue import load_catalogue
    from torchport.tools.catalogue.applicability import of

    catalogue = load_catalogue()
    amp = _how_it_is_fixed(hooks.rule_page(catalogue.get("TPA001")))
    assert f"What the fix may change: numerics — {of('TPA001', 'tpu').why}" in amp
    device = _how_it_is_fixed(hooks.rule_page(catalogue.get("TPD001")))
    assert f"What the fix may change: safe — {of('TPD001', 'tpu').why}" in device
    # targets that disagree are named; a target with no automatic fix is left out
    assert "numerics (tpu, neuron, xla); safe (accelerator) — " in hooks.fix_changes(
        catalogue.get("TPA002")
    )
    assert "(accelerator)" not in hooks.fix_changes(catalogue.get("TPB001"))
    assert hooks.fix_changes(catalogue.get("TPD021")) == ""  # manual everywhere
    assert "What the fix may change" not in hooks.rule_page(catalogue.get("TPD021"))


def test_what_a_fix_may_change_is_generated_never_written_into_a_rules_doc():
    docs = ROOT / "tools" / "catalogue" / "docs"
    for doc in docs.glob("TP*.md"):
        assert "What the fix may change" not in doc.read_text(encoding="utf-8"), doc.name


def test_the_sites_rule_page_shows_what_the_fix_may_change(site):
    out, _ = site
    page = (out / "rules" / "TPA001.html").read_text(encoding="utf-8")
    assert "What the fix may change: numerics" in page
