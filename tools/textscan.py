"""Line rules for files that are not Python: shell, Makefiles, YAML/JSON configs,
Dockerfiles, READMEs and dependency files.

Each rule with ``text`` patterns names the languages it applies to; a pattern is
searched line by line, comment lines excluded. Dependency files are normalised
first (list markers, quotes, trailing commas) so one requirement pattern serves
requirements.txt, pyproject.toml, setup.cfg and conda environments alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .catalogue import Rule
from .findings import SNIPPET_CHARS

HASH_COMMENT_KINDS = frozenset(
    {"shell", "make", "yaml", "docker", "requirements", "pyproject", "setup", "conda"}
)
DEPENDENCY_KINDS = frozenset({"requirements", "pyproject", "setup", "conda"})


@dataclass(frozen=True, slots=True)
class TextHit:
    code: str
    line: int
    col: int
    end_col: int
    snippet: str


@dataclass
class TextRules:
    by_kind: dict[str, list[tuple[re.Pattern[str], Rule]]]

    @classmethod
    def build(cls, rules: Iterable[Rule]) -> TextRules:
        by_kind: dict[str, list[tuple[re.Pattern[str], Rule]]] = {}
        for rule in rules:
            for pattern in rule.text_patterns:
                compiled = re.compile(pattern)
                for kind in rule.languages:
                    if kind != "python":
                        by_kind.setdefault(kind, []).append((compiled, rule))
        return cls(by_kind)

    def kinds(self) -> set[str]:
        return set(self.by_kind)


def normalise_dependency_line(line: str) -> str:
    """``  - "flash-attn>=2",  # fast`` -> ``flash-attn>=2``."""
    text = line.strip()
    if text.startswith("#"):
        return ""
    text = re.sub(r"\s+#.*$", "", text)
    text = text.removeprefix("- ").strip().rstrip(",").strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":  # a quoted list item
        text = text[1:-1].strip()
    return text


def scan_lines(text: str, kind: str, rules: TextRules, line_offset: int = 0) -> Iterator[TextHit]:
    patterns = rules.by_kind.get(kind)
    if not patterns:
        return
    for number, raw in enumerate(text.splitlines(), start=1):
        if kind in HASH_COMMENT_KINDS and raw.lstrip().startswith("#"):
            continue
        line = normalise_dependency_line(raw) if kind in DEPENDENCY_KINDS else raw
        if not line.strip():
            continue
        seen: set[str] = set()
        for rx, rule in patterns:
            if rule.code in seen:
                continue
            m = rx.search(line)
            if m:
                seen.add(rule.code)
                col = raw.find(line) if kind in DEPENDENCY_KINDS else 0
                yield TextHit(
                    rule.code,
                    number + line_offset,
                    max(col, 0) + m.start() + 1,
                    max(col, 0) + m.end() + 1,
                    raw.strip()[:SNIPPET_CHARS],
                )
