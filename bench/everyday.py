"""Everyday questions asked of chat they have no answer in: the share that gets "nothing
matches", on the dev sets' chat and on chat never tuned on.

    .venv/bin/python bench/everyday.py --work DIR [--sets ubuntu,gitter,slack,ubuntu-test]
                                       [--patch MODULE.NAME=VALUE] [--out FILE]

The questions (bench/everyday-queries.jsonl, 120 in English: sleep, travel papers, sport,
food and drink, health, money, the home, cars, pets, the garden, work, trivia) were
written for issue 51 after its report that held-out everyday questions had matched IRC
windows; no threshold is fitted on them. They are asked in one process (bench/asking.py)
of the data dirs bench/retrieval.py built in DIR (retrieval-<set>/). `ubuntu-test` is the
chat of the Ubuntu IRC test split, whose events are public and whose items are held out:
it is imported into DIR/retrieval-ubuntu-test on first use (about 3 minutes). Prints per
set the questions refused, by half (odd and even numbers), and each answered question
with its first hit's score and first quoted line; writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evalkit  # noqa: E402
from asking import search_in_process  # noqa: E402

EVERYDAY = Path(__file__).resolve().parent / "everyday-queries.jsonl"
TEST_CHAT = "ubuntu-test"


def questions() -> list[tuple[str, str]]:
    with open(EVERYDAY, encoding="utf-8") as f:
        return [(o["id"], o["query"]) for o in map(json.loads, filter(str.strip, f))]


def half(qid: str) -> str:
    return "odd" if int(qid.rsplit("-", 1)[1]) % 2 else "even"


def test_chat(eval_root: Path | None) -> evalkit.Dataset:
    """The Ubuntu IRC test split's chat, as a set with no items of its own."""
    ubuntu = evalkit.datasets(eval_root)["ubuntu"].root
    split = ubuntu / "test"
    return evalkit.Dataset(
        TEST_CHAT,
        "Ubuntu IRC retrieval benchmark",
        ubuntu,
        split / "events.jsonl",
        split / "rooms.json",
        split / "queries.jsonl",  # held out: not here, and never read
    )


def data_dir(name: str, work: Path, eval_root: Path | None) -> Path:
    d = work / f"retrieval-{name}"
    if (d / "config.yaml").exists():
        return d
    if name != TEST_CHAT:
        raise SystemExit(
            f"error: {d} holds no data dir: build it with `bench/retrieval.py --sets {name} "
            f"--work {work}`"
        )
    import retrieval

    print(f"{TEST_CHAT}: importing the Ubuntu IRC test split's chat into {d} ...", flush=True)
    retrieval.build_index(test_chat(eval_root), d, [])
    return d


def ask(config: Path, asked: list[tuple[str, str]]) -> dict:
    hits, _ = search_in_process([(qid, [q]) for qid, q in asked], config)
    answered = {qid: hits[qid][0] for qid, _ in asked if hits[qid]}
    refused = {
        h: sum(1 for qid, _ in asked if half(qid) == h and qid not in answered)
        for h in ("odd", "even")
    }
    total = {h: sum(1 for qid, _ in asked if half(qid) == h) for h in ("odd", "even")}
    return {
        "asked": len(asked),
        "refused": sum(refused.values()),
        "refused_by_half": refused,
        "asked_by_half": total,
        "answered": {
            qid: {
                "score": round(h["similarity"], 3) if h.get("similarity") is not None else None,
                "line": (h.get("shown") or [{}])[0].get("body", "")[:100],
            }
            for qid, h in answered.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default=str(evalkit.OUT_DIR), help="holding retrieval-<set>/")
    p.add_argument("--eval-root", default=None, help="as bench/retrieval.py's")
    p.add_argument("--sets", default=f"ubuntu,gitter,slack,{TEST_CHAT}")
    p.add_argument(
        "--patch",
        action="append",
        default=[],
        metavar="MODULE.NAME=VALUE",
        help="set a module constant first (JSON value), as bench/retrieval.py's",
    )
    p.add_argument("--out", default=str(evalkit.OUT_DIR / "everyday.json"))
    args = p.parse_args(argv)
    eval_root = Path(args.eval_root) if args.eval_root else None
    saved = evalkit.set_constants(args.patch)
    asked = questions()
    text = dict(asked)
    report: dict = {"patch": args.patch, "sets": {}}
    try:
        for name in args.sets.split(","):
            d = data_dir(name, Path(args.work), eval_root)
            r = ask(d / "config.yaml", asked)
            report["sets"][name] = r
            by = r["refused_by_half"]
            n = r["asked_by_half"]
            print(
                f"{name}: {r['refused']}/{r['asked']} everyday questions get nothing "
                f"(odd {by['odd']}/{n['odd']}, even {by['even']}/{n['even']})"
            )
            for qid, a in r["answered"].items():
                print(f"  {qid:13} {a['score']}  {text[qid][:60]!r} -> {a['line'][:60]!r}")
    finally:
        evalkit.restore_constants(saved)
    evalkit.write_json(Path(args.out), report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
