"""Log setup (appservice/logs.py): once per process, without swapping other handlers, and
writing to the stderr of the moment (a test's capture is closed after the test)."""

from __future__ import annotations

import io
import logging
import sys

from appservice.logs import setup_logging


def test_setup_is_idempotent_and_keeps_other_handlers(monkeypatch):
    root = logging.getLogger()
    before = list(root.handlers)
    other = logging.NullHandler()
    root.addHandler(other)
    try:
        setup_logging("INFO")
        setup_logging("DEBUG", as_json=True)
        ours = [h for h in root.handlers if h not in before and h is not other]
        assert len(ours) <= 1 and other in root.handlers
        first = io.StringIO()
        monkeypatch.setattr(sys, "stderr", first)
        logging.getLogger("matrix_sources.probe").warning("probe_event", extra={"n": 1})
        assert '"event": "probe_event"' in first.getvalue()
        first.close()  # a test's capture, gone
        second = io.StringIO()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("matrix_sources.probe").warning("probe_again")
        assert "probe_again" in second.getvalue()
    finally:
        root.removeHandler(other)
        for h in [h for h in root.handlers if h not in before]:
            root.removeHandler(h)
