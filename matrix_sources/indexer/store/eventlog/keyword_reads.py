"""The keyword index's reads (keywords.py has its tables and writes): what search asks
of it (search/lexical.py). Docs are the windows' numbers; arrays come ascending."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np

from .keywords import READY, SEG_BITS, TF_MAX, Database, _chunks, _get

EMPTY = np.zeros(0, dtype=np.int64)
STALE_SHARE = 0.01  # new windows, as a share of the index, before a count is taken again
COUNTS_KEPT = 50_000  # counts kept at most (terms and filters), then all dropped
# A common term's windows are counted in SAMPLE_SEGMENTS segments spread over the index
# and scaled to it, once the sample holds ESTIMATED_FROM of them: a question's new words
# are counted before it is answered, and a common stem's exact count took up to 120 ms
# at a million windows (`instal`, 206,837 windows). Measured there on the Ubuntu dev
# questions' 398 terms (bench/df_sample.py): 453 ms against 1,959 for all; of the 193
# estimated, p95 5.4% off, the worst 9.3%, idf within 0.10. Rarer terms, filtered counts
# and every term of an index of SAMPLE_SEGMENTS segments or fewer (131,072 windows) are
# counted exactly.
SAMPLE_SEGMENTS = 32
ESTIMATED_FROM = 1_000
# A key with a connector is a compound, never a stem's word (tokens.is_word): LIKE
# patterns, passed as parameters (the event log's SQL holds no `%` literal).
_CONNECTORS = ("%\\_%", "%.%", "%-%", "%+%", "%#%", "%'%")


def _marks(n: int) -> str:
    return ",".join("?" * n)


class KeywordIndex:
    """What search asks of the index (search/lexical.py): docs are the windows'
    numbers, arrays ascending."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # Counts (the docs, a term's df) are idf's: counting a common word's windows
        # takes 100 to 300 ms at a million windows (bench/scale.py), and idf barely
        # moves while the index grows by a percent. (what, term, filter) -> (count, the
        # largest doc number when counted); a count is taken again once more than
        # STALE_SHARE of new windows came, or windows at the end left.
        self._counts: dict[tuple[object, ...], tuple[int, int]] = {}

    def ready(self) -> bool:
        with self.db.locked() as conn:
            return _get(conn, READY) == "1"

    def progress(self) -> dict[str, Any]:
        """For /health: ready, or how far the build got (windows indexed so far)."""
        with self.db.locked() as conn:
            ready = _get(conn, READY) == "1"
            docs = conn.execute("SELECT COUNT(*) FROM kw_docs").fetchone()[0]
        return {"ready": ready, "windows": docs}

    def count(self) -> int:
        """Windows and chunks indexed: what idf is taken against."""
        with self.db.locked() as conn:
            return self._total(conn)

    def _total(self, conn: Any) -> int:
        return self._counted(
            conn, ("count",), lambda: conn.execute("SELECT COUNT(*) FROM kw_docs").fetchone()[0]
        )

    def _counted(self, conn: Any, key: tuple[object, ...], count: Callable[[], Any]) -> int:
        last = _last_doc(conn)
        kept = self._counts.get(key)
        if kept is not None and 0 <= last - kept[1] <= kept[1] * STALE_SHARE:
            return kept[0]
        if len(self._counts) >= COUNTS_KEPT:
            self._counts.clear()
        n = int(count())
        self._counts[key] = (n, last)
        return n

    def postings(
        self, base: str, prefix: bool, where: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(docs, term frequencies) of the windows whose bodies hold a key equal to
        `base` (or, `prefix`, a word starting with it: tokens.matches), one entry a
        window, docs ascending; None for a `where` form search does not use."""
        if _wanted(where) is None:
            return None
        # One packed number a row (tf < 64): half the tuples Python makes of a common
        # word's tens of thousands of rows.
        with self.db.locked() as conn:
            sql, args = _matching(conn, base, prefix, where)
            rows = conn.execute(f"SELECT p.doc * 64 + p.tf {sql}", args).fetchall()
        return _unpacked(rows, prefix)

    def postings_among(
        self, base: str, prefix: bool, docs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`postings` of the term, of these docs only (ascending), instead of reading a
        common word's tens of thousands of rows: one query a segment, each doc sought
        there (asked of every segment at once, SQLite sought every doc in each: 26 ms
        for 500 docs at a million windows, against 1.7). A prefix's keys are a range,
        after which the tree cannot seek a doc: its docs are sought by the doc index
        (35 against 3 ms; PostgreSQL's planner chooses for itself)."""
        keyed, key_args = _keyed(base, prefix)
        hint = " INDEXED BY kw_postings_doc" if prefix and not self.db.dialect.postgresql else ""
        by_seg: dict[int, list[int]] = {}
        for d in docs.tolist():
            by_seg.setdefault(d >> SEG_BITS, []).append(d)
        rows: list[Any] = []
        with self.db.locked() as conn:
            for seg, held in by_seg.items():
                for part in _chunks(held):
                    rows += conn.execute(
                        f"SELECT p.doc * 64 + p.tf FROM kw_postings p{hint} WHERE p.seg = ?"
                        f" AND {keyed} AND p.doc IN ({_marks(len(part))})",
                        [seg, *key_args, *part],
                    ).fetchall()
        return _unpacked(rows, prefix)

    def df(self, base: str, prefix: bool, where: dict[str, Any] | None = None) -> int | None:
        """How many windows `postings` would give, counted by the database."""
        if _wanted(where) is None:
            return None
        with self.db.locked() as conn:
            return self._counted(
                conn,
                ("df", base, prefix, repr(_wanted(where))),
                lambda: self._df(conn, base, prefix, where),
            )

    def _df(self, conn: Any, base: str, prefix: bool, where: dict[str, Any] | None) -> int:
        segs = (_last_doc(conn) >> SEG_BITS) + 1
        if where is None and segs > SAMPLE_SEGMENTS:
            sample = sorted({i * segs // SAMPLE_SEGMENTS for i in range(SAMPLE_SEGMENTS)})
            held = _distinct_docs(conn, *_matching(conn, base, prefix, None, sample))
            if held >= ESTIMATED_FROM:
                windows = self._counted(
                    conn, ("sample", *sample), lambda: _windows_in(conn, sample)
                )
                total = self._total(conn)
                return min(total, round(held * total / max(windows, 1)))
        return _distinct_docs(conn, *_matching(conn, base, prefix, where))

    def ids_of(self, docs: np.ndarray) -> list[str]:
        """The window ids of `docs`, in their order."""
        found = self._rows("SELECT doc, window_id FROM kw_docs", docs)
        return [found[d] for d in docs.tolist()]

    def lengths(self, docs: np.ndarray) -> np.ndarray:
        found = self._rows("SELECT doc, length FROM kw_docs", docs)
        return np.array([found.get(d, 0) for d in docs.tolist()], dtype=np.int64)

    def smallest(self, docs: np.ndarray, need: int) -> list[tuple[str, int]]:
        """(window id, doc) of the `need` docs whose window ids are smallest, ascending:
        ties at the prefilter's floor are broken by window id."""
        order = ' COLLATE "C"' if self.db.dialect.postgresql else ""
        out: list[tuple[str, int]] = []
        with self.db.locked() as conn:
            for part in _chunks(docs.tolist()):
                out += [
                    (w, d)
                    for d, w in conn.execute(
                        f"SELECT doc, window_id FROM kw_docs WHERE doc IN ({_marks(len(part))})"
                        f" ORDER BY window_id{order} LIMIT ?",
                        (*part, need),
                    )
                ]
        return sorted(out)[:need]

    def _rows(self, select: str, docs: np.ndarray) -> dict[int, Any]:
        found: dict[int, Any] = {}
        wanted = sorted(set(docs.tolist()))
        with self.db.locked() as conn:
            for part in _chunks(wanted):
                found.update(
                    conn.execute(f"{select} WHERE doc IN ({_marks(len(part))})", part).fetchall()
                )
        return found


def _unpacked(rows: list[Any], prefix: bool) -> tuple[np.ndarray, np.ndarray]:
    """(docs ascending, tfs) of rows of one packed number each (doc * 64 + tf)."""
    if not rows:
        return EMPTY, EMPTY
    packed = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=len(rows))
    docs, tfs = packed >> 6, packed & TF_MAX
    if prefix:  # a window holding several words of the prefix: one entry, tf summed
        docs, at = np.unique(docs, return_inverse=True)
        tfs = np.bincount(at, weights=tfs).astype(np.int64)
    else:
        order = np.argsort(docs, kind="stable")
        docs, tfs = docs[order], tfs[order]
    return docs, tfs


def _last_doc(conn: Any) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(doc), 0) FROM kw_docs").fetchone()[0])


def _distinct_docs(conn: Any, sql: str, args: list[Any]) -> int:
    return int(conn.execute(f"SELECT COUNT(DISTINCT p.doc) {sql}", args).fetchone()[0])


def _windows_in(conn: Any, segs: list[int]) -> int:
    """The windows the index holds in these segments."""
    return sum(
        conn.execute(
            "SELECT COUNT(*) FROM kw_docs WHERE doc >= ? AND doc < ?",
            (s << SEG_BITS, (s + 1) << SEG_BITS),
        ).fetchone()[0]
        for s in segs
    )


def _matching(
    conn: Any, base: str, prefix: bool, where: dict[str, Any] | None, segs: list[int] | None = None
) -> tuple[str, list[Any]]:
    """FROM and WHERE of the postings a term (its tokens.base_of) matches, with their
    arguments; `where` is a form search uses (_wanted); `segs`: only these segments."""
    want = _wanted(where)
    assert want is not None
    room, corpus = want
    sql = "FROM kw_postings p"
    if room is not None or corpus is not None:
        sql += " JOIN kw_docs d ON d.doc = p.doc"
    # Every segment named: the (seg, key) tree is sought once a segment.
    if segs is None:
        segs = list(range((_last_doc(conn) >> SEG_BITS) + 1))
    keyed, key_args = _keyed(base, prefix)
    sql += f" WHERE p.seg IN ({_marks(len(segs))}) AND {keyed}"
    args: list[Any] = [*segs, *key_args]
    if isinstance(room, tuple):  # a room's upgrade chain
        sql, args = sql + f" AND d.room_id IN ({_marks(len(room))})", [*args, *room]
    elif room is not None:
        sql, args = sql + " AND d.room_id = ?", [*args, room]
    if corpus is not None:
        sql, args = sql + " AND d.corpus = ?", [*args, corpus]
    return sql, args


def _keyed(base: str, prefix: bool) -> tuple[str, list[Any]]:
    """The condition on p.key of the postings a term matches, with its arguments."""
    if not prefix:
        return "p.key = ?", [base]
    # The word itself, or a longer word (no connector) starting with it. The range
    # stands on its own, outside the OR, so each segment's tree is sought by it:
    # inside, SQLite scanned every key of the segment (300 ms a term at 100,000
    # windows, against under 10: bench/scale.py).
    not_compound = " AND ".join("p.key NOT LIKE ? ESCAPE '\\'" for _ in _CONNECTORS)
    return (
        f"p.key >= ? AND p.key < ? AND (p.key = ? OR ({not_compound}))",
        [base, base + "\U0010ffff", base, *_CONNECTORS],
    )


def _wanted(where: dict[str, Any] | None) -> tuple[str | tuple[str, ...] | None, str | None] | None:
    """The store's `where` forms search uses (room_id, corpus, their $and; a room's
    chain as room_id $in) as the (room or rooms, corpus) wanted, None for either meaning
    any; None for any other form."""
    if where is None:
        return None, None
    clauses = where.get("$and") if set(where) == {"$and"} else [where]
    want: dict[str, str | tuple[str, ...]] = {}
    for c in clauses or ():
        if not isinstance(c, dict) or len(c) != 1:
            return None
        ((field, value),) = c.items()
        if field == "room_id" and isinstance(value, dict) and set(value) == {"$in"}:
            value = tuple(value["$in"])
        if field not in ("room_id", "corpus") or field in want:
            return None
        if not isinstance(value, (str, tuple)) or (field == "corpus" and isinstance(value, tuple)):
            return None
        want[field] = value
    corpus = want.get("corpus")
    return want.get("room_id"), corpus if isinstance(corpus, str) else None
