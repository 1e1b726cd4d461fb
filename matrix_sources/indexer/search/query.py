"""A query as every front asks it: `!sources`, `matrix-sources search`, the search API
and the MCP tool. Validated here, once, with errors that name the field.

Light on purpose (no numpy, no Chroma, no model): `matrix-sources search` parses its
query with it before it knows whether a running service will answer, and a process
that only talks to that service must start fast.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..records import CORPUS_CHAT, CORPUS_REFERENCE, RoomID

MAX_TEXTS = 8
MAX_TEXT_BYTES = 1000
MAX_TOP_K = 20
DEFAULT_TOP_K = 5
CORPORA = (CORPUS_CHAT, CORPUS_REFERENCE)
# The JSON form's fields (the search API's body, a line of `search --queries`).
FIELDS = ("texts", "top_k", "room", "corpus")


class QueryError(ValueError):
    """A query the user must fix; `field` names what is wrong (texts, texts[3], top_k)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def not_text(s: str) -> str | None:
    """The first lone surrogate of `s` (`"\\ud800"` is valid JSON; a command line's byte
    that is not UTF-8 arrives as one), else None. No model's tokenizer takes it (it
    raised, and the search answered 500), nor UTF-8, nor SQLite."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        return s[e.start]
    return None


def _holds(bad: str) -> str:
    return f"holds the character U+{ord(bad):04X}, which is not text: remove it"


def check_fields(given: Iterable[object]) -> None:
    """An unknown field refused by name, for every front that takes the JSON form's
    fields (the API's body, a `--queries` line, the MCP tool's arguments): a misspelt
    `top-k` would otherwise search silently with the default."""
    for key in given:
        if key not in FIELDS:
            name = str(key)
            name = name if name.isprintable() else ascii(name)[1:-1]  # no surrogate out
            raise QueryError(name[:64], f"unknown field; the fields are {', '.join(FIELDS)}")


@dataclass(frozen=True, slots=True)
class SourceQuery:
    texts: tuple[str, ...]
    top_k: int = DEFAULT_TOP_K
    room_id: RoomID | None = None
    corpus: str | None = None  # None: both

    @classmethod
    def build(
        cls,
        texts: object,
        top_k: object = DEFAULT_TOP_K,
        room_id: object = None,
        corpus: object = None,
    ) -> SourceQuery:
        if not isinstance(texts, (list, tuple)):
            raise QueryError("texts", "must be a list of 1 to 8 strings")
        if not texts:
            raise QueryError("texts", "give at least one text")
        if len(texts) > MAX_TEXTS:
            raise QueryError("texts", f"{len(texts)} texts given, at most {MAX_TEXTS} allowed")
        clean = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise QueryError(f"texts[{i}]", "must be a string")
            if not t.strip():
                raise QueryError(f"texts[{i}]", "is empty")
            size = len(t.encode("utf-8", "surrogatepass"))
            if size > MAX_TEXT_BYTES:
                raise QueryError(
                    f"texts[{i}]", f"is {size} bytes, at most {MAX_TEXT_BYTES} allowed"
                )
            bad = not_text(t)
            if bad is not None:
                raise QueryError(f"texts[{i}]", _holds(bad))
            clean.append(t.strip())
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise QueryError("top_k", f"must be a whole number from 1 to {MAX_TOP_K}")
        if room_id is not None and (not isinstance(room_id, str) or not room_id.startswith("!")):
            raise QueryError("room", "must be a room id starting with '!'")
        if room_id is not None and (bad := not_text(room_id)) is not None:
            raise QueryError("room", _holds(bad))
        if corpus is not None and corpus not in CORPORA:
            raise QueryError("corpus", f"must be one of {', '.join(CORPORA)}")
        return cls(tuple(clean), top_k, RoomID(room_id) if room_id else None, corpus)

    @classmethod
    def from_json(cls, obj: object, default_top_k: int = DEFAULT_TOP_K) -> SourceQuery:
        """The JSON form, {"texts": [...], "top_k"?, "room"?, "corpus"?}: an unknown
        field is refused by name (check_fields)."""
        if not isinstance(obj, dict):
            raise QueryError("body", "must be a JSON object")
        check_fields(obj)
        return cls.build(
            obj.get("texts"), obj.get("top_k", default_top_k), obj.get("room"), obj.get("corpus")
        )

    def to_json(self) -> dict:
        """The JSON form `from_json` reads back as this query."""
        return {
            "texts": list(self.texts),
            "top_k": self.top_k,
            **({"room": self.room_id} if self.room_id else {}),
            **({"corpus": self.corpus} if self.corpus else {}),
        }
