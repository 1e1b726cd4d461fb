"""`matrix-sources search`: one query from the arguments, or a batch from a JSONL file.

The words of the command line are one text, as a newcomer types a question unquoted;
several texts come as `-t TEXT -t TEXT`, or one per line on standard input. Hits print
as the reply in the room reads (the matched question, the answers linked to it, the
permalinks); `--json` prints the hits as records.

While the service runs, the search is its: asked through its search API (apiclient.py),
so no model is loaded here and no second process opens the store. Stopped, the data dir
is opened here, as the service would. Both give the same hits, the same JSON and the same
text (rendered here from the hits' JSON in both cases).

Batch lines: {"id", "texts": [...], "top_k"?, "room"?, "corpus"?}; one output line per
query, {"id", "hits": [...]} or {"id", "error"}; the model, when it is loaded, once.

Exit status: 0 answered (hits or none); 1 an error; 2 a query to fix; 75 (EX_TEMPFAIL)
the service is starting or rate-limits: try again later.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.config import Config, ConfigError
from matrix_sources.indexer.records import Hit
from matrix_sources.indexer.search.language import english_only_note
from matrix_sources.indexer.search.query import QueryError, SourceQuery

from .apiclient import TEMPORARY, ServiceClient, ServiceError, Unreachable, describe, find_service

if TYPE_CHECKING:
    from matrix_sources.indexer.components import Index

EX_USAGE = 2
EX_TEMPFAIL = 75
BATCH_MAX_WAIT = 60.0  # seconds a batch line waits out a rate limit before it fails


def note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr, flush=True)


class Searching:
    """Where hits come from, asked again at each search (the service may start or stop
    under a long batch, or an MCP session): the running service's API, else the data
    dir opened here (the model loaded on the first such search, then kept)."""

    def __init__(self, cfg: Config, clock: Clock | None = None) -> None:
        """Words are matched in the event log's keyword index (the service builds it
        for an event log from before it; meanwhile a local search scans the text)."""
        self.cfg = cfg
        self.clock = clock or REAL  # looked up now: tests put a fake clock there
        self._index: Index | None = None
        self._said: set[str] = set()
        self.via: str = ""  # "service" or "data dir": how the last search was answered
        # What the last search's "nothing matches" adds ("" for nothing): a question the
        # English-only model does not read as English (language.english_only_note).
        self.note: str = ""

    def note_field(self) -> dict[str, str]:
        """{"note": ...} for a JSON answer when the last search had one, else {}."""
        return {"note": self.note} if self.note else {}

    def _note_once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            note(message)

    def service(self) -> ServiceClient | None:
        try:
            return find_service(self.cfg)
        except ConfigError as e:  # a service of a release before the API, say
            self._note_once(
                f"a service holds {self.cfg.data_dir}, but its API token is not "
                f"to be had ({e}); searching the data dir itself"
            )
            return None

    def ask(self, query: SourceQuery, wait_out_limits: bool = False) -> list[dict]:
        """The hits' JSON (`Hit.to_json`). ServiceError when the service refused."""
        client = self.service()
        if client is not None:
            if self._index is not None:  # the service started: leave the store to it
                self.close()
            try:
                return self._from_service(client, query, wait_out_limits)
            except Unreachable as e:
                self._note_once(
                    f"{client.holder} holds {self.cfg.data_dir} and {e}; "
                    "searching the data dir itself"
                )
        self.via = "data dir"
        index = self._local()
        hits = [h.to_json() for h in index.searcher.search(query)]
        note = None if hits else english_only_note(index.embedder)
        self.note = note(query.texts) if note is not None else ""
        return hits

    def _from_service(
        self, client: ServiceClient, query: SourceQuery, wait_out_limits: bool
    ) -> list[dict]:
        waited = 0.0
        while True:
            try:
                hits, self.note = client.search(query)
                self.via = "service"
                return hits
            except ServiceError as e:
                wait = e.retry_after or 1.0
                if not (
                    wait_out_limits and e.status in TEMPORARY and waited + wait <= BATCH_MAX_WAIT
                ):
                    raise
                self.clock.sleep_blocking(wait)
                waited += wait

    def _local(self):
        if self._index is None:
            from matrix_sources.indexer.components import Index

            from .progress import load_model

            self._index = Index.open(self.cfg, load_model(self.cfg))
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None


def render(cfg: Config, hits: list[dict], texts: tuple[str, ...], note: str = "") -> str:
    """The hits as the reply in the room reads, from their JSON (whichever process
    searched); `note`: what "nothing matches" adds (Searching.note)."""
    from ..bot.replies import render_hits

    return render_hits(
        [Hit.from_search_json(h) for h in hits],
        texts,
        cfg.homeserver.domain,
        nothing_note=note,
        why="`matrix-sources search --why 1` and the same question",
    ).body


def run_search(cfg: Config, args) -> int:
    top = args.top if args.top is not None else cfg.search.default_top_k
    if args.queries:
        return _batch(cfg, Path(args.queries), top)
    room = args.room
    if room is not None:
        from matrix_sources.indexer.ingest.allowlist import load_allowlist

        from .journal import allowlist_aliases

        room = allowlist_aliases(cfg).get(room, room)
        if room not in load_allowlist(cfg.allowlist_path):
            print(
                f"error: --room {args.room!r} is not on the allowlist ({cfg.allowlist_path}), "
                "so nothing of it is indexed; `matrix-sources allowlist list` shows "
                "the rooms",
                file=sys.stderr,
            )
            return EX_USAGE
    texts = query_texts(args)
    if not texts:
        print(
            "error: texts: give the question (matrix-sources search how do I ...), "
            "-t TEXT for each of several texts, or one text per line on standard input",
            file=sys.stderr,
        )
        return EX_USAGE
    try:
        query = SourceQuery.build(texts, top, room, args.corpus)
    except QueryError as e:
        print(f"error: {e}", file=sys.stderr)
        return EX_USAGE
    searching = Searching(cfg)
    try:
        hits = searching.ask(query)
    except ServiceError as e:
        client = searching.service()
        print(f"error: {describe(e, client, cfg) if client else e.message}", file=sys.stderr)
        return EX_TEMPFAIL if e.status in TEMPORARY else EX_USAGE if e.status == 400 else 1
    finally:
        if args.why is None or searching.via != "data dir":
            searching.close()
    if args.why is not None:
        try:
            return _why(cfg, args.why, hits, query, searching)
        finally:
            searching.close()
    if args.json:
        print(json.dumps({"hits": hits, **searching.note_field()}, ensure_ascii=False))
        return 0
    print(render(cfg, hits, query.texts, searching.note))
    return 0


def _why(cfg: Config, n: int, hits: list[dict], query: SourceQuery, searching: Searching) -> int:
    """`search --why N`: why hit N ranked where it did, as `!sources why N` says it;
    after "nothing matches", why 1 is the closest hit below the floor and the floor it
    missed (the data dir is searched here for it: the service's API returns hits only)."""
    from ..bot.replies import render_why

    if hits:
        if not 1 <= n <= len(hits):
            print(
                f"error: --why {n}: the search had {len(hits)} hit{'s' * (len(hits) != 1)}; "
                f"ask about 1 to {len(hits)}",
                file=sys.stderr,
            )
            return EX_USAGE
        hit = Hit.from_search_json(hits[n - 1])
        print(render_why(n, hit, query.texts, cfg.search.rrf_k).body)
        return 0
    if n != 1:
        print("error: --why: nothing matched; --why 1 explains the closest one", file=sys.stderr)
        return EX_USAGE
    if searching.via == "service":
        print(
            "Nothing matched. The running service tells the closest message only in the "
            "room (`!sources why 1` after the same question); stopped, `matrix-sources "
            "search --why 1` here explains it."
        )
        return 0
    searcher = searching._local().searcher
    _, closest = searcher.search_with_closest(query)
    if closest is None:
        print("Nothing matched, and nothing in the index is near it.")
        return 0
    print(
        render_why(
            1, closest, query.texts, cfg.search.rrf_k, floor=searcher.floor_for(query.texts)
        ).body
    )
    return 0


def query_texts(args) -> list[str]:
    """The words as one text, the -t texts, or standard input's lines (in that order of
    preference: a question typed after the command is what was meant)."""
    texts = list(args.texts)
    if args.words:
        texts.insert(0, " ".join(args.words))
    if not texts and not sys.stdin.isatty():
        if isinstance(sys.stdin, io.TextIOWrapper):
            # A byte that is not UTF-8 becomes a lone surrogate, refused naming its text
            # as one on the command line is, not a traceback.
            sys.stdin.reconfigure(errors="surrogateescape")
        texts = [line.strip() for line in sys.stdin if line.strip()]
    return texts


def _batch(cfg: Config, path: Path, top: int) -> int:
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 1
    searching = Searching(cfg)
    errors = 0
    try:
        # A byte that is not UTF-8 fails its own line (as a lone surrogate), not the batch.
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                qid: object = None
                try:
                    obj = json.loads(line)
                    qid = obj.get("id") if isinstance(obj, dict) else None
                    if isinstance(obj, dict):
                        obj = {k: v for k, v in obj.items() if k != "id"}
                    query = SourceQuery.from_json(obj, top)
                    hits = searching.ask(query, wait_out_limits=True)
                except json.JSONDecodeError:
                    errors += 1
                    print(json.dumps({"id": qid, "line": n, "error": "line: not valid JSON"}))
                    continue
                except QueryError as e:
                    errors += 1
                    field = "line" if e.field == "body" else e.field
                    print(json.dumps({"id": qid, "line": n, "error": f"{field}: {e.message}"}))
                    continue
                except ServiceError as e:
                    errors += 1
                    print(json.dumps({"id": qid, "line": n, "error": e.message}))
                    continue
                answered = {"id": qid, "hits": hits, **searching.note_field()}
                print(json.dumps(answered, ensure_ascii=False), flush=True)
    finally:
        searching.close()
    return 1 if errors else 0
