"""`!sources` as the asker sees it: parsing, the rendered reply (escaped, linked, cut),
and the responder with its rate limit, through a recording `send`."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import unquote

import pytest

from matrix_sources.appservice.bot.commands import (
    HELP,
    CommandError,
    HelpCommand,
    SearchCommand,
    WhyCommand,
    parse_command,
)
from matrix_sources.appservice.bot.replies import (
    MAX_REPLY_CHARS,
    permalink,
    render_hits,
    via_servers,
)
from matrix_sources.appservice.bot.responder import RateLimiter, Responder
from matrix_sources.indexer.clock import format_ts
from matrix_sources.indexer.ingest.events import MessageEvent, parse_event
from matrix_sources.indexer.records import EventID, Hit, Line, RoomID, UserID, WindowID
from matrix_sources.indexer.search.abstain import Floor
from matrix_sources.indexer.search.searcher import MAX_TEXT_BYTES
from tests.fakeclock import FakeClock

ROOM = "!ops:example.org"

# -- parse_command ------------------------------------------------------------------------


def search(body: str, default_top_k: int = 5):
    cmd = parse_command(body, ROOM, default_top_k)
    assert isinstance(cmd, SearchCommand), cmd
    return cmd.query


def error(body: str) -> str:
    with pytest.raises(CommandError) as info:
        parse_command(body, ROOM)
    return str(info.value)


@pytest.mark.parametrize("body", ["!sources help", "  !sources   help  "])
def test_help(body):
    assert isinstance(parse_command(body, ROOM), HelpCommand)
    assert "--top" in HELP and "--room" in HELP and "--corpus" in HELP


@pytest.mark.parametrize(
    "body", ["!Sources how do I rotate the key", "  !SOURCES how do I rotate the key"]
)
def test_the_command_word_is_matched_in_any_case(body):
    assert search(body).texts == ("how do I rotate the key",)


def test_help_with_more_lines_is_a_search():
    assert search("!sources help\nhow do I rotate the key").texts == (
        "help",
        "how do I rotate the key",
    )


def test_plain_query():
    q = search("!sources how do I rotate the signing key")
    assert q.texts == ("how do I rotate the signing key",)
    assert (q.top_k, q.room_id, q.corpus) == (5, None, None)


def test_default_top_k_comes_from_config():
    assert search("!sources key", default_top_k=9).top_k == 9


def test_flags():
    q = search("!sources --top 3 --room here --corpus reference signing key")
    assert (q.top_k, q.room_id, q.corpus) == (3, ROOM, "reference")
    assert q.texts == ("signing key",)


def test_room_by_id():
    assert search("!sources --room !other:example.org key").room_id == "!other:example.org"


def test_multi_line_texts():
    q = search("!sources --top 2\nhow do I rotate the signing key\n\n  signing key expired  \n")
    assert q.texts == ("how do I rotate the signing key", "signing key expired")
    assert q.top_k == 2


def test_first_line_and_further_lines():
    q = search("!sources rotate key\nkey expired")
    assert q.texts == ("rotate key", "key expired")


@pytest.mark.parametrize(
    "text", ["what's the bot's token", "it's 5 o'clock", 'say "hi"', "where's the doc"]
)
def test_text_is_kept_as_typed(text):
    """Apostrophes and quotes are part of what the user asked, and the reply echoes it."""
    assert search(f"!sources {text}").texts == (text,)


def test_missing_text():
    msg = error("!sources")
    assert "What should I look for?" in msg and "!sources help" in msg
    assert "What should I look for?" in error("!sources --top 3")


def test_bad_top():
    assert "--top takes a number from 1 to 20" in error("!sources --top many key")
    assert "--top" in error("!sources --top 0 key") and "1 to 20" in error("!sources --top 0 key")
    assert "1 to 20" in error("!sources --top 21 key")


def test_flag_without_value():
    assert "--top needs a value" in error("!sources key --top")


def test_unknown_flag():
    assert "Unknown flag --fast" in error("!sources --fast key")


def test_bad_corpus_and_room():
    assert "--corpus" in error("!sources --corpus everything key")
    assert "chat" in error("!sources --corpus everything key")
    assert "--room" in error("!sources --room ops key")


def test_room_by_alias_is_left_for_the_responder_to_resolve():
    cmd = parse_command("!sources --room #ops:example.org key", ROOM)
    assert cmd.room_alias == "#ops:example.org" and cmd.query.room_id is None


@pytest.mark.parametrize("body,n", [("!sources why 1", 1), ("!sources  why 12", 12)])
def test_why(body, n):
    assert parse_command(body, ROOM) == WhyCommand(n)


@pytest.mark.parametrize(
    "body", ["!sources why does synapse crash", "!sources why", "!sources why 1\nand more"]
)
def test_why_like_queries_are_searches(body):
    assert isinstance(parse_command(body, ROOM), SearchCommand)


def test_too_many_lines():
    msg = error("!sources\n" + "\n".join(f"text {i}" for i in range(9)))
    assert "Too many lines" in msg and "9" in msg and "8" in msg


def test_line_too_long_names_the_line_and_size():
    msg = error("!sources first\n" + "a" * (MAX_TEXT_BYTES + 5))
    assert "Line 2" in msg and str(MAX_TEXT_BYTES + 5) in msg and "shorten" in msg


def test_not_a_command():
    assert "!sources" in error("hello")


# -- render_hits ----------------------------------------------------------------------------

TS = 1_700_000_000_000


def hit(
    n: int = 0,
    lines: list[tuple[str, str]] | None = None,
    room_id: str = ROOM,
    room_label: str = "#ops:example.org",
    event_ids: tuple[str, ...] | None = None,
    senders: tuple[str, ...] | None = None,
) -> Hit:
    lines = lines or [("@alice:example.org", f"rotate the signing key {n}")]
    text = "\n".join(f"[{format_ts(TS)}] {s}: {b}" for s, b in lines)
    senders = senders or tuple(dict.fromkeys(s for s, _ in lines))
    event_ids = event_ids or (f"$e{n}a", f"$e{n}b")
    typed = tuple(
        Line(EventID(event_ids[min(i, len(event_ids) - 1)]), UserID(s), TS, b)
        for i, (s, b) in enumerate(lines)
    )
    return Hit(
        f"w{n}",
        room_id,
        room_label,
        "chat",
        event_ids,
        senders,
        TS,
        TS + 60_000,
        0.5,
        text,
        lines=typed,
    )


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            self.attrs.append((k, v))
            if k == "href":
                self.hrefs.append(v or "")


def tags_of(formatted: str) -> Tags:
    t = Tags()
    t.feed(formatted)
    t.close()
    return t


HOSTILE = [
    "<script>alert(1)</script>",
    '<a href="javascript:alert(1)">x</a>',
    "<img src=x onerror=alert(1)>",
    '<a href="https://matrix.to/#/@alice:example.org">Alice</a>',
]


@pytest.mark.parametrize("payload", HOSTILE)
def test_message_html_is_escaped(payload):
    h = hit(lines=[("@alice:example.org", f"see {payload} here")])
    reply = render_hits([h], ("see here",))
    f = reply.formatted_body
    assert "<script" not in f and "<img" not in f
    t = tags_of(f)
    assert set(t.tags) <= {"p", "em", "ol", "li", "a", "blockquote", "b", "br"}
    assert not any(k.startswith("on") for k, _ in t.attrs)
    assert {k for k, _ in t.attrs} == {"href"}
    # Only permalinks are links (the window, and the quoted line), none from the text.
    assert t.hrefs and all(
        h.startswith("https://matrix.to/#/%21ops%3Aexample.org/%24e0") for h in t.hrefs
    )
    assert not any("javascript:" in h or "@alice" in h for h in t.hrefs)
    # The text is shown, as text: escaped in HTML, verbatim in the plain body.
    assert (
        payload.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        in f
    )
    assert payload in reply.body


@pytest.mark.parametrize("payload", HOSTILE)
def test_query_room_label_and_sender_are_escaped(payload):
    h = hit(lines=[("@alice:example.org", "fine")], room_label=payload)
    reply = render_hits([h], (payload,))
    f = reply.formatted_body
    assert "<script" not in f and "<img" not in f
    t = tags_of(f)
    assert t.hrefs and all(h.startswith("https://matrix.to/#/%21ops") for h in t.hrefs)
    assert set(t.tags) <= {"p", "em", "ol", "li", "a", "blockquote", "b", "br"}


def test_permalink_percent_encodes_ids():
    link = permalink("!abc:example.org", "$ev/with?odd#chars&x=1", ["example.org"])
    assert link == (
        "https://matrix.to/#/%21abc%3Aexample.org/"
        "%24ev%2Fwith%3Fodd%23chars%26x%3D1?via=example.org"
    )
    assert link.count("#") == 1  # only matrix.to's own fragment


def test_reply_links_first_event_with_at_most_three_vias():
    senders = tuple(f"@u{i}:server{i}.org" for i in range(6))
    h = hit(
        lines=[(s, "key") for s in senders],
        room_id="!room:home.org",
        event_ids=("$first", "$second"),
        senders=senders,
    )
    reply = render_hits([h], ("key",), fallback_server="fallback.org")
    href = tags_of(reply.formatted_body).hrefs[0]  # the window's link
    assert href.startswith("https://matrix.to/#/%21room%3Ahome.org/%24first?")
    vias = [p for p in href.split("?", 1)[1].split("&") if p.startswith("via=")]
    assert vias == ["via=home.org", "via=server0.org", "via=server1.org"]
    assert len(via_servers(h, "x.org")) == 3


def test_via_for_a_room_id_without_server_comes_from_senders():
    h = hit(room_id="!opaqueV12roomid", senders=("@alice:a.org", "@bob:a.org"))
    assert via_servers(h, "home.org") == ["a.org", "home.org"]
    href = tags_of(render_hits([h], ("key",), "home.org").formatted_body).hrefs[0]
    assert unquote(href.split("#/")[1].split("/")[0]) == "!opaqueV12roomid"


def test_no_hits():
    reply = render_hits([], ("anything",))
    assert "Nothing in the index answers that" in reply.body and reply.quoted == ()
    assert "--room" in reply.body and "why 1" in reply.body
    # Asked of one room: no advice to narrow it to a room; without --room instead.
    in_room = render_hits([], ("anything",), room=True).body
    assert "narrow it" not in in_room and "without --room" in in_room
    # A room still being indexed says so rather than only "nothing".
    busy = render_hits([], ("anything",), pending=1).body
    assert busy.startswith("1 message is still being indexed") and "again" in busy
    assert render_hits([], ("x",), pending=40).body.startswith("40 messages are still")


def test_reply_cites_room_time_sender_and_best_lines():
    h = hit(
        lines=[
            ("@alice:example.org", "lunch on friday"),
            ("@bob:example.org", "rotate the signing key with the admin api"),
            ("@carol:example.org", "thanks"),
        ]
    )
    reply = render_hits([h], ("signing key rotation",))
    assert "#ops:example.org" in reply.body
    assert format_ts(TS) in reply.body
    assert "alice, bob, carol" in reply.body
    assert "bob: rotate the signing key with the admin api" in reply.body
    assert "rotate the signing key with the admin api" in reply.quoted
    # Plain text stays readable: one permalink (the window's), each line's in the HTML.
    assert reply.body.count("https://matrix.to/") == 1
    assert len(tags_of(reply.formatted_body).hrefs) >= 1 + len(h.lines)


def test_long_replies_are_cut_at_a_whole_hit():
    long_line = "signing key " * 40
    hits = [
        hit(
            n,
            lines=[
                ("@alice:example.org", f"{n} {long_line}"),
                ("@bob:example.org", f"{n} {long_line}"),
            ],
            room_label="#" + "r" * 200 + ":example.org",
        )
        for n in range(60)
    ]
    reply = render_hits(hits, ("signing key",))
    assert len(reply.body) + len(reply.formatted_body) <= MAX_REPLY_CHARS
    shown = tags_of(reply.formatted_body).tags.count("li")
    assert 1 <= shown < len(hits)
    # Every hit shown is whole: its link in both bodies, its lines quoted.
    for n in range(shown):
        assert f"%24e{n}a" in reply.body and f"%24e{n}a" in reply.formatted_body
        assert reply.body.count(f"{n} signing key") == 2
    assert f"%24e{shown}a" not in reply.body + reply.formatted_body
    assert f"({len(hits) - shown} more hits cut" in reply.body
    assert reply.formatted_body.endswith("</p>") and reply.formatted_body.count("<ol>") == 1
    assert len(reply.quoted) == 2 * shown


def test_reply_never_exceeds_the_limit_whatever_the_hit_sizes():
    # Sizes swept so that the cut falls right at the limit for some of them.
    for width in range(1, 400, 3):
        hits = [
            hit(
                n,
                lines=[("@alice:example.org", f"{n} " + "k " * width)],
                room_label="#" + "r" * width + ":x",
            )
            for n in range(120)
        ]
        reply = render_hits(hits, ("k",))
        assert len(reply.body) + len(reply.formatted_body) <= MAX_REPLY_CHARS, width
        assert "more hits cut" in reply.body


def test_reply_content_is_a_notice_replying_to_the_command():
    content = render_hits([hit()], ("key",)).content(in_reply_to="$cmd")
    assert content["msgtype"] == "m.notice"
    assert content["format"] == "org.matrix.custom.html"
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": "$cmd"}}


# -- Responder ------------------------------------------------------------------------------


class FakeSearcher:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits, self.queries = hits, []

    def search(self, query):
        self.queries.append(query)
        return self.hits

    floor = None  # no abstain floor to explain

    def search_with_closest(self, query):
        return self.search(query), None


def command(
    body: str,
    sender: str = "@asker:example.org",
    event_id: str = "$cmd",
    thread_root: str | None = None,
) -> MessageEvent:
    content: dict = {"msgtype": "m.text", "body": body}
    if thread_root:
        content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread_root}
    ev = parse_event(
        {
            "type": "m.room.message",
            "room_id": ROOM,
            "event_id": event_id,
            "sender": sender,
            "origin_server_ts": TS,
            "content": content,
        }
    )
    assert isinstance(ev, MessageEvent) and ev.is_command
    return ev


@pytest.fixture
def responder():
    sent: list[tuple[str, dict]] = []

    async def send(room_id: str, content: dict) -> str:
        sent.append((room_id, content))
        return f"$reply{len(sent)}"

    clock = FakeClock(1000.0)
    searcher = FakeSearcher([hit()])
    r = Responder(
        searcher,
        send,
        "@sourcesbot:example.org",
        default_top_k=4,
        limiter=RateLimiter(2, clock=clock.clock),
        domain="example.org",
    )
    return r, sent, clock, searcher


async def test_responder_answers_with_hits_as_a_reply(responder):
    r, sent, _, searcher = responder
    await r.answer(command("!sources --room here signing key"))
    [(room, content)] = sent
    assert room == ROOM
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": "$cmd"}}
    assert "rotate the signing key 0" in content["body"]
    [q] = searcher.queries
    assert q.texts == ("signing key",) and q.top_k == 4 and q.room_id == ROOM


async def test_responder_answers_in_the_thread(responder):
    r, sent, _, _ = responder
    await r.answer(command("!sources key", thread_root="$root"))
    rel = sent[0][1]["m.relates_to"]
    assert rel["rel_type"] == "m.thread" and rel["event_id"] == "$root"
    assert rel["m.in_reply_to"] == {"event_id": "$cmd"}


async def test_responder_replies_with_the_command_error(responder):
    r, sent, _, searcher = responder
    await r.answer(command("!sources --top lots key"))
    assert "--top takes a number" in sent[0][1]["body"]
    assert searcher.queries == []


async def test_responder_help(responder):
    r, sent, _, searcher = responder
    await r.answer(command("!sources help"))
    assert sent[0][1]["body"] == HELP and searcher.queries == []


async def test_responder_ignores_its_own_messages(responder):
    r, sent, _, _ = responder
    assert await r.answer(command("!sources key", sender="@sourcesbot:example.org")) is None
    assert sent == []


async def test_rate_limit_says_when_to_try_again(responder):
    r, sent, clock, searcher = responder
    await r.answer(command("!sources a"))
    clock.now += 10
    await r.answer(command("!sources b"))
    clock.now += 5
    await r.answer(command("!sources c"))
    assert len(searcher.queries) == 2
    # The first ask leaves the window 60 s after it was made: 45 s from now.
    assert "try again in 45 s" in sent[2][1]["body"]
    # Another person is not limited by this one.
    await r.answer(command("!sources d", sender="@other:example.org"))
    assert len(searcher.queries) == 3
    clock.now += 45  # exactly when the reply said
    await r.answer(command("!sources e"))
    assert len(searcher.queries) == 4
    # Help is never limited.
    await r.answer(command("!sources help"))
    assert sent[-1][1]["body"] == HELP


def test_rate_limiter_wait_is_never_zero_while_limited():
    clock = FakeClock(1000.0)
    limiter = RateLimiter(1, clock=clock.clock)
    assert limiter.retry_after("@a:x") == 0
    clock.now += 59.9
    assert 0 < limiter.retry_after("@a:x") <= 0.1 + 1e-9
    clock.now += 0.1
    assert limiter.retry_after("@a:x") == 0


# -- why N and --room #alias ----------------------------------------------------------------


def ranked_hit(n: int, ranks, score: float) -> Hit:
    h = hit(n)
    return Hit(
        h.window_id,
        h.room_id,
        h.room_label,
        h.corpus,
        h.event_ids,
        h.senders,
        h.ts_first,
        h.ts_last,
        score,
        h.text,
        ranks,
        lines=h.lines,
    )


async def test_why_explains_ranks_similarities_and_fused_score(responder):
    r, sent, _, searcher = responder
    searcher.hits = [
        ranked_hit(0, ((1, 0.812), (3, 0.654)), 1 / 61 + 1 / 63),
        ranked_hit(1, ((2, 0.7), None), 1 / 62),
    ]
    await r.answer(command("!sources rotate the key\nsigning key expired"))
    await r.answer(command("!sources why 1", event_id="$why1"))
    body = sent[-1][1]["body"]
    assert "Hit 1" in body and "rank 1" in body and "rank 3" in body
    assert "0.812" in body and "0.654" in body and f"{1 / 61 + 1 / 63:.4f}" in body
    assert "1/(60+1) + 1/(60+3)" in body
    assert "UTC" in body  # times say their zone
    await r.answer(command("!sources why 2", event_id="$why2"))
    body = sent[-1][1]["body"]
    assert "rank 2" in body and "not in its top results" in body
    assert sent[-1][1]["m.relates_to"]["m.in_reply_to"]["event_id"] == "$why2"


async def test_why_without_a_query_or_out_of_range(responder):
    r, sent, _, searcher = responder
    await r.answer(command("!sources why 1"))
    assert "Ask something first" in sent[-1][1]["body"]
    await r.answer(command("!sources key"))
    await r.answer(command("!sources why 5"))
    body = sent[-1][1]["body"]  # one hit: said as one, not "1 hits", "ask about 1 to 1"
    assert "had 1 hit;" in body and "1 to 1" not in body and "why 1` explains it" in body


async def test_why_is_per_asker(responder):
    r, sent, _, _ = responder
    await r.answer(command("!sources key", sender="@a:example.org"))
    await r.answer(command("!sources why 1", sender="@b:example.org"))
    assert "Ask something first" in sent[-1][1]["body"]


async def test_room_alias_is_resolved_before_searching(responder):
    r, sent, _, searcher = responder

    async def resolve(alias):
        return "!ops:example.org" if alias == "#ops:example.org" else None

    r.resolve_alias = resolve
    await r.answer(command("!sources --room #ops:example.org key"))
    assert searcher.queries[-1].room_id == "!ops:example.org"
    await r.answer(command("!sources --room #nope:example.org key"))
    assert "#nope:example.org" in sent[-1][1]["body"] and len(searcher.queries) == 1


# -- status -----------------------------------------------------------------------------


def test_power_levels_and_room_v12_creators():
    from matrix_sources.appservice.bot.status import ADMIN_POWER_LEVEL, power_from_state

    def state(version, creator="@c:x", users=None, default=0, extra=()):
        return [
            {
                "type": "m.room.create",
                "sender": creator,
                "content": {"room_version": version, "additional_creators": list(extra)},
            },
            {
                "type": "m.room.power_levels",
                "content": {"users": users or {}, "users_default": default},
            },
        ]

    assert power_from_state(state("12"), "@c:x") > 100  # creator, not in power_levels
    assert power_from_state(state("12", extra=("@co:x",)), "@co:x") > 100
    assert power_from_state(state("11"), "@c:x") == 0  # older versions list creators
    assert power_from_state(state("11", users={"@c:x": 100}), "@c:x") == 100
    assert power_from_state(state("12", users={"@m:x": 50}), "@m:x") == ADMIN_POWER_LEVEL
    assert power_from_state(state("12", default=10), "@anyone:x") == 10
    assert power_from_state(state("12", users={"@m:x": True}), "@m:x") == 0
    assert power_from_state([], "@m:x") == 0


async def test_why_names_the_keyword_legs_share_of_the_score(responder):
    r, sent, _, searcher = responder
    searcher.hits = [ranked_hit(0, ((2, 0.61),), 1 / 62 + 1 / 61)]  # dense rank 2 + BM25 rank 1
    await r.answer(command("!sources fstab nfs"))
    await r.answer(command("!sources why 1", event_id="$why"))
    body = sent[-1][1]["body"]
    assert "rank 2" in body and "keyword match (BM25 leg): adds 0.0164" in body
    assert f"1/(60+2) + 0.0164 = {1 / 62 + 1 / 61:.4f}" in body


class FlooredSearcher(FakeSearcher):
    """A searcher with the abstain floor: no hits, and the closest one below it."""

    floor = Floor(0.30, 0.04)

    def __init__(self, closest: Hit | None) -> None:
        super().__init__([])
        self.closest = closest

    def search_with_closest(self, query):
        self.queries.append(query)
        return [], self.closest

    def floor_for(self, texts):
        return self.floor.for_query(texts)


async def test_why_names_the_margin_of_the_questions_script(responder):
    """search.no_shared_word_margin_by_script: `why` names the margin the question got."""
    from dataclasses import replace

    r, sent, _, _ = responder
    closest = replace(ranked_hit(0, ((1, 0.12),), 1 / 61), similarity=0.12)
    r.searcher = FlooredSearcher(closest)
    r.searcher.floor = Floor(0.30, 0.04, {"cyrillic": 0.02})
    await r.answer(command("!sources рецепт бананового хлеба"))
    await r.answer(command("!sources why 1", event_id="$why"))
    body = sent[-1][1]["body"]
    assert "below the floor 0.32 for a hit sharing no word with the question" in body
    assert (
        "search.min_similarity 0.30 + its script's search.no_shared_word_margin_by_script 0.02"
    ) in body


async def test_why_after_nothing_matches_explains_the_closest_below_the_floor(responder):
    from dataclasses import replace

    from matrix_sources.appservice.bot.replies import NOTHING_MATCHES

    r, sent, _, _ = responder
    closest = replace(ranked_hit(0, ((1, 0.12),), 1 / 61), similarity=0.12)
    r.searcher = FlooredSearcher(closest)
    await r.answer(command("!sources banana bread with walnuts"))
    assert sent[-1][1]["body"] == NOTHING_MATCHES
    await r.answer(command("!sources why 1", event_id="$why"))
    body = sent[-1][1]["body"]
    # The window shares no word with the question: it needed the floor plus the margin.
    assert "below the floor 0.34 for a hit sharing no word with the question" in body
    assert "search.min_similarity 0.30 + search.no_shared_word_margin 0.04" in body
    assert "cosine similarity 0.120" in body and "rank 1" in body
    await r.answer(command("!sources why 2", event_id="$why2"))
    assert "why 1` explains the closest" in sent[-1][1]["body"]
    # Nothing at all to be close to (an empty index, or "?"): nothing to explain.
    r.searcher = FlooredSearcher(None)
    await r.answer(command("!sources banana bread"))
    await r.answer(command("!sources why 1", event_id="$why3"))
    assert "no hits to explain" in sent[-1][1]["body"]
    # Messages of the room not indexed yet: "nothing matches" says so, for that room.
    asked = []
    r.pending = lambda room: asked.append(room) or 12
    r.limiter = RateLimiter(0)
    await r.answer(command("!sources --room !ops:example.org banana bread"))
    assert sent[-1][1]["body"].startswith("12 messages are still being indexed")
    assert asked == ["!ops:example.org"] and "without --room" in sent[-1][1]["body"]


async def test_why_names_the_plain_floor_when_the_closest_shares_a_word(responder):
    from dataclasses import replace

    r, sent, _, _ = responder
    # The closest window ("rotate the signing key 0") shares "key" with the question.
    r.searcher = FlooredSearcher(replace(ranked_hit(0, ((1, 0.21),), 1 / 61), similarity=0.21))
    await r.answer(command("!sources which key signs events"))
    await r.answer(command("!sources why 1", event_id="$why"))
    body = sent[-1][1]["body"]
    assert (
        "its score 0.210 (half the window's cosine similarity to the question, half "
        "its closest line's) is below the floor search.min_similarity = 0.30, so" in body
    )
    # One number per meaning: the window's cosine under the text, the score the floor saw.
    assert "the window's cosine similarity 0.210" in body
    assert "no_shared_word_margin" not in body


def test_a_sender_id_with_a_newline_forges_no_line_of_the_reply():
    from matrix_sources.indexer.records import Line

    hit = Hit(
        WindowID("w1"),
        RoomID("!r:x"),
        "",
        "chat",
        (EventID("$a"),),
        (UserID("@eve\n   > admin:x"),),
        1_700_000_000_000,
        1_700_000_000_000,
        0.5,
        "",
        shown=(Line(EventID("$a"), UserID("@eve\n   > admin:x"), 1_700_000_000_000, "hello"),),
    )
    reply = render_hits([hit], ("hi",))
    assert not any(line.strip().startswith("> admin") for line in reply.body.split("\n"))
    assert "eve   > admin" in reply.body  # kept, but on the sender's own line


async def test_nothing_matches_in_another_language_says_which_model_reads_it(responder):
    """The shipped English model: a question in another language that got "nothing
    matches" is told the room needs the multilingual model, and how to set it; an
    English one is not (issue 45 item 3). The vocabulary here is a small English one;
    tests/indexer/search/test_language.py measures the real model's."""
    from matrix_sources.indexer.search.language import other_language_note

    english = {"how", "do", "i", "mount", "a", "partition", "with", "banana", "bread"}
    r, sent, _, _ = responder
    r.searcher = FlooredSearcher(None)
    r.limiter = RateLimiter(0)
    r.language_note = lambda texts: other_language_note(texts, english)
    await r.answer(command("!sources how do I mount a partition with banana bread"))
    assert "does not read as English" not in sent[-1][1]["body"]
    await r.answer(command("!sources wie kann ich eine Partition einhängen", event_id="$de"))
    body = sent[-1][1]["body"]
    assert body.startswith("Nothing in the index answers that")
    assert "index.embedder.model: multilingual-e5-small+all-MiniLM-L6-v2" in body
