"""`matrix-sources import`: Matrix events from a JSONL file through the same gate and
pipeline as live ingest. Room facts come from the state events in the file.

Events are admitted in batches; windows are embedded once each, after all events are
in the event log, in large batches. Re-running an import is harmless: events already
in the log are skipped, and pending ones are picked up.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..ingest.admit import AdmitResult, Ingest
from .pipeline import Pipeline

ADMIT_BATCH = 2000


@dataclass
class ImportSummary:
    read: int = 0
    bad_lines: list[int] = field(default_factory=list)
    admitted: AdmitResult = field(default_factory=AdmitResult)
    indexed: int = 0
    windows: int = 0
    derived: int = 0  # quoted an artifact: kept in the log, not indexed

    def lines(self) -> list[str]:
        a = self.admitted
        out = [
            f"read        {self.read} events",
            f"new         {a.appended} messages appended to the event log"
            f" ({a.accepted - a.appended} already there)",
            f"indexed     {self.indexed} messages in {self.windows} windows upserted",
        ]
        if self.derived:
            out.append(
                f"derived     {self.derived} (quote the bot's answers or a reference "
                "corpus; `verify --exclusions` lists them)"
            )
        for rule, n in sorted(a.refused.items()):
            out.append(f"refused     {n} ({rule})")
        for reason, n in sorted(a.skipped.items()):
            out.append(f"skipped     {n} ({reason})")
        if a.commands:
            out.append(f"skipped     {a.commands} (!sources commands)")
        if self.bad_lines:
            shown = ", ".join(map(str, self.bad_lines[:10]))
            out.append(
                f"bad lines   {len(self.bad_lines)} not JSON (lines {shown}"
                + (", ..." if len(self.bad_lines) > 10 else "")
                + ")"
            )
        return out


def read_jsonl(path: Path, bad: list[int]) -> Iterator[object]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                bad.append(n)


def import_events(
    path: Path,
    ingest: Ingest,
    pipeline: Pipeline,
    on_read: Callable[[int], None] | None = None,
    on_indexed: Callable[[int], None] | None = None,
    on_indexing: Callable[[], None] | None = None,
) -> ImportSummary:
    """on_indexing is called once every event is in the event log, before indexing."""
    summary = ImportSummary()
    batch: list[object] = []

    def flush() -> None:
        summary.admitted.merge(ingest.admit(batch, source="import"))
        if on_read:
            on_read(len(batch))
        batch.clear()

    for raw in read_jsonl(path, summary.bad_lines):
        summary.read += 1
        batch.append(raw)
        if len(batch) >= ADMIT_BATCH:
            flush()
    flush()
    if on_indexing:
        on_indexing()
    before = pipeline.stats.windows_upserted
    excluded = pipeline.derived.excluded if pipeline.derived else 0
    summary.indexed = pipeline.process_all(on_indexed)
    summary.windows = pipeline.stats.windows_upserted - before
    summary.derived = (pipeline.derived.excluded if pipeline.derived else 0) - excluded
    return summary
