"""The checkpointer every agent graph uses: langgraph's SQLite saver, with file names kept exact.

langgraph stores state as msgpack, which holds only valid UTF-8: it replaces a lone
surrogate (how Python shows a file name's bytes that are not UTF-8, or such bytes in
a file read with ``surrogateescape``) with ``?`` in a value and refuses one in a dict
key. A migration of a repository with a file named ``b"caf\\xe9.py"`` crashed when its
overlay was checkpointed, and a resumed run would have written ``caf?.py``. Here every
such string is stored as a tagged, reversible plain string and restored on load.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

# A string that starts with the tag is tagged too, so that every string round-trips.
_TAG = "\x00torchport-surrogates:"
_NEEDS_TAG = re.compile("[\ud800-\udfff]|^\x00torchport-surrogates:")

# How every driver streams a graph. langgraph's default ("async") writes a step's
# checkpoint in a background thread while the next node already runs, so a kill early in
# that node (a busy machine delays the thread) can lose the step: a chat session killed
# during /verify resumed at its prompt instead of verifying again. "sync" writes the
# checkpoint before the next node starts; one SQLite write per step.
DURABILITY = "sync"


def _tag(text: str) -> str:
    if not _NEEDS_TAG.search(text):
        return text
    return _TAG + text.encode("utf-8", "surrogatepass").hex()


def _untag(text: str) -> str:
    if not text.startswith(_TAG):
        return text
    return bytes.fromhex(text[len(_TAG) :]).decode("utf-8", "surrogatepass")


def _map_strings(data: Any, convert: Any) -> Any:
    """``data`` with ``convert`` applied to every string in its dicts (keys too), lists
    and tuples; anything else (numbers, langgraph's own objects) as it is."""
    if isinstance(data, str):  # a StrEnum member (a Verdict) is stored as its plain value:
        return convert(str.__str__(data))  # langgraph would pickle-tag its type otherwise
    if isinstance(data, dict):
        return {_map_strings(k, convert): _map_strings(v, convert) for k, v in data.items()}
    if isinstance(data, list):
        return [_map_strings(v, convert) for v in data]
    if isinstance(data, tuple):
        return tuple(_map_strings(v, convert) for v in data)
    return data


class ExactStringSerializer(JsonPlusSerializer):
    """langgraph's serializer, with strings that msgpack would alter tagged first."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return super().dumps_typed(_map_strings(obj, _tag))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return _map_strings(super().loads_typed(data), _untag)


@contextmanager
def open_checkpointer(db: Path) -> Iterator[SqliteSaver]:
    """A SQLite checkpointer on ``db`` (as ``SqliteSaver.from_conn_string``, which
    cannot take a serializer)."""
    with closing(sqlite3.connect(str(db), check_same_thread=False)) as conn:
        yield SqliteSaver(conn, serde=ExactStringSerializer())
