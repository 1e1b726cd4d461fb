"""The digest (issue 47 item 4) on a fake clock: the report of every room posted to the
moderators' room each interval; never into an allowlisted room (refused at start, and
skipped if listed later); a room the bot left gives a log event, a `doctor` line and no
crash; moderation.keep_days expires the report's data."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mautrix.errors import MForbidden

from matrix_sources.appservice.bot.digest import DUE_KEY, PROBLEM_KEY
from matrix_sources.appservice.cli.doctor import check_digest
from matrix_sources.appservice.homeserver import service as service_module
from matrix_sources.appservice.homeserver.startup import StartupError
from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.datadir import service_registration
from tests.fakeclock import FakeClock
from tests.indexer.store.test_history import db_bytes
from tests.moderationkit import ALICE, BOB, ROOM, T0, close_moderated, make_data_dir, open_moderated

MODS = "!mods:example.org"
DAY = 86_400.0
CANARY = "kestrel-digest-4c1f mirror outage"


async def until(cond) -> None:
    while not cond():  # threads finish in real time; the test sleeps none
        await asyncio.sleep(0)


async def asleep(m, due: float) -> None:
    """The next digest is due at `due` (kept in the event log) and both chores wait."""
    await asyncio.wait_for(
        until(
            lambda: m.service.eventlog.get_meta(DUE_KEY) == str(int(due)) and m.clock.sleeping == 2
        ),
        30,
    )


def digests(m) -> list[str]:
    return [c["body"] for room, c in m.matrix.sent if room == MODS]


@pytest.fixture
async def moderated(tmp_path):
    clock = FakeClock(T0 / 1000)
    m = await open_moderated(
        make_data_dir(tmp_path, moderation={"digest_room": MODS, "digest_interval": "1d"}), clock
    )
    m.clock = clock
    yield m
    await close_moderated(m)


async def start(m) -> None:
    assert await m.bot.prepare() == ""
    m.bot.resume()
    await until(lambda: m.clock.sleeping == 2)  # the digest's wait, the expiry's


async def test_the_report_of_every_room_is_posted_each_interval(moderated, caplog):
    m = moderated
    m.say("rotate the signing key with the rotate-key command, then restart")
    await m.ask("$q1", "how do I rotate the signing key", ALICE)
    await m.ask("$q2", CANARY, BOB)
    await start(m)
    await m.clock.advance(DAY - 1)
    assert digests(m) == []
    await m.clock.advance(1)
    await asyncio.wait_for(until(lambda: len(digests(m)) == 1), 30)
    [first] = digests(m)
    assert first.startswith("Questions to the bot, last 1 day")
    assert f"{ROOM}: 2 asked, 1 answered, 1 nothing matches" in first
    assert f"1x {CANARY}" in first and "%24q2" in first
    await asleep(m, T0 / 1000 + 2 * DAY)

    await m.clock.advance(DAY)
    await asyncio.wait_for(until(lambda: len(digests(m)) == 2), 30)
    assert f"{ROOM}: 0 asked" in digests(m)[1]  # the last day's: nobody asked
    await asleep(m, T0 / 1000 + 3 * DAY)

    # Listed since the start: never posted there.
    m.service.gate.allowlist = m.service.gate.allowlist | {MODS}
    with caplog.at_level(logging.ERROR, logger="matrix_sources"):
        await m.clock.advance(DAY)
        await asyncio.wait_for(
            until(lambda: any(r.msg == "digest_refused" for r in caplog.records)), 30
        )
    assert len(digests(m)) == 2


async def test_a_room_the_bot_left_is_logged_kept_for_doctor_and_tried_again(moderated, caplog):
    m = moderated

    real = m.matrix.send

    async def send(room, content):
        if room == MODS:
            raise MForbidden(403, "You are not in this room")
        return await real(room, content)

    m.matrix.send = send
    await start(m)
    with caplog.at_level(logging.WARNING, logger="matrix_sources"):
        await m.clock.advance(DAY)
        await asyncio.wait_for(until(lambda: m.service.eventlog.get_meta(PROBLEM_KEY)), 30)
    await asleep(m, T0 / 1000 + 2 * DAY)
    [logged] = [r for r in caplog.records if r.msg == "digest_not_posted"]
    assert (logged.room_id, logged.errcode) == (MODS, "M_FORBIDDEN")
    problem = json.loads(m.service.eventlog.get_meta(PROBLEM_KEY))
    assert (problem["room_id"], problem["errcode"]) == (MODS, "M_FORBIDDEN")
    m.matrix.send = real  # invited back
    await m.clock.advance(DAY)
    await asyncio.wait_for(until(lambda: len(digests(m)) == 1), 30)
    await until(lambda: m.service.eventlog.get_meta(PROBLEM_KEY) == "")


async def test_keep_days_takes_the_questions_text_out_of_the_event_log(tmp_path):
    clock = FakeClock(T0 / 1000)
    m = await open_moderated(make_data_dir(tmp_path, moderation={"keep_days": 1}), clock)
    m.clock = clock
    try:
        await m.ask("$q1", CANARY, BOB)
        assert m.feedback.unanswered(ROOM, 0)
        m.bot.resume()
        await until(lambda: clock.sleeping == 1)  # the expiry's wait: no digest room
        await clock.advance(DAY + 3600)
        await asyncio.wait_for(until(lambda: m.feedback.figures(ROOM, 0).asked == 0), 30)
        assert CANARY.encode() not in db_bytes(tmp_path / "data", m.service.eventlog)
    finally:
        await close_moderated(m)


@pytest.mark.parametrize("digest_room", [ROOM, "#help:example.org"])
async def test_an_allowlisted_digest_room_stops_the_start_with_the_fix(
    tmp_path, digest_room, monkeypatch
):
    m = await open_moderated(make_data_dir(tmp_path, moderation={"digest_room": digest_room}))
    try:

        async def resolve(alias):
            return ROOM if alias == "#help:example.org" else None

        async def nothing():
            return None

        m.matrix.resolve_alias = resolve
        m.service.az.start = lambda **kw: nothing()  # no homeserver here: the checks after
        monkeypatch.setattr(service_module, "wait_for_homeserver", lambda *a: nothing())
        with pytest.raises(StartupError) as e:
            await m.service.start()
        assert f"moderation.digest_room {digest_room} is an allowlisted room" in str(e.value)
        assert "moderators' private room" in str(e.value) and str(m.cfg.file) in str(e.value)
    finally:
        await close_moderated(m)


async def test_an_alias_that_resolves_to_nothing_is_refused(tmp_path):
    m = await open_moderated(
        make_data_dir(tmp_path, moderation={"digest_room": "#nowhere:example.org"})
    )
    try:
        assert "does not resolve to a room" in await m.bot.prepare()
    finally:
        await close_moderated(m)


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("digest_interval", "fortnightly", "not a duration"),
        ("digest_interval", "30s", "not a duration"),
        ("digest_interval", "0.5m", "under a minute"),
        ("digest_room", "moderators", "not a room id (!...) or a room alias"),
        ("keep_days", 0, "greater than 0"),
        ("keep_days", "30", "must be an integer"),
    ],
)
def test_moderation_settings_are_checked_naming_the_key(tmp_path, key, value, says):
    config = make_data_dir(tmp_path, moderation={key: value})
    with pytest.raises(ConfigError) as e:
        load_config(config)
    assert f"moderation.{key}" in str(e.value) and says in str(e.value)
    assert str(config) in str(e.value)


def test_durations_read_as_seconds(tmp_path):
    for text, seconds in (
        ("weekly", 7 * DAY),
        ("daily", DAY),
        ("12h", DAY / 2),
        ("2w", 14 * DAY),
        ("90m", 5400.0),
        ("1.5d", 1.5 * DAY),
    ):
        cfg = load_config(make_data_dir(tmp_path / text, moderation={"digest_interval": text}))
        assert cfg.moderation.digest_seconds == seconds
    assert load_config(make_data_dir(tmp_path / "default")).moderation.digest_seconds == 7 * DAY


class FakeHomeserver(BaseHTTPRequestHandler):
    """The two reads `doctor` makes of the digest room; `joined` as the test sets it."""

    joined: set[str] = set()

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        if "/directory/room/" in self.path:
            status, body = 200, {"room_id": MODS}
        elif self.path.endswith("/joined_members"):
            status, body = (
                (200, {"joined": {u: {} for u in self.joined}})
                if self.joined
                else (403, {"errcode": "M_FORBIDDEN"})
            )
        else:
            status, body = 404, {"errcode": "M_NOT_FOUND"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_doctor_says_when_the_bot_is_not_in_the_digest_room(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHomeserver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = make_data_dir(
            tmp_path,
            moderation={"digest_room": "#mods:example.org"},
            homeserver={"url": f"http://127.0.0.1:{server.server_port}"},
        )
        cfg = load_config(config)
        reg = service_registration(cfg)
        FakeHomeserver.joined = set()
        [left] = check_digest(cfg, reg, [ROOM])
        assert not left.ok and "the bot is not in #mods:example.org (403)" in left.detail
        assert f"invite {cfg.bot_user}" in left.fix
        [listed] = check_digest(cfg, reg, [MODS])
        assert not listed.ok and "is allowlisted" in listed.detail
        FakeHomeserver.joined = {cfg.bot_user}
        [fine] = check_digest(cfg, reg, [ROOM])
        assert fine.ok and not fine.warning
    finally:
        server.shutdown()
