"""`matrix-sources search`: one query from the arguments, or a batch from a JSONL file.

The words of the command line are one text, as a newcomer types a question unquoted;
several texts come as `-t TEXT -t TEXT`, or one per line on standard input. Hits print
as the reply in the room reads (the matched question, the answers linked to it, the
permalinks); `--json` prints the hits as records.

Batch lines: {"id", "texts": [...], "top_k"?, "room"?, "corpus"?}; one output line per
query, {"id", "hits": [...]} or {"id", "error"}; the model is loaded once.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from indexer.components import Index
from indexer.config import Config
from indexer.ingest.allowlist import load_allowlist
from indexer.search.searcher import QueryError, SourceQuery

from ..bot.replies import render_hits
from .journal import allowlist_aliases
from .progress import load_model


def _query_from_line(obj: object, default_top_k: int) -> SourceQuery:
    if not isinstance(obj, dict):
        raise QueryError("line", "must be a JSON object")
    return SourceQuery.build(obj.get("texts"), obj.get("top_k", default_top_k),
                             obj.get("room"), obj.get("corpus"))


def run_search(cfg: Config, args) -> int:
    top = args.top if args.top is not None else cfg.search.default_top_k
    if args.queries:
        return _batch(cfg, Path(args.queries), top)
    room = args.room
    if room is not None:
        room = allowlist_aliases(cfg).get(room, room)
        if room not in load_allowlist(cfg.allowlist_path):
            print(f"error: --room {args.room!r} is not on the allowlist ({cfg.allowlist_path}), "
                  "so nothing of it is indexed; `matrix-sources allowlist list` shows "
                  "the rooms", file=sys.stderr)
            return 2
    texts = query_texts(args)
    if not texts:
        print("error: texts: give the question (matrix-sources search how do I ...), "
              "-t TEXT for each of several texts, or one text per line on standard input",
              file=sys.stderr)
        return 2
    try:
        query = SourceQuery.build(texts, top, room, args.corpus)
    except QueryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    index = Index.open(cfg, load_model(cfg))
    hits = index.searcher.search(query)
    index.close()
    if args.json:
        print(json.dumps({"hits": [h.to_json() for h in hits]}, ensure_ascii=False))
        return 0
    print(render_hits(hits, query.texts, cfg.homeserver.domain).body)
    return 0


def query_texts(args) -> list[str]:
    """The words as one text, the -t texts, or standard input's lines (in that order of
    preference: a question typed after the command is what was meant)."""
    texts = list(args.texts)
    if args.words:
        texts.insert(0, " ".join(args.words))
    if not texts and not sys.stdin.isatty():
        texts = [line.strip() for line in sys.stdin if line.strip()]
    return texts


def _batch(cfg: Config, path: Path, top: int) -> int:
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 1
    # A batch builds the keyword leg's postings first (seconds for thousands of windows),
    # as the service does: each query then matches its words in memory instead of
    # scanning the event log once per word. A snapshot: writes made meanwhile by a
    # running service are not followed.
    index = Index.open(cfg, load_model(cfg), postings=True)
    terms = index.store.terms
    while terms is not None and not terms.ready.wait(0.5):
        if not any(t.name == "term-index" for t in threading.enumerate()):
            break  # the build failed (logged): the leg scans the event log instead
    errors = 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            qid: object = None
            try:
                obj = json.loads(line)
                qid = obj.get("id") if isinstance(obj, dict) else None
                query = _query_from_line(obj, top)
            except json.JSONDecodeError:
                errors += 1
                print(json.dumps({"id": qid, "line": n, "error": "line: not valid JSON"}))
                continue
            except QueryError as e:
                errors += 1
                print(json.dumps({"id": qid, "line": n, "error": str(e)}))
                continue
            hits = index.searcher.search(query)
            print(json.dumps({"id": qid, "hits": [h.to_json() for h in hits]},
                             ensure_ascii=False), flush=True)
    index.close()
    return 1 if errors else 0
