"""Which gold answers a question's closing cuts off (issue 51; no model, seconds).

linkage.py closes the asker's question to messages that only name her once she thanked
someone or asked anew (and, with PAUSE_MINUTES, the conversation then paused). For each
dev item, the question's responses (linkage.responses, over the event log of a data dir
bench/retrieval.py built) with closing off and with each setting: the gold answers
linked without closing that a setting no longer links.

    bench/closing.py --work DIR [--setting NAME:linkage.CONST=json,...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import evalkit

    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.ingest.addressing import names
    from matrix_sources.indexer.search import linkage
    from matrix_sources.indexer.store.eventlog.log import EventLog

    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--eval-root", default=None)
    p.add_argument("--work", required=True, help="holding retrieval-<set>/ (retrieval.py --work)")
    p.add_argument("--sets", default="ubuntu,gitter,slack")
    p.add_argument("--setting", action="append", default=[], metavar="NAME:CONST=VALUE,...")
    args = p.parse_args(argv)
    settings = [s.partition(":")[::2] for s in args.setting] or [("shipped", "")]
    sets = evalkit.datasets(Path(args.eval_root) if args.eval_root else None)
    horizon = linkage.Horizon()
    shipped = {k: getattr(linkage, k) for k in ("CLOSES", "PAUSE_MINUTES")}
    for n in filter(None, args.sets.split(",")):
        log = EventLog(load_config(Path(args.work) / f"retrieval-{n}" / "config.yaml").database)
        lost: dict[str, list[str]] = {name: [] for name, _ in settings}
        with open(sets[n].queries, encoding="utf-8") as f:
            items = [json.loads(line) for line in f if line.strip()]
        for it in items:
            with log.db.locked() as db:
                row = db.execute(
                    "SELECT ts FROM events WHERE event_id = ?", (it["question_event_id"],)
                ).fetchone()
            if row is None:
                continue
            timeline = log.timeline.timeline_after(
                it["room_id"], None, row[0], row[0] + horizon.ms, 2 * horizon.messages
            )
            said = [m for m, _ in timeline]
            at = next(
                (i for i, m in enumerate(said) if m.event_id == it["question_event_id"]), None
            )
            if at is None:
                continue
            known = frozenset(x for m in said for x in names(m.sender))
            thread_of = {m.event_id: t for m, t in timeline if t is not None}

            def linked(changes: dict) -> set[str]:
                for k, v in {**shipped, **changes}.items():
                    setattr(linkage, k, v)
                try:
                    return {
                        link.answer.event_id
                        for link in linkage.responses(
                            said[at], said[at + 1 :], horizon, thread_of, known
                        )
                    }
                finally:
                    for k, v in shipped.items():
                        setattr(linkage, k, v)

            gold = set(it["gold_answer_event_ids"]) & linked({"CLOSES": False})
            for name, spec in settings:
                changes = {
                    k.rpartition(".")[2]: json.loads(v)
                    for k, _, v in (s.partition("=") for s in filter(None, spec.split(",")))
                }
                lost[name] += [f"{it['id']} {e}" for e in sorted(gold - linked(changes))]
        log.close()
        for name, cut in lost.items():
            items_cut = len({c.split()[0] for c in cut})
            print(f"{name:<12} {n:<7} gold answers cut off: {len(cut)} (items: {items_cut})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
