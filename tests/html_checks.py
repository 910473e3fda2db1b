"""What every HTML page torchport writes must be, checked on its parsed elements: only the
elements and attributes the page makes itself, no script, nothing that loads from outside
the file (the browser test checks the same in Chromium), and no in-page link that leads
nowhere."""

from __future__ import annotations

import re
from html.parser import HTMLParser

ELEMENTS = {
    *("html", "head", "meta", "title", "link", "style", "body", "header", "nav", "main"),
    *("section", "article", "h1", "h2", "h3", "h4", "h5", "h6", "p", "span", "a", "strong"),
    *("em", "code", "pre", "ul", "ol", "li", "table", "caption", "colgroup", "col", "thead"),
    *("tbody", "tr", "th", "td", "img", "br", "hr", "blockquote"),
}
ATTRIBUTES = {"class", "id", "href", "src", "alt", "colspan", "lang", "charset", "http-equiv"}
ATTRIBUTES |= {"content", "name", "rel", "style"}
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
ALIGN = re.compile(r"text-align:(left|right|center)")


class Page(HTMLParser):
    """Every element with its attributes, and the text, of a page."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self.other: list[str] = []  # comments, declarations but the doctype, PIs
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_comment(self, data):
        self.other.append("<!--")

    def handle_decl(self, decl):
        if decl.lower() != "doctype html":
            self.other.append(decl)

    def handle_pi(self, data):
        self.other.append("<?")

    def handle_data(self, data):
        self.texts.append(data)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.elements if a.get("id")}


def assert_self_contained(html: str, links: tuple[str, ...] = ()) -> Page:
    """The page's own elements only; ``links``: the relative links it may hold besides its
    in-page anchors (a batch's index links the repositories' pages)."""
    page = Page(html)
    assert not page.other, page.other
    policies = [a.get("content") for t, a in page.elements if a.get("http-equiv")]
    assert policies == [CSP]
    for tag, attrs in page.elements:
        assert tag in ELEMENTS, (tag, attrs)
        assert set(attrs) <= ATTRIBUTES, (tag, attrs)
        href, src, style = attrs.get("href"), attrs.get("src"), attrs.get("style")
        if href is not None:
            if tag == "link":
                assert href == "data:," and attrs.get("rel") == "icon", attrs
            elif href.startswith("#"):
                assert href[1:] in page.ids(), f"a link to nowhere: {href}"
            else:
                assert href.startswith("https://") or href in links, attrs
        if src is not None:
            assert tag == "img" and src.startswith("data:image/png;base64,"), attrs
        if style is not None:
            assert ALIGN.fullmatch(style), attrs
    return page
