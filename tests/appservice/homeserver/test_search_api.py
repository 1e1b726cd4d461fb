"""The search API's HTTP surface (appservice/homeserver/search_api.py), on aiohttp's test
server: its token (its own, never an appservice token, compared in constant time), the
token bucket on a fake clock, the size limit, readiness, and errors that name the field."""

from __future__ import annotations

import json
import logging
import stat

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from matrix_sources.appservice.homeserver.ratelimit import TokenBucket
from matrix_sources.appservice.homeserver.search_api import MAX_BODY_BYTES, ROUTE, SearchAPI
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.datadir import api_token, init_data_dir, service_registration
from matrix_sources.indexer.records import EventID, Hit, Line, RoomID, UserID, WindowID
from matrix_sources.indexer.search.query import MAX_TEXT_BYTES, MAX_TEXTS, SourceQuery
from tests.fakeclock import FakeClock

TOKEN = "read-token-" + "x" * 32
ROOM = "!room:example.org"
HIT = Hit(
    WindowID("w1"),
    RoomID(ROOM),
    "#ops:example.org",
    "chat",
    (EventID("$q"), EventID("$a")),
    (UserID("@alice:example.org"), UserID("@bob:x.org")),
    1_700_000_000_000,
    1_700_000_060_000,
    0.0325,
    "alice: how\nbob: so",
    similarity=0.61,
    answers=(
        Line(EventID("$later"), UserID("@carol:example.org"), 1_700_003_600_000, "", "reply"),
    ),
    shown=(
        Line(
            EventID("$q"),
            UserID("@alice:example.org"),
            1_700_000_000_000,
            "how do I rotate the key",
        ),
        Line(
            EventID("$later"),
            UserID("@carol:example.org"),
            1_700_003_600_000,
            "generate_signing_key, then restart",
            "reply",
        ),
    ),
)


class Searches:
    """A stand-in searcher that records the queries it was asked."""

    def __init__(self, hits=(HIT,), fail: Exception | None = None) -> None:
        self.hits, self.fail, self.asked = list(hits), fail, []

    def __call__(self, query: SourceQuery) -> list[Hit]:
        self.asked.append(query)
        if self.fail:
            raise self.fail
        return self.hits


class Env:
    def __init__(self, per_minute: int = 60, burst: int = 2) -> None:
        self.clock = FakeClock(1000.0)
        self.search = Searches()
        self.waiting_for: str | None = None
        self.api = SearchAPI(
            TOKEN,
            self.search,
            lambda: self.waiting_for,
            TokenBucket(per_minute, burst, Clock(now=self.clock)),
            default_top_k=5,
            clock=Clock(now=self.clock),
        )
        self.client: TestClient | None = None

    async def post(self, body, token: str | None = TOKEN, headers: dict | None = None):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        h = {"Authorization": f"Bearer {token}"} if token is not None else {}
        resp = await self.client.post(ROUTE, data=data, headers=h | (headers or {}))
        return resp.status, await resp.json(), resp.headers


@pytest.fixture
async def env():
    e = Env()
    app = web.Application()
    e.api.attach(app.router)
    e.client = TestClient(TestServer(app))
    await e.client.start_server()
    yield e
    await e.client.close()
    e.api.close()


async def test_a_query_gets_the_hits_as_search_json_prints_them(env):
    status, body, _ = await env.post(
        {"texts": ["how do I rotate the key"], "top_k": 3, "room": ROOM, "corpus": "chat"}
    )
    assert status == 200
    assert body == {"hits": [HIT.to_json()]}
    assert env.search.asked == [SourceQuery(("how do I rotate the key",), 3, RoomID(ROOM), "chat")]
    # Unset fields take the config's defaults, as `matrix-sources search` does.
    assert (await env.post({"texts": ["x"]}))[0] == 200
    assert env.search.asked[-1] == SourceQuery(("x",), 5, None, None)


async def test_no_token_is_401_and_a_wrong_one_403_before_anything_is_read(env):
    status, body, _ = await env.post({"texts": ["x"]}, token=None)
    assert (status, body["errcode"]) == (401, "M_MISSING_TOKEN")
    for wrong in ("", TOKEN[:-1], TOKEN + "y", TOKEN.upper()):
        status, body, _ = await env.post({"texts": ["x"]}, token=wrong)
        assert (status, body["errcode"]) == (403, "M_UNKNOWN_TOKEN"), wrong
    status, _, _ = await env.post("{not json", headers={"Authorization": f"Basic {TOKEN}"})
    assert status == 403  # another scheme is no token; the body was never parsed
    # The query string is never a token (access logs keep it).
    resp = await env.client.post(ROUTE, params={"access_token": TOKEN}, json={"texts": ["x"]})
    assert resp.status == 401
    assert env.search.asked == []


async def test_the_appservice_tokens_are_refused(tmp_path):
    """A real data dir: the API's token is its own, and the registration's as_token and
    hs_token, which Synapse and the bot hold, open nothing here."""
    init_data_dir(tmp_path / "d", domain="example.org")
    cfg = load_config(tmp_path / "d" / "config.yaml")
    reg = service_registration(cfg)
    search = Searches()
    api = SearchAPI.for_service(cfg, reg, search, lambda: None)
    app = web.Application()
    api.attach(app.router)
    async with TestClient(TestServer(app)) as client:
        for token in (reg.as_token, reg.hs_token):
            resp = await client.post(
                ROUTE, json={"texts": ["x"]}, headers={"Authorization": f"Bearer {token}"}
            )
            assert resp.status == 403
        resp = await client.post(
            ROUTE, json={"texts": ["x"]}, headers={"Authorization": f"Bearer {api_token(cfg)}"}
        )
        assert resp.status == 200
    api.close()
    assert len(search.asked) == 1


def test_a_read_token_that_is_an_appservice_token_stops_the_service(tmp_path):
    init_data_dir(tmp_path / "d", domain="example.org")
    cfg = load_config(tmp_path / "d" / "config.yaml")
    reg = service_registration(cfg)
    cfg.api_token_path.write_text(reg.hs_token + "\n")
    with pytest.raises(ConfigError) as info:
        SearchAPI.for_service(cfg, reg, Searches(), lambda: None)
    assert "api.token_file" in str(info.value) and "hs_token" in str(info.value)
    assert reg.hs_token not in str(info.value)  # the message never shows a token


def test_the_service_writes_a_missing_token_file_0600(tmp_path):
    """A data dir made before the API (no api_token): `run` writes one, as init does."""
    init_data_dir(tmp_path / "d", domain="example.org")
    cfg = load_config(tmp_path / "d" / "config.yaml")
    cfg.api_token_path.unlink()
    SearchAPI.for_service(cfg, service_registration(cfg), Searches(), lambda: None)
    assert stat.S_IMODE(cfg.api_token_path.stat().st_mode) == 0o600
    assert len(api_token(cfg)) >= 32
    assert api_token(cfg) == api_token(cfg, create=True)  # written once, then kept


async def test_not_started_is_503_with_retry_after(env):
    env.waiting_for = "waiting for the homeserver"
    status, body, headers = await env.post({"texts": ["x"]})
    assert (status, body["errcode"]) == (503, "M_NOT_READY")
    assert "waiting for the homeserver" in body["error"] and headers["Retry-After"] == "5"
    assert (await env.post({"texts": ["x"]}, token="wrong"))[0] == 403  # auth still first
    env.waiting_for = None
    assert (await env.post({"texts": ["x"]}))[0] == 200


async def test_the_rate_is_a_token_bucket_on_the_injected_clock(env):
    """Burst 2, 60 a minute: two at once, the third waits a second; a second later one
    more, and after a long pause the burst again, never more."""
    assert [(await env.post({"texts": ["x"]}))[0] for _ in range(2)] == [200, 200]
    status, body, headers = await env.post({"texts": ["x"]})
    assert (status, body["errcode"], headers["Retry-After"]) == (429, "M_LIMIT_EXCEEDED", "1")
    assert body["retry_after_ms"] == 1000
    await env.clock.advance(0.5)
    status, body, headers = await env.post({"texts": ["x"]})
    assert status == 429 and body["retry_after_ms"] == 500
    await env.clock.advance(0.5)
    assert (await env.post({"texts": ["x"]}))[0] == 200
    assert (await env.post({"texts": ["x"]}))[0] == 429
    await env.clock.advance(3600)
    assert [(await env.post({"texts": ["x"]}))[0] for _ in range(3)] == [200, 200, 429]
    assert len(env.search.asked) == 5  # a refused request never searched


def test_the_bucket_refills_at_its_rate_up_to_its_burst():
    now = [0.0]
    bucket = TokenBucket(per_minute=120, burst=3, clock=Clock(now=lambda: now[0]))
    assert [bucket.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take("a") == pytest.approx(0.5)
    assert bucket.take("b") == 0.0  # one bucket per token
    now[0] = 0.25
    assert bucket.take("a") == pytest.approx(0.25)
    now[0] = 0.5
    assert bucket.take("a") == 0.0 and bucket.take("a") == pytest.approx(0.5)
    now[0] = 1000.0
    assert [bucket.take("a") for _ in range(4)][:3] == [0.0, 0.0, 0.0]
    assert TokenBucket(per_minute=0, burst=1).take("a") == 0.0  # 0: no limit


async def test_a_body_over_the_limit_is_413_and_the_largest_query_fits(env):
    status, body, _ = await env.post(b'{"texts": ["' + b"a" * MAX_BODY_BYTES + b'"]}')
    assert (status, body["errcode"]) == (413, "M_TOO_LARGE")

    async def chunks():  # no Content-Length: counted while read
        for _ in range(MAX_BODY_BYTES // 4096 + 2):
            yield b" " * 4096

    resp = await env.client.post(ROUTE, data=chunks(), headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status == 413
    # 8 texts of 1,000 bytes, every character escaped as JSON allows: accepted.
    biggest = (
        '{"texts": ['
        + ", ".join(['"' + "\\u00e9" * (MAX_TEXT_BYTES // 2) + '"'] * MAX_TEXTS)
        + '], "top_k": 20}'
    )
    assert len(biggest) < MAX_BODY_BYTES
    await env.clock.advance(60)  # the refused bodies took the burst's tokens
    status, body, _ = await env.post(biggest)
    assert status == 200, body
    assert env.search.asked[-1].texts[0] == "é" * 500


@pytest.mark.parametrize(
    "body, field",
    [
        ("{not json", "body"),
        ('["a list"]', "body"),
        ({}, "texts"),
        ({"texts": "one string"}, "texts"),
        ({"texts": []}, "texts"),
        ({"texts": ["x"] * 9}, "texts"),
        ({"texts": ["ok", "  "]}, "texts[1]"),
        ({"texts": ["ok", 3]}, "texts[1]"),
        ({"texts": ["a" * 1001]}, "texts[0]"),
        ({"texts": ["x"], "top_k": 0}, "top_k"),
        ({"texts": ["x"], "top_k": "5"}, "top_k"),
        ({"texts": ["x"], "top_k": True}, "top_k"),
        ({"texts": ["x"], "room": "#ops:example.org"}, "room"),
        ({"texts": ["x"], "corpus": "dms"}, "corpus"),
        ({"texts": ["x"], "top-k": 3}, "top-k"),
    ],
)
async def test_a_bad_query_is_400_naming_the_field(env, body, field):
    status, answer, _ = await env.post(body)
    assert status == 400
    assert answer["errcode"] == "M_INVALID_PARAM" and answer["field"] == field
    assert answer["error"].startswith(f"{field}: ")
    assert env.search.asked == []


async def test_a_failed_search_is_500_and_logs_no_text(env, caplog):
    env.search.fail = RuntimeError("chroma went away")
    with caplog.at_level(logging.INFO, logger="matrix_sources"):
        status, body, _ = await env.post({"texts": ["secretword in my question"]})
    assert (status, body["errcode"]) == (500, "M_UNKNOWN")
    assert "secretword" not in caplog.text and "api_search_failed" in caplog.text
    env.search.fail = None
    with caplog.at_level(logging.INFO, logger="matrix_sources"):
        assert (await env.post({"texts": ["secretword again"]}))[0] == 200
    assert "secretword" not in caplog.text and "api_search" in caplog.text


async def test_nothing_matches_carries_the_language_note_and_hits_do_not(env):
    """With no hits, what the room's reply adds (a question the English-only model does
    not read as English: language.english_only_note) comes as "note"; with hits, or
    with nothing to add, no "note" key at all."""
    env.api.note = lambda texts: "NOTE for " + texts[0] if texts[0].startswith("¿") else ""
    status, body, _ = await env.post({"texts": ["¿Cómo monto un disco?"]})
    assert status == 200 and body == {"hits": [HIT.to_json()]}
    env.search.hits = []
    status, body, _ = await env.post({"texts": ["¿Cómo monto un disco?"]})
    assert body == {"hits": [], "note": "NOTE for ¿Cómo monto un disco?"}
    await env.clock.advance(60)  # the bucket's burst is 2
    status, body, _ = await env.post({"texts": ["how do I mount a disk"]})
    assert body == {"hits": []}
