"""Shared by the retrieval benchmarks: where the eval data is, its items, the metrics,
the table and the attribution the data's license asks for.

The data (../shared/eval/ubuntu-irc from the repository root by default) is read where
it lies at run time and never copied into this repository.

Metrics, per item, over the first 10 results (a "result" is a window for matrix-sources,
an event for Synapse's /search; `relevant` says which results count as hits):

    success@k   1 if any of the first k results is relevant
    MRR@10      1 / rank of the first relevant result (0 if none in the first 10)
    nDCG@10     binary gains, DCG = sum rel_i / log2(i + 1); the ideal ranking puts
                min(R, 10) relevant results first, R = how many relevant results exist
                (windows holding a gold answer; events within 3 of one)
"""

from __future__ import annotations

import importlib
import json
import math
import os
import platform
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV_EVAL_DIR = "MATRIX_SOURCES_EVAL_DIR"
DEFAULT_EVAL_DIR = REPO.parent / "shared" / "eval" / "ubuntu-irc"
OUT_DIR = REPO / "bench" / "out"
KS = (1, 5, 10)
DEPTH = 10
METRICS = ("success@1", "success@5", "success@10", "mrr@10", "ndcg@10")
# What a person reads: a gold answer among the lines the reply quotes for one of the
# first 5 hits (`shown_event_ids`).
SHOWN_AT = 5


def eval_dir(flag: str | None) -> Path:
    """--eval-dir, else $MATRIX_SOURCES_EVAL_DIR, else ../shared/eval/ubuntu-irc."""
    d = Path(flag or os.environ.get(ENV_EVAL_DIR) or DEFAULT_EVAL_DIR).resolve()
    if not (d / "README.md").is_file():
        raise SystemExit(
            f"error: {d}: no eval data here (README.md missing); pass "
            f"--eval-dir or set {ENV_EVAL_DIR}"
        )
    return d


@dataclass(frozen=True)
class Item:
    id: str
    room_id: str
    query: str
    keywords: tuple[str, ...]
    gold: frozenset[str]


@dataclass(frozen=True)
class Dataset:
    """One retrieval dev set: where its events, rooms and items are."""

    name: str
    title: str  # for the attribution line
    root: Path  # the folder holding its README (license and attribution)
    events: Path
    rooms: Path
    queries: Path


# Eval data beside the repository: ../shared/eval/<name>/ (never copied into it).
DEFAULT_EVAL_ROOT = REPO.parent / "shared" / "eval"


def datasets(eval_root: Path | None = None) -> dict[str, Dataset]:
    """The dev sets the retrieval benchmark runs: Ubuntu IRC (saturated), Gitter
    developer chat (slow rooms, answers hours after the question) and Slack developer
    chat (never tuned on before issue 22; its license is not stated: measurement only)."""
    root = Path(eval_root or os.environ.get("MATRIX_SOURCES_EVAL_ROOT") or DEFAULT_EVAL_ROOT)
    ubuntu, gitter, slack = root / "ubuntu-irc", root / "gitter", root / "slack"
    return {
        "ubuntu": Dataset(
            "ubuntu",
            "Ubuntu IRC retrieval benchmark",
            ubuntu,
            ubuntu / "dev" / "events.jsonl",
            ubuntu / "dev" / "rooms.json",
            ubuntu / "dev" / "queries.jsonl",
        ),
        "gitter": Dataset(
            "gitter",
            "Gitter developer-chat retrieval benchmark",
            gitter,
            gitter / "events.jsonl",
            gitter / "rooms.json",
            gitter / "dev-queries.jsonl",
        ),
        "slack": Dataset(
            "slack",
            "Slack developer-chat retrieval benchmark",
            slack,
            slack / "events.jsonl",
            slack / "rooms.json",
            slack / "dev-queries.jsonl",
        ),
    }


def load_items(split_dir: Path, queries: Path | None = None) -> list[Item]:
    out = []
    with open(queries or split_dir / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                out.append(
                    Item(
                        o["id"],
                        o["room_id"],
                        o["query"],
                        tuple(o["user_keywords"]),
                        frozenset(o["gold_answer_event_ids"]),
                    )
                )
    return out


def load_events(split_dir: Path) -> Iterable[dict]:
    with open(split_dir / "events.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def room_ids(split_dir: Path, rooms: Path | None = None) -> list[str]:
    return list(json.loads((rooms or split_dir / "rooms.json").read_text(encoding="utf-8")))


# -- metrics ---------------------------------------------------------------------------


def item_scores(relevant: Sequence[bool], n_relevant: int) -> dict[str, float]:
    """Metrics of one ranked result list (True where the result is a hit)."""
    rel = list(relevant[:DEPTH])
    first = next((i for i, r in enumerate(rel, 1) if r), None)
    dcg = sum(1 / math.log2(i + 1) for i, r in enumerate(rel, 1) if r)
    ideal = sum(1 / math.log2(i + 1) for i in range(1, min(max(n_relevant, 1), DEPTH) + 1))
    out = {f"success@{k}": float(first is not None and first <= k) for k in KS}
    out["mrr@10"] = 1 / first if first else 0.0
    out["ndcg@10"] = dcg / ideal
    out["first_hit"] = first or 0
    return out


def aggregate(per_item: Sequence[dict[str, float]]) -> dict[str, float]:
    n = len(per_item) or 1
    return {m: round(sum(s[m] for s in per_item) / n, 4) for m in METRICS}


# -- output ----------------------------------------------------------------------------


def table(
    rows: Sequence[tuple[str, dict[str, float]]], title: str = "", metrics: Sequence[str] = METRICS
) -> str:
    head = f"{'variant':<34}" + "".join(f"{m:>11}" for m in metrics)
    lines = [title] if title else []
    lines += [head, "-" * len(head)]
    for name, m in rows:
        lines.append(
            f"{name:<34}" + "".join(f"{m[k]:>11.3f}" if k in m else f"{'':>11}" for k in metrics)
        )
    return "\n".join(lines)


def attribution(eval_root: Path, title: str = "Ubuntu IRC retrieval benchmark") -> str:
    """The source, license and citation paragraphs of the eval README, verbatim."""
    text = (eval_root / "README.md").read_text(encoding="utf-8")
    m = re.search(r"## Source, license, attribution\n(.*?)(?=\n## )", text, re.S)
    body = m.group(1).strip() if m else text
    return f"Data: {title} ({eval_root})\n" + body


def machine() -> dict:
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def set_constants(specs: Iterable[str]) -> list[tuple[object, str, object]]:
    """Set module constants for a run (`MODULE.NAME=VALUE`, VALUE as JSON): the
    `--patch` and `--setting` of the benchmarks. Returns what to hand to
    `restore_constants`; a name the module lacks is an error, not a silent new global."""
    saved: list[tuple[object, str, object]] = []
    for spec in specs:
        target, eq, raw = spec.partition("=")
        module, _, name = target.rpartition(".")
        if not eq or not module:
            raise SystemExit(f"error: {spec!r}: write MODULE.NAME=VALUE")
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            raise SystemExit(f"error: {module} has no {name}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SystemExit(f"error: {spec!r}: the value must be JSON ({e})") from None
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, value)
    return saved


def restore_constants(saved: list[tuple[object, str, object]]) -> None:
    for mod, name, value in reversed(saved):
        setattr(mod, name, value)
