"""A ``tiktoken`` stand-in: the same interface and vocabulary sizes, byte-level tokens.

``tiktoken.get_encoding("gpt2")`` downloads its BPE ranks on first use; the sandbox has no
network (and often no tiktoken). This encoding maps text to its UTF-8 bytes (ids 0-255),
which is deterministic, reversible, and inside every real vocabulary, with the real special
tokens and ``n_vocab``: a model sized from ``enc.n_vocab`` gets the size it would get.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Literal

from . import data

# encoding name -> (n_vocab, special tokens)
ENCODINGS: dict[str, tuple[int, dict[str, int]]] = {
    "gpt2": (50257, {"<|endoftext|>": 50256}),
    "r50k_base": (50257, {"<|endoftext|>": 50256}),
    "p50k_base": (50281, {"<|endoftext|>": 50256}),
    "p50k_edit": (50284, {"<|endoftext|>": 50256, "<|fim_prefix|>": 50281}),
    "cl100k_base": (100277, {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258}),
    "o200k_base": (200019, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}
# model name prefix -> encoding name (the longest matching prefix wins)
MODEL_PREFIXES: dict[str, str] = {
    "gpt2": "gpt2",
    "davinci": "r50k_base",
    "text-davinci": "p50k_base",
    "code-davinci": "p50k_base",
    "gpt-3.5": "cl100k_base",
    "gpt-4": "cl100k_base",
    "text-embedding": "cl100k_base",
    "gpt-4o": "o200k_base",
    "o1": "o200k_base",
}


PUBLIC = (
    "Encoding",
    "get_encoding",
    "encoding_for_model",
    "encoding_name_for_model",
    "list_encoding_names",
)


class Encoding:
    def __init__(self, name: str) -> None:
        self.name = name
        self.n_vocab, self._special_tokens = ENCODINGS[name]
        self.eot_token = self._special_tokens["<|endoftext|>"]
        self.max_token_value = self.n_vocab - 1
        self._by_id = {i: s for s, i in self._special_tokens.items()}

    @property
    def special_tokens_set(self) -> set[str]:
        return set(self._special_tokens)

    def encode_ordinary(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        allowed = self.special_tokens_set if allowed_special == "all" else set(allowed_special)
        disallowed = (
            self.special_tokens_set - allowed
            if disallowed_special == "all"
            else set(disallowed_special)
        )
        for token in disallowed:
            if token in text:
                raise ValueError(
                    f"Encountered text corresponding to disallowed special token {token!r}"
                )
        out: list[int] = []
        rest = text
        while rest:
            hits = [(rest.find(t), t) for t in allowed if t in rest]
            if not hits:
                out += self.encode_ordinary(rest)
                break
            at, token = min(hits)
            out += [*self.encode_ordinary(rest[:at]), self._special_tokens[token]]
            rest = rest[at + len(token) :]
        return out

    def encode_batch(self, texts: Iterable[str], **kwargs: Any) -> list[list[int]]:
        return [self.encode(t, **kwargs) for t in texts]

    def encode_ordinary_batch(self, texts: Iterable[str], **_: Any) -> list[list[int]]:
        return [self.encode_ordinary(t) for t in texts]

    def decode_bytes(self, tokens: Iterable[int]) -> bytes:
        out = bytearray()
        for t in tokens:
            t = int(t)
            out += bytes([t]) if t < 256 else self._by_id.get(t, "").encode("utf-8")
        return bytes(out)

    def decode(self, tokens: Iterable[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors=errors)

    def decode_batch(self, batch: Iterable[Iterable[int]], **kwargs: Any) -> list[str]:
        return [self.decode(t, **kwargs) for t in batch]

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r} [torchport byte-level stand-in]>"


def get_encoding(encoding_name: str) -> Encoding:
    if encoding_name not in ENCODINGS:
        raise ValueError(f"Unknown encoding {encoding_name}")
    data.record("tiktoken", encoding_name, ENCODINGS[encoding_name][0], standin="byte-level")
    return Encoding(encoding_name)


def encoding_name_for_model(model_name: str) -> str:
    prefixes = [p for p in MODEL_PREFIXES if model_name.startswith(p)]
    if not prefixes:
        raise KeyError(f"Could not automatically map {model_name} to a tokeniser.")
    return MODEL_PREFIXES[max(prefixes, key=len)]


def encoding_for_model(model_name: str) -> Encoding:
    return get_encoding(encoding_name_for_model(model_name))


def list_encoding_names() -> list[str]:
    return list(ENCODINGS)


def falling_back(real_get_encoding: Any) -> Any:
    """The real ``get_encoding``, or this stand-in when it cannot load its ranks (offline)."""

    def get(encoding_name: str) -> Any:
        try:
            return real_get_encoding(encoding_name)
        except Exception:
            return get_encoding(encoding_name)

    return get
