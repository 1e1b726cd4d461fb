"""What the first hit quotes, judged against the item's conversation (issue 51).

For each item whose first hit is right (success@1: it cites a gold answer), the first
hit's quoted lines (`shown_event_ids`) against its conversation: the item's
`gold_thread_event_ids`, its `question_event_id` and its `gold_answer_event_ids`.

    quote precision@1   the mean share of quoted lines inside the conversation
    unrelated@1         the share of those first hits quoting a line from outside it
    lines@1             the mean number of lines they quote
    repeated@5          the share of replies (their first five hits, every item asked)
                        quoting one line under two hits

Padding a hit to a fixed number of lines may happen to quote the answer (shown@k
rewards it); these punish it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

COLUMNS = ("success@1", "shown@1", "quote precision@1", "unrelated@1", "lines@1", "repeated@5")


def conversations(queries: Path) -> dict[str, frozenset[str]]:
    """Per item id, the events of its conversation (question, thread, gold answers)."""
    out = {}
    with open(queries, encoding="utf-8") as f:
        for o in map(json.loads, filter(str.strip, f)):
            out[o["id"]] = frozenset(
                [
                    *o.get("gold_thread_event_ids", []),
                    *([o["question_event_id"]] if o.get("question_event_id") else []),
                    *o["gold_answer_event_ids"],
                ]
            )
    return out


def scores(
    items: Iterable, hits: dict, conversation: dict[str, frozenset[str]], variant: str
) -> dict:
    """quote precision@1, unrelated@1, lines@1, repeated@5 and the items behind them, for
    one variant. `items`: evalkit.Item (id, gold); `hits`: "id|variant" -> the hits' JSON."""
    per = {}
    replies = repeated = 0
    for item in items:
        got = hits.get(f"{item.id}|{variant}") or []
        if got:
            replies += 1
            quoted = [e for h in got[:5] for e in h.get("shown_event_ids", [])]
            repeated += len(quoted) != len(set(quoted))
        if not got or not item.gold & set(got[0]["event_ids"]):
            continue
        shown = list(got[0].get("shown_event_ids", []))
        inside = conversation.get(item.id, item.gold)
        per[item.id] = {"lines": len(shown), "outside": [e for e in shown if e not in inside]}
    n = len(per)
    return {
        "metrics": {
            "quote precision@1": round(
                sum(
                    (p["lines"] - len(p["outside"])) / p["lines"]
                    for p in per.values()
                    if p["lines"]
                )
                / max(1, sum(1 for p in per.values() if p["lines"])),
                4,
            ),
            "unrelated@1": round(sum(1 for p in per.values() if p["outside"]) / max(1, n), 4),
            "lines@1": round(sum(p["lines"] for p in per.values()) / max(1, n), 2),
            "repeated@5": round(repeated / max(1, replies), 4),
            "judged": n,
        },
        "unrelated_items": {i: p["outside"] for i, p in per.items() if p["outside"]},
    }


def annotate(results: dict, items: list, hits: dict, queries: Path) -> None:
    """Add the quote metrics to each variant's metrics of asking.evaluate's results."""
    conv = conversations(queries)
    for variant, r in results.items():
        q = scores(items, hits, conv, variant)
        r["metrics"].update(q["metrics"])
        r["unrelated_items"] = q["unrelated_items"]


def outside_lines(ds, items: list, unrelated: dict[str, list[str]]) -> str:
    """Each first hit quoting lines outside its item's conversation: the question, then
    each such line (sender, time, its start), read from the set's events. What to read
    to judge whether a line is off the topic or an answer the annotation left out."""
    from datetime import UTC, datetime

    import evalkit

    wanted = {e for ids in unrelated.values() for e in ids}
    found = {
        o["event_id"]: o
        for o in evalkit.load_events(ds.events.parent)
        if o.get("event_id") in wanted
    }
    query = {i.id: i.query for i in items}
    out = []
    for iid, ids in unrelated.items():
        out.append(f"  {iid}: {query.get(iid, '')[:90]}")
        for e in ids:
            o = found.get(e, {})
            when = datetime.fromtimestamp(o.get("origin_server_ts", 0) / 1000, UTC)
            body = " ".join(str(o.get("content", {}).get("body", "")).split())
            out.append(f"    {when:%m-%d %H:%M} {o.get('sender', '?')}: {body[:100]}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Compare settings on data dirs bench/retrieval.py built, in one process per run
    (the model loaded once, each set's index opened once a setting): the query alone,
    success@1/@5, shown@1, the quote figures and the off-topic questions refused."""
    import argparse
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import asking
    import evalkit

    p = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0] if main.__doc__ else "")
    p.add_argument("--eval-root", default=None)
    p.add_argument("--work", required=True, help="holding retrieval-<set>/ (retrieval.py --work)")
    p.add_argument("--sets", default="ubuntu,gitter,slack")
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME:MODULE.NAME=VALUE,...",
        help="a named setting: module constants to set (repeatable; NAME: alone is as shipped)",
    )
    p.add_argument(
        "--outside",
        action="store_true",
        help="also print each first hit's quoted lines outside the item's conversation",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    sets = evalkit.datasets(Path(args.eval_root) if args.eval_root else None)
    settings = [s.partition(":") for s in args.setting] or [("shipped", ":", "")]
    off = asking.offtopic_queries()
    report: dict = {}
    for name, _, patches in settings:
        saved = evalkit.set_constants(filter(None, patches.split(",")))
        try:
            for n in filter(None, args.sets.split(",")):
                ds = sets[n]
                items = evalkit.load_items(ds.root, ds.queries)
                config = Path(args.work) / f"retrieval-{n}" / "config.yaml"
                asked = [(f"{i.id}|query", [i.query]) for i in items]
                hits, _ = asking.search_in_process(asked + off, config)
                n_rel = {i.id: 1 for i in items}
                results = asking.evaluate(items, hits, n_rel, ("query",))
                annotate(results, items, hits, ds.queries)
                m = results["query"]["metrics"]
                m["offtopic refused"] = round(sum(1 for q, _ in off if not hits[q]) / len(off), 4)
                # Two folds by question (odd and even items): a threshold fitted on one
                # is reported on the other.
                folds = {}
                for f, part in (("even", items[0::2]), ("odd", items[1::2])):
                    r = asking.evaluate(part, hits, n_rel, ("query",))
                    annotate(r, part, hits, ds.queries)
                    folds[f] = r["query"]["metrics"]
                report.setdefault(name, {})[n] = {
                    "metrics": m,
                    "first_hit": results["query"]["first_hit"],
                    "unrelated_items": results["query"]["unrelated_items"],
                    "offtopic_answered": [q for q, _ in off if hits[q]],
                    "folds": folds,
                }
                print(
                    f"{name:<14} {n:<7} "
                    + " ".join(
                        f"{k}={m[k]:.3f}"
                        for k in (
                            "success@1",
                            "success@5",
                            "shown@1",
                            *COLUMNS[2:],
                            "offtopic refused",
                        )
                    ),
                    flush=True,
                )
                if args.outside:
                    print(outside_lines(ds, items, results["query"]["unrelated_items"]))
        finally:
            evalkit.restore_constants(saved)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
