"""The derived filter's joints: its config (validated, errors naming the key), the event
log migration, reference hits cited by file and heading in replies, and the responder
recording what a reply quoted only once the reply was sent."""

from __future__ import annotations

import sqlite3
import time

import pytest

from matrix_sources.appservice.bot.replies import render_hits
from matrix_sources.appservice.bot.responder import RateLimiter, Responder
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.config import ConfigError, DerivedConfig, load_config
from matrix_sources.indexer.derived.filter import EmittedSection
from matrix_sources.indexer.ingest.events import MessageEvent, parse_event
from matrix_sources.indexer.records import EventID, Hit, Line, RefSource
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.eventlog.rows import DerivedMark
from tests.indexer.config.test_config_allowlist import write_config

# -- config ------------------------------------------------------------------------------


def test_derived_defaults_and_example(tmp_path):
    cfg = load_config(write_config(tmp_path))
    assert cfg.derived == DerivedConfig(0.8, 0.5, 8, 5)
    assert cfg.derived.reference_threshold < cfg.derived.answer_threshold


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("answer_threshold", 0, "above 0 and at most 1"),
        ("reference_threshold", 1.5, "above 0 and at most 1"),
        ("reference_threshold", "low", "must be a number"),
        ("shingle_size", 0, "1 to 16"),
        ("min_words", 3, "at least derived.shingle_size"),
    ],
)
def test_bad_derived_values_name_the_key(tmp_path, key, value, words):
    path = write_config(tmp_path, lambda d: d["derived"].__setitem__(key, value))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == f"derived.{key}" and words in str(info.value)


def test_a_config_without_the_block_gets_the_defaults(tmp_path):
    cfg = load_config(write_config(tmp_path, lambda d: d.pop("derived")))
    assert cfg.derived == DerivedConfig()


# -- event log -------------------------------------------------------------------------------


def test_migration_adds_the_columns_once_and_keeps_rows(tmp_path):
    path = tmp_path / "eventlog.sqlite3"
    db = sqlite3.connect(path)  # an event log from before the derived filter
    db.executescript("""CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
        event_id TEXT NOT NULL UNIQUE, room_id TEXT NOT NULL, sender TEXT NOT NULL,
        ts INTEGER NOT NULL, body TEXT, status TEXT NOT NULL, window_id TEXT,
        thread_root TEXT);
        INSERT INTO events (event_id, room_id, sender, ts, body, status)
        VALUES ('$old', '!r:x', '@a:x', 1, 'kept', 'pending');""")
    db.commit()
    db.close()
    for _ in range(2):  # idempotent
        log = EventLog(path)
        assert log.derived.mark_derived(
            [DerivedMark(EventID("$old"), "ops/a.md#A", "reference", 0.9, 0.5)]
        ) in (0, 1)
        log.close()
    log = EventLog(path)
    [d] = log.derived.derived_events()
    assert (d.event_id, d.artifact, d.kind, d.score, d.threshold) == (
        "$old",
        "ops/a.md#A",
        "reference",
        0.9,
        0.5,
    )
    with log.transaction(immediate=False) as cur:
        assert cur.execute("SELECT body FROM events").fetchone()[0] == "kept"
    log.close()


# -- replies -----------------------------------------------------------------------------------


def ref_hit() -> Hit:
    text = "## Disk space\n```bash\nsudo journalctl --vacuum-size=500M\n```\ndf -h /var"
    return Hit(
        "rabc",
        "",
        "ops.md › Disk space",
        "reference",
        (),
        (),
        0,
        0,
        0.5,
        text,
        ref=RefSource("ops", "ops.md", "Ops › Disk <space>"),
    )


def test_reference_hits_cite_file_and_heading_not_room_time_senders():
    reply = render_hits([ref_hit()], ("journalctl vacuum",))
    first = reply.body.split("\n")[1]
    assert first == "1. ops.md › Ops › Disk <space> · reference ops"
    assert "   > sudo journalctl --vacuum-size=500M" in reply.body
    assert "matrix.to" not in reply.body and "1970" not in reply.body
    assert "Disk &lt;space&gt;" in reply.formatted_body and "<space>" not in reply.formatted_body
    [section] = reply.sections
    assert section.text.startswith("ops.md › Ops › Disk <space>\n")
    assert "sudo journalctl --vacuum-size=500M" in section.text and section.sources == ()


def test_chat_hits_make_one_section_each_with_their_events():
    hit = Hit(
        "w1",
        "!r:x",
        "#ops:x",
        "chat",
        ("$a", "$b"),
        ("@alice:x",),
        0,
        60_000,
        0.5,
        "[1970-01-01 00:00] @alice:x: rotate the signing key\n"
        "[1970-01-01 00:01] @alice:x: and restart",
        lines=(
            Line("$a", "@alice:x", 0, "rotate the signing key"),
            Line("$b", "@alice:x", 0, "and restart"),
        ),
    )
    reply = render_hits([hit, ref_hit()], ("signing key",))
    assert len(reply.sections) == 2
    chat = reply.sections[0]
    assert chat.sources == ("$a", "$b")
    assert chat.text.split("\n")[1:] == ["alice: rotate the signing key", "alice: and restart"]
    assert list(reply.quoted[:2]) == ["rotate the signing key", "and restart"]


# -- responder --------------------------------------------------------------------------------


class OneHit:
    floor = None

    def search_with_closest(self, query):
        return [ref_hit()], None


def command(body: str) -> MessageEvent:
    ev = parse_event(
        {
            "type": "m.room.message",
            "room_id": "!r:x",
            "event_id": "$cmd",
            "sender": "@a:x",
            "origin_server_ts": 1,
            "content": {"msgtype": "m.text", "body": body},
        }
    )
    assert isinstance(ev, MessageEvent)
    return ev


async def test_answers_are_recorded_after_the_send_returned():
    """...dated when the send began: a paste that arrives before the record is written
    is still later than the answer it quotes."""
    events: list[str] = []
    recorded: list[tuple[str, list[EmittedSection], int]] = []
    sending: list[int] = []

    async def send(room_id, content):
        events.append("sent")
        sending.append(int(time.time() * 1000))
        return "$reply"

    def record(event_id, sections, sent_ms):
        events.append("recorded")
        recorded.append((event_id, sections, sent_ms))
        return len(sections)

    r = Responder(OneHit(), send, "@bot:x", limiter=RateLimiter(0), record_answer=record)
    await r.answer(command("!sources journalctl"))
    assert events == ["sent", "recorded"]
    assert recorded[0][0] == "$reply" and len(recorded[0][1]) == 1
    assert sending[0] - 5_000 < recorded[0][2] <= sending[0]
    await r.answer(command("!sources help"))  # nothing quoted, nothing recorded
    assert events[-1] == "sent" and len(recorded) == 1


async def test_no_artifact_when_the_send_failed_and_a_failed_record_does_not_raise(caplog):
    recorded = []

    async def failing_send(room_id, content):
        raise ConnectionError("homeserver down")

    now = [0.0]

    async def sleep(seconds):  # the homeserver stays down for the whole retry period
        now[0] += seconds

    r = Responder(
        OneHit(),
        failing_send,
        "@bot:x",
        limiter=RateLimiter(0),
        record_answer=lambda e, s, t: recorded.append(e) or 1,
        clock=Clock(now=lambda: now[0], sleep=sleep),
    )
    with pytest.raises(ConnectionError):
        await r.answer(command("!sources journalctl"))
    assert recorded == []

    async def send(room_id, content):
        return "$reply"

    def broken(event_id, sections, sent_ms):
        raise OSError("disk full")

    r = Responder(OneHit(), send, "@bot:x", limiter=RateLimiter(0), record_answer=broken)
    assert await r.answer(command("!sources journalctl")) is not None
    assert any(rec.message == "answer_record_failed" for rec in caplog.records)
