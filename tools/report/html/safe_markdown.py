"""Markdown to HTML that cannot carry the repository's markup or reach the network.

The other report writers already escape what they quote from the repository
(``tools.safetext``); here the Markdown is rendered with raw HTML off besides, links keep
only in-page anchors and https addresses (a link is followed only when clicked), and an
image is drawn only when it is one the page embeds (``data:`` URI): any other shows its
alt text, so nothing is fetched when the page loads.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from markdown_it import MarkdownIt

SAFE_LINK = ("#", "https://")


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _image(self: Any, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    alt = html.escape(self.renderInlineAsText(token.children or [], options, env))
    png = (env.get("images") or {}).get(token.attrGet("src"))
    if png is None:
        return alt
    return f'<img class="plot" alt="{alt}" src="{data_uri(png)}">'


def _link_open(self: Any, tokens: Sequence[Any], idx: int, options: Any, env: Any) -> str:
    href = str(tokens[idx].attrGet("href") or "")
    if href.startswith(SAFE_LINK):
        return f'<a href="{html.escape(href)}">'
    return "<a>"


@cache
def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable("table")
    md.add_render_rule("image", _image)
    md.add_render_rule("link_open", _link_open)
    return md


def markdown_html(markdown: str, images: Mapping[str, bytes] | None = None) -> str:
    """``markdown`` as HTML; ``images``: the PNGs it may show, by the name it gives them."""
    return _renderer().render(markdown, {"images": dict(images or {})})
