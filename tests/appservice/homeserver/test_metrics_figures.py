"""/metrics reads the event log's aggregates off the event loop, one read at a time, and
serves the figures read last meanwhile (the blocking it avoids is measured by
bench/metrics_loop.py)."""

from __future__ import annotations

import threading

from matrix_sources.appservice.homeserver import metrics
from matrix_sources.indexer.clock import Clock


async def test_a_scrape_never_waits_for_the_read_and_reads_one_at_a_time(monkeypatch, tmp_path):
    release, reads = threading.Event(), []

    def slow_read(path):
        reads.append(path)
        release.wait(10)
        return ("figures", len(reads))

    monkeypatch.setattr(metrics, "lag_report_at", slow_read)
    now = [0.0]
    figures = metrics.EventLogFigures(
        tmp_path / "eventlog.sqlite3", max_age=5.0, clock=Clock(now=lambda: now[0])
    )
    first = figures.refresh()
    assert first is not None and figures.figures is None  # the caller did not wait
    assert figures.refresh() is first  # one read at a time
    release.set()
    await first
    assert figures.figures == ("figures", 1) and len(reads) == 1
    assert figures.refresh() is None  # young enough
    now[0] += 6
    await figures.refresh()
    assert len(reads) == 2
