"""Log setup (appservice/logs.py): once per process, without swapping other handlers, and
writing to the stderr of the moment (a test's capture is closed after the test)."""

from __future__ import annotations

import io
import logging
import sys

from matrix_sources.appservice.logs import setup_logging


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


def test_a_refused_join_is_one_line_naming_the_room_the_errcode_and_the_fix(caplog):
    """A room the homeserver will not let the bot join is logged as one line, without
    a traceback (an allowlist of unreachable rooms logged 9,528 of them at every
    start); an unexpected error keeps its traceback."""
    from mautrix.errors import MForbidden, MUnknown

    from matrix_sources.appservice.homeserver.joining import join_failed
    from matrix_sources.appservice.logs import KeyValueFormatter

    caplog.set_level(logging.WARNING, logger="matrix_sources")
    bot = "@sourcesbot:example.org:8448"
    join_failed(
        "!gone:example.org",
        MUnknown(
            404,
            "Can't join remote room because no servers that are in the room have been provided.",
        ),
        bot,
        [],
    )
    join_failed("!private:example.org", MForbidden(403, "You are not invited"), bot, [])
    join_failed("!odd:example.org", RuntimeError("boom"), bot, ["other.org"])
    unreachable, refused, odd = caplog.records[-3:]
    line = KeyValueFormatter().format(unreachable)
    assert "\n" not in line and unreachable.exc_info is None
    assert "room_id=!gone:example.org" in line and "errcode=M_UNKNOWN" in line
    # Nobody the bot knows is in the room: the fix names a via server or an invite.
    assert "?via=SERVER" in line and f"invite {bot}" in line
    line = KeyValueFormatter().format(refused)
    assert "errcode=M_FORBIDDEN" in line and "take the room off the allowlist" in line
    assert odd.exc_info is not None and "RuntimeError: boom" in KeyValueFormatter().format(odd)
