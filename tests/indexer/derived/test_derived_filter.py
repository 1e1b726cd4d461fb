"""The seed's eight acceptance tests (seeds/003): reference text and the bot's own answers
cannot re-enter the index as evidence.

Harness: the fixture corpus tests/fixtures/ops-cheatsheet.md added as a reference corpus
through the CLI; transcripts that quote a section verbatim, quote ~10 lines of the
50-line "Disk space" section, paraphrase it heavily, and discuss the same tools without
quoting; the deterministic HashEmbedder. Messages go through the real ingest (gate,
event log) and pipeline; `ref` and `verify` through `matrix-sources` itself.

The false passes the seed names are guarded here: the verbatim case is not the only one
(test 3 is a partial quote, scoring between the two thresholds), "excluded" is never
"zero evidence" (test 2 runs on the same pipeline run and checks the exact excluded set),
and the answer threshold is shown to miss the partial quote that the reference one catches.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.bot.responder import RateLimiter, Responder
from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import Config, load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.derived.filter import JOURNAL_KIND, Matcher
from matrix_sources.indexer.derived.manifest import Manifest, manifest_path
from matrix_sources.indexer.derived.normalise import containment, text_shingles
from matrix_sources.indexer.derived.reference import cut_sections
from matrix_sources.indexer.ingest.events import MessageEvent, parse_event
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window
from tests.botkit import RecordingMatrix as Matrix
from tests.paths import FIXTURES
from tests.storekit import stored_vectors
from tests.vectorscan import files_holding

FIXTURE = FIXTURES / "ops-cheatsheet.md"
ROOM = "!ops:example.org"
CORPUS = "ops"
SECTION = "ops/ops-cheatsheet.md#Homeserver operations cheatsheet › "
DISK, SIGNING = SECTION + "Disk space", SECTION + "Signing keys"
T0 = 1_700_000_000_000


def _section_text(heading: str) -> str:
    [s] = [
        s
        for s in cut_sections(CORPUS, FIXTURE.name, FIXTURE.read_text())
        if s.heading.endswith(heading)
    ]
    return s.text


# -- transcripts ---------------------------------------------------------------------------

VERBATIM = "Pasting the runbook so it is here:\n\n" + _section_text("Signing keys")
PARTIAL = """ok so the cheatsheet says, for the journal:
journalctl --disk-usage
sudo journalctl --vacuum-size=500M
sudo journalctl --vacuum-time=14d
Make the limit stick in /etc/systemd/journald.conf:
[Journal]
SystemMaxUse=500M
MaxRetentionSec=14day
Purge remote media older than thirty days (the admin API takes a timestamp in ms):
BEFORE=$(( ($(date +%s) - 30*86400) * 1000 ))
curl -X POST -H "Authorization: Bearer $ADMIN_TOKEN" \\
  "http://localhost:8008/_synapse/admin/v1/purge_media_cache?before_ts=$BEFORE"
I ran the first two on our box and got about 3G back, but the media purge answers 400 \
every time. Anyone seen that?"""
PARAPHRASE = (
    "When the disk gets full, first look at what is big with df and du (ncdu is "
    "nicer), then shrink the systemd logs to half a gigabyte or two weeks and put "
    "that cap into journald's config so it stays. Old cached media from other "
    "servers can go through the admin API, and postgres only gives the space back "
    "after a full vacuum."
)
DISCUSSION = """has anyone else had journalctl eat the whole disk on debian? we ran
sudo journalctl --vacuum-size=500M
sudo journalctl --vacuum-time=14d
and got going again, but we only noticed because synapse stopped federating. I think we \
want an alert on /var and a real retention policy before anyone touches the vacuum \
settings again, and the media store needs a look too"""
CHAT = [
    "the federation tester is green again after the certificate renewal this morning",
    "reminder: the community call moves to thursday evening this week",
]


# -- a data dir, driven like the service drives it ------------------------------------------


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = main(list(argv))
    return rc, out.getvalue()


@dataclass
class World:
    cfg: Config
    index: Index
    n: int = 0

    @property
    def config(self) -> str:
        return str(self.cfg.file)

    def post(self, body: str, sender: str = "@alice:example.org") -> str:
        self.n += 1
        event_id = f"$ev{self.n}"
        result = self.index.ingest.admit(
            [
                {
                    "type": "m.room.message",
                    "room_id": ROOM,
                    "sender": sender,
                    "event_id": event_id,
                    "origin_server_ts": T0 + self.n * 60_000,
                    "content": {"msgtype": "m.text", "body": body},
                }
            ]
        )
        assert result.appended == 1
        return event_id

    def run(self) -> None:
        self.index.pipeline.process_all()

    def status(self, event_id: str) -> str:
        return self.index.eventlog.status_of(EventID(event_id))[0]

    def stored_events(self) -> set[str]:
        return {e for w in self.index.store.get() for e in w.event_ids}

    def exclusions(self) -> dict[str, dict]:
        return {e["event_id"]: e for e in self.index.journal.read(kind=JOURNAL_KIND)}

    def manifest_entries(self) -> list[dict]:
        path = manifest_path(self.cfg.data_dir)
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def make_world(root: Path) -> World:
    data = root / "data"
    init_data_dir(data, "http://127.0.0.1:8008", "example.org")
    y = YAML()
    raw = y.load((data / "config.yaml").read_text())
    raw["index"]["embedder"] = "hash"
    raw["search"]["min_similarity"] = -1  # the floor is calibrated for the real model
    with open(data / "config.yaml", "w") as f:
        y.dump(raw, f)
    assert cli("allowlist", "add", "-c", str(data / "config.yaml"), ROOM)[0] == 0
    cfg = load_config(data / "config.yaml")
    assert (cfg.derived.answer_threshold, cfg.derived.reference_threshold) == (0.8, 0.5)
    index = Index.open(cfg, HashEmbedder())
    index.ingest.admit(
        [
            {
                "type": "m.room.join_rules",
                "room_id": ROOM,
                "state_key": "",
                "sender": "@admin:example.org",
                "event_id": "$jr",
                "origin_server_ts": 1,
                "content": {"join_rule": "public"},
            }
        ]
    )
    return World(cfg, index)


def add_corpus(w: World) -> None:
    rc, out = cli("ref", "add", "-c", w.config, CORPUS, str(FIXTURE))
    assert rc == 0, out


@pytest.fixture(scope="module")
def cycle(tmp_path_factory):
    """One corpus, one pipeline run over every transcript: tests 1, 2, 3 and 5 read the
    outcome of the same run, so an everything-excluding filter cannot pass 1 and 3."""
    w = make_world(tmp_path_factory.mktemp("cycle"))
    add_corpus(w)
    ids = {
        name: w.post(body)
        for name, body in [
            ("verbatim", VERBATIM),
            ("partial", PARTIAL),
            ("paraphrase", PARAPHRASE),
            ("discussion", DISCUSSION),
            ("chat0", CHAT[0]),
            ("chat1", CHAT[1]),
        ]
    }
    w.run()
    yield w, ids
    w.index.close()


@pytest.fixture
def world(tmp_path):
    w = make_world(tmp_path)
    yield w
    w.index.close()


# -- 1 -------------------------------------------------------------------------------------


def test_1_verbatim_section_quote_is_excluded(cycle):
    w, ids = cycle
    assert w.status(ids["verbatim"]) == "derived"
    assert ids["verbatim"] not in w.stored_events()
    entry = w.exclusions()[ids["verbatim"]]
    assert (entry["artifact"], entry["artifact_kind"]) == (SIGNING, "reference")
    assert entry["room_id"] == ROOM


# -- 2 -------------------------------------------------------------------------------------


def test_2_discussion_without_quoting_is_indexed_in_the_same_run(cycle):
    w, ids = cycle
    stored = w.stored_events()
    for name in ("discussion", "paraphrase", "chat0", "chat1"):
        assert w.status(ids[name]) == "indexed", name
        assert ids[name] in stored, name
    # Exactly the two quotes were excluded: not everything that mentions journalctl.
    assert set(w.exclusions()) == {ids["verbatim"], ids["partial"]}
    # The discussion does quote two cheatsheet lines: a threshold set too low drops it.
    low = Matcher(w.index.manifest, replace(w.cfg.derived, reference_threshold=0.1))
    assert low.match(DISCUSSION) is not None
    assert w.index.matcher.match(DISCUSSION) is None


# -- 3 -------------------------------------------------------------------------------------


def test_3_partial_quote_of_a_long_section_is_excluded(cycle):
    w, ids = cycle
    section = _section_text("Disk space")
    assert len(section.split("\n")) == 50
    quoted = [line for line in PARTIAL.split("\n") if line.strip() and line in section]
    assert 9 <= len(quoted) <= 12  # about ten lines of fifty
    assert w.status(ids["partial"]) == "derived"
    entry = w.exclusions()[ids["partial"]]
    assert (entry["artifact"], entry["artifact_kind"]) == (DISK, "reference")
    # Section granularity: the message is mostly the section, the section is not mostly
    # the message, so whole-chunk overlap would have missed it...
    k = w.cfg.derived.shingle_size
    assert containment(text_shingles(section, k), text_shingles(PARTIAL, k)) < 0.3
    # ...and so would the answer threshold reused for references.
    assert w.cfg.derived.reference_threshold <= entry["score"] < w.cfg.derived.answer_threshold
    same = Matcher(w.index.manifest, replace(w.cfg.derived, reference_threshold=0.8))
    assert same.match(PARTIAL) is None


# -- 4 -------------------------------------------------------------------------------------

SPAM_TALK = [
    "the spam wave last night came from three fresh accounts on a server with open "
    "registration, all posting the same link",
    "to stop it quickly we set the power levels so new members need level 10 to post, "
    "then lowered it again in the morning",
    "mjolnir can ban a whole server with a single command once it protects the room, "
    "which is far faster than kicking each account by hand",
]


def command(body: str, event_id: str) -> MessageEvent:
    ev = parse_event(
        {
            "type": "m.room.message",
            "room_id": ROOM,
            "event_id": event_id,
            "sender": "@bob:example.org",
            "origin_server_ts": T0,
            "content": {"msgtype": "m.text", "body": body},
        }
    )
    assert isinstance(ev, MessageEvent)
    return ev


async def ask(w: World, text: str):
    sent: list[dict] = []

    async def send(room_id: str, content: dict) -> str:
        sent.append(content)
        return f"$reply{len(sent)}"

    responder = Responder(
        w.index.searcher,
        send,
        "@sourcesbot:example.org",
        limiter=RateLimiter(0),
        record_answer=w.index.record_answer,
    )
    reply = await responder.answer(command(f"!sources {text}", "$cmd"))
    return reply, sent[0]


def answer_cases(reply, body: str) -> dict[str, str]:
    hit_block = body.split("\n1. ", 1)[1].split("\n2. ", 1)[0]
    return {
        "pasted_line": "the bot said: " + reply.quoted[0],
        "pasted_hit": "1. " + hit_block,
        "paraphrase": "raising the posting power level for newcomers while a spam wave "
        "lasts worked for us before as well",
        "unrelated": "does anyone know whether the community call is recorded and "
        "where the recordings end up afterwards",
    }


def outcomes(w: World, cases: dict[str, str]) -> dict[str, tuple]:
    ids = {name: w.post(body, "@carol:example.org") for name, body in cases.items()}
    w.run()
    derived = {d.event_id: d for d in w.index.eventlog.derived.derived_events()}
    return {
        name: (w.status(e),)
        + (
            (derived[e].kind, derived[e].artifact, round(derived[e].score, 6), derived[e].threshold)
            if e in derived
            else ()
        )
        for name, e in ids.items()
    }


async def test_4_answer_kind_is_unchanged_by_reference_corpora(world):
    ids = [world.post(body) for body in SPAM_TALK]
    world.run()
    reply, content = await ask(world, "how do we stop a spam wave from new accounts")
    assert reply.quoted and len(world.manifest_entries()) == len(reply.sections) >= 1
    cases = answer_cases(reply, content["body"])
    before = outcomes(world, cases)
    assert before["pasted_line"][:2] == ("derived", "answer")
    assert before["pasted_line"][2] == "answer:$reply1#1"
    assert before["pasted_line"][4] == world.cfg.derived.answer_threshold
    assert before["pasted_hit"][:2] == ("derived", "answer")
    assert before["paraphrase"] == ("indexed",) and before["unrelated"] == ("indexed",)
    assert all(world.status(e) == "indexed" for e in ids)  # the originals stay evidence

    add_corpus(world)
    assert any(e["kind"] == "reference" for e in world.manifest_entries())
    assert outcomes(world, cases) == before


# -- 5 -------------------------------------------------------------------------------------


def test_5_every_exclusion_carries_artifact_score_and_threshold(cycle):
    w, ids = cycle
    entries = list(w.index.journal.read(kind=JOURNAL_KIND))
    assert len(entries) == 2
    thresholds = {
        "answer": w.cfg.derived.answer_threshold,
        "reference": w.cfg.derived.reference_threshold,
    }
    logged = {d.event_id: d for d in w.index.eventlog.derived.derived_events()}
    for e in entries:
        assert e["artifact"] and e["artifact_kind"] in thresholds
        assert e["threshold"] == thresholds[e["artifact_kind"]]
        assert e["threshold"] <= e["score"] <= 1
        assert e["shingle_size"] == w.cfg.derived.shingle_size and e["artifact_sha256"]
        d = logged[e["event_id"]]  # the event log is tagged with the same facts
        assert (d.artifact, d.kind, d.threshold) == (
            e["artifact"],
            e["artifact_kind"],
            e["threshold"],
        )
        assert d.score == e["score"]
    journal = w.cfg.journal_path.read_text()
    for phrase in ("vacuum-size", "journald", "federation tester", "generate_signing_key"):
        assert phrase not in journal  # ids and figures, never text

    rc, out = cli("verify", "-c", w.config, "--exclusions", "--since", "1h")
    assert rc == 0 and "exclusions: 2" in out
    for e in entries:
        assert (
            f"{e['event_id']}  reference {e['artifact']}  score {e['score']:.3f}  "
            f"threshold {e['threshold']:.2f}" in out
        )
    rc, out = cli("verify", "-c", w.config, "--exclusions", "--since", "2999-01-01")
    assert rc == 0 and "exclusions: 0" in out


# -- 6 -------------------------------------------------------------------------------------


def test_6_ref_rm_removes_manifest_entries_and_the_message_is_indexed(world):
    add_corpus(world)
    first = world.post(VERBATIM)
    world.run()
    assert world.status(first) == "derived"
    sections = len(cut_sections(CORPUS, FIXTURE.name, FIXTURE.read_text()))
    assert sum(e.get("corpus") == CORPUS for e in world.manifest_entries()) == sections

    rc, out = cli("ref", "rm", "-c", world.config, CORPUS)
    assert rc == 0 and f"{sections} manifest entries" in out
    assert [e for e in world.manifest_entries() if e.get("corpus") == CORPUS] == []
    assert world.index.store.get(where={"ref_corpus": CORPUS}) == []
    assert CORPUS not in cli("ref", "list", "-c", world.config)[1]

    again = world.post(VERBATIM)
    world.run()
    assert world.status(again) == "indexed" and again in world.stored_events()


# -- 7 -------------------------------------------------------------------------------------


def test_7_verify_derived_filter_catches_a_hand_inserted_leak(world):
    add_corpus(world)
    world.post(CHAT[0])
    world.run()
    rc, out = cli("verify", "-c", world.config, "--derived-filter")
    assert rc == 0 and "derived-filter: ok" in out

    leak = Message(
        EventID("$leak"),
        RoomID(ROOM),
        UserID("@mallory:example.org"),
        T0,
        _section_text("Signing keys"),
    )
    window = Window(window_id="wleak", room_id=RoomID(ROOM), messages=(leak,))
    world.index.store.upsert([window], HashEmbedder().encode([leak.body]))
    # Its text lives in the event log, where the audit reads it (indexed in that window).
    world.index.eventlog.append([(leak, None)])
    world.index.eventlog.mark_indexed(RoomID(ROOM), {leak.event_id: window.window_id}, leak)
    rc, out = cli("verify", "-c", world.config, "--derived-filter")
    assert rc == 1
    assert "window wleak" in out and "event $leak" in out and SIGNING in out
    assert out.count("window w") == 1  # the genuine window is not named


def test_7b_a_quote_split_over_short_messages_counts_only_from_after_the_artifact(world):
    """The audit's whole-window check: six- and seven-word pieces (too short to judge one
    by one) that together are a section, written after the section became an artifact,
    are a leak, also in a window that begins with older talk; the same pieces written
    before it are evidence."""
    pieces = [
        "The signing key proves to other servers",
        "that events came from us. Rotate it",
        "only when it leaked or its file",
        "is lost. Generate a new key:",
    ]
    log = world.index.eventlog

    def append(name: str, bodies: list[str]) -> list[Message]:
        msgs = [
            Message(
                EventID(f"${name}{i}"), RoomID(ROOM), UserID("@mallory:example.org"), T0 + i, body
            )
            for i, body in enumerate(bodies)
        ]
        log.append([(m, None) for m in msgs])
        return msgs

    def index(name: str, msgs: list[Message]) -> None:
        w = Window(window_id=f"w{name}", room_id=RoomID(ROOM), messages=tuple(msgs))
        world.index.store.upsert([w], HashEmbedder().encode([m.body for m in msgs[:1]]))
        log.mark_indexed(RoomID(ROOM), {m.event_id: w.window_id for m in msgs}, msgs[-1])

    index("before", append("before", pieces))  # written before the corpus was added
    older = append("older", ["we were talking about keys earlier today, see above"])
    add_corpus(world)
    world.index.manifest.refresh()
    assert world.index.matcher.match("\n".join(pieces)) is not None  # as a whole: a quote
    assert all(world.index.matcher.match(p) is None for p in pieces)  # one by one: nothing
    rc, out = cli("verify", "-c", world.config, "--derived-filter")
    assert rc == 0, out

    index("after", older + append("after", pieces))
    rc, out = cli("verify", "-c", world.config, "--derived-filter")
    assert rc == 1
    assert "window wafter" in out and "whole window" in out and "wbefore" not in out


# -- 8 -------------------------------------------------------------------------------------


def test_8_ref_rm_leaves_earlier_exclusions_unchanged(world):
    add_corpus(world)
    ids = [world.post(VERBATIM), world.post(PARTIAL)]
    world.run()
    journal_before = world.cfg.journal_path.read_bytes()
    lines_before = [line for line in journal_before.splitlines() if JOURNAL_KIND.encode() in line]
    logged_before = world.index.eventlog.derived.derived_events()
    assert len(lines_before) == 2 and [d.event_id for d in logged_before] == ids

    assert cli("ref", "rm", "-c", world.config, CORPUS)[0] == 0
    journal_after = world.cfg.journal_path.read_bytes()
    assert journal_after.startswith(journal_before)  # appended to, never rewritten
    assert [
        line for line in journal_after.splitlines() if JOURNAL_KIND.encode() in line
    ] == lines_before
    assert world.index.eventlog.derived.derived_events() == logged_before
    assert all(world.status(e) == "derived" for e in ids)
    rc, out = cli("verify", "-c", world.config, "--exclusions")
    assert rc == 0 and all(e in out for e in ids)


# -- disguised quotes (issue 26): what reads the same is judged the same -----------------


def _inside_words(mark: str):
    return lambda text: re.sub(r"(\w\w)(?=\w\w)", lambda m: m.group(1) + mark, text)


DISGUISED = {
    "zero-width inside words": _inside_words("\u200b"),
    "zero-width after every character": lambda text: "".join(c + "\u200b" for c in text),
    "soft hyphens": _inside_words("\u00ad"),
    "cyrillic lookalikes": lambda text: text.translate(
        str.maketrans("aceopxyABCEHKMOPTX", "асеорхуАВСЕНКМОРТХ")
    ),
}


def test_disguised_quotes_are_excluded_beside_the_plain_one(world):
    """A reference section pasted with zero-width spaces (inside words, or after every
    character), soft hyphens or Cyrillic lookalikes is the section as a reader sees it,
    and as the model sees the first three: excluded like the plain paste, in one run
    beside a discussion that is indexed."""
    add_corpus(world)
    ids = {name: world.post(disguise(VERBATIM)) for name, disguise in DISGUISED.items()}
    discussion = world.post(DISCUSSION)
    world.run()
    assert {name: world.status(e) for name, e in ids.items()} == dict.fromkeys(DISGUISED, "derived")
    assert world.status(discussion) == "indexed"
    exclusions = world.exclusions()
    assert {exclusions[e]["artifact"] for e in ids.values()} == {SIGNING}
    assert not set(ids.values()) & world.stored_events()


async def test_disguises_pushed_through_the_transaction_endpoint_are_excluded(world):
    """What Synapse pushes (a real aiohttp server, the hs_token): a section pasted with a
    zero-width space after every character, one with Cyrillic lookalikes, and a harmless
    message its sender then edits into the section, in the next transaction."""
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from matrix_sources.appservice.homeserver.transactions import TransactionHandler

    add_corpus(world)

    async def fetch_state(room_id: str) -> None: ...

    handler = TransactionHandler(
        "hs-token-0123456789abcdef",
        "matrix-sources",
        world.index.ingest,
        fetch_state,
        lambda *_: None,
    )
    app = web.Application()
    app.router.add_put("/_matrix/app/v1/transactions/{transaction_id}", handler.handle)
    client = TestClient(TestServer(app))
    await client.start_server()

    def message(event_id: str, body: str, **extra) -> dict:
        return {
            "type": "m.room.message",
            "room_id": ROOM,
            "sender": "@mallory:example.org",
            "event_id": event_id,
            "origin_server_ts": T0,
            "content": {"msgtype": "m.text", "body": body, **extra},
        }

    async def push(txn: str, events: list[dict]) -> None:
        resp = await client.put(
            f"/_matrix/app/v1/transactions/{txn}",
            json={"events": events},
            headers={"Authorization": "Bearer hs-token-0123456789abcdef"},
        )
        assert resp.status == 200, await resp.text()

    try:
        await push(
            "1",
            [
                message("$zw", DISGUISED["zero-width after every character"](VERBATIM)),
                message("$cyr", DISGUISED["cyrillic lookalikes"](VERBATIM)),
                message("$fine", CHAT[0]),
                message("$talk", DISCUSSION),
            ],
        )
        world.run()
        assert [world.status(e) for e in ("$zw", "$cyr", "$fine", "$talk")] == [
            "derived",
            "derived",
            "indexed",
            "indexed",
        ]
        await push(
            "2",
            [
                message(
                    "$edit",
                    f"* {VERBATIM}",
                    **{
                        "m.new_content": {"msgtype": "m.text", "body": VERBATIM},
                        "m.relates_to": {"rel_type": "m.replace", "event_id": "$fine"},
                    },
                )
            ],
        )
        world.run()
        assert world.status("$fine") == "derived" and world.status("$talk") == "indexed"
        assert not {"$zw", "$cyr", "$fine"} & world.stored_events()
    finally:
        await client.close()


def edit(world: World, target: str, body: str, sender: str = "@alice:example.org") -> bool:
    """Whether the edit took: only its sender's (alice's) edits do."""
    world.n += 1
    event_id = f"$edit{world.n}"
    result = world.index.ingest.admit(
        [
            {
                "type": "m.room.message",
                "room_id": ROOM,
                "sender": sender,
                "event_id": event_id,
                "origin_server_ts": T0 + world.n * 60_000,
                "content": {
                    "msgtype": "m.text",
                    "body": f"* {body}",
                    "m.new_content": {"msgtype": "m.text", "body": body},
                    "m.relates_to": {"rel_type": "m.replace", "event_id": target},
                },
            }
        ]
    )
    return (target in result.history.edited) == (sender == "@alice:example.org")


def test_an_indexed_message_edited_into_a_quote_leaves_the_index_like_a_redaction(world):
    """Judged again when edited: derived now, its text kept in the event log tagged
    derived, its window re-cut without it and the old vector compacted out of Chroma's
    files."""
    add_corpus(world)
    harmless = world.post(CHAT[0])
    neighbour = world.post(CHAT[1])
    world.run()
    [old_window] = {w.window_id for w in world.index.store.get() if harmless in w.event_ids}
    old_vector = stored_vectors(world.index.store, [old_window])[old_window]
    assert world.status(harmless) == "indexed"

    assert edit(world, harmless, VERBATIM)
    world.run()
    assert world.status(harmless) == "derived"
    assert world.exclusions()[harmless]["artifact"] == SIGNING
    assert world.index.eventlog.texts.event_texts([EventID(harmless)])  # text kept
    assert harmless not in world.stored_events()
    assert world.status(neighbour) == "indexed" and neighbour in world.stored_events()
    assert world.index.pipeline.compaction_due  # as a redaction asks
    world.index.pipeline.compaction.every = 0
    assert world.index.pipeline.run_compaction() is True
    assert files_holding(world.cfg.data_dir, old_vector, n=len(old_vector)) == {}
    rc, out = cli("verify", "-c", world.config, "--derived-filter")
    assert rc == 0, out


def test_a_derived_message_edited_into_its_own_words_is_indexed(world):
    add_corpus(world)
    pasted = world.post(VERBATIM)
    world.run()
    assert world.status(pasted) == "derived"
    assert edit(world, pasted, DISCUSSION)
    world.run()
    assert world.status(pasted) == "indexed" and pasted in world.stored_events()


def test_an_edit_by_someone_else_changes_nothing(world):
    add_corpus(world)
    harmless = world.post(CHAT[0])
    world.run()
    assert edit(world, harmless, VERBATIM, sender="@mallory:example.org")
    world.run()
    assert world.status(harmless) == "indexed"


# -- an artifact cannot make older text derived (issue 26 item 9) -----------------------


def redact(world: World, target: str) -> set[str]:
    world.n += 1
    result = world.index.ingest.admit(
        [
            {
                "type": "m.room.redaction",
                "room_id": ROOM,
                "sender": "@alice:example.org",
                "event_id": f"$redaction{world.n}",
                "redacts": target,
                "origin_server_ts": T0 + world.n * 60_000,
                "content": {"redacts": target},
            }
        ]
    )
    return set(result.history.redacted)


def say(world: World, body: str, sender: str, minute: int, reply_to: str | None = None) -> str:
    world.n += 1
    event_id = f"$ev{world.n}"
    content: dict = {"msgtype": "m.text", "body": body}
    if reply_to:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
    assert (
        world.index.ingest.admit(
            [
                {
                    "type": "m.room.message",
                    "room_id": ROOM,
                    "sender": sender,
                    "event_id": event_id,
                    "origin_server_ts": T0 + minute * 60_000,
                    "content": content,
                }
            ]
        ).appended
        == 1
    )
    return event_id


async def test_editing_and_redacting_a_quoted_message_leaves_the_audit_quiet(world):
    """The finding: a user asked, edited a message the reply quoted, then redacted it;
    the bot edited its reply, and `verify --derived-filter` flagged an original message
    the reply had quoted (a later answer, linked from another window), written long
    before the bot quoted it. It is evidence: an artifact is compared only with text
    that arrived after it. A paste of the edited reply, made after it, is derived."""
    from matrix_sources.appservice.bot.bot import Bot

    alice, bob = "@alice:example.org", "@bob:example.org"
    question = say(world, "how do we stop a spam wave from new accounts on our server?", alice, 0)
    # It speaks to the question (a line that does not is no longer quoted to fill).
    detail = say(
        world,
        "the spam wave comes from new accounts on a server with open "
        "registration, all posting the same link to every room",
        alice,
        1,
    )
    answer = say(
        world,
        "to stop a spam wave from new accounts set the power levels so new "
        "members need level 10 to post, then lower them in the morning",
        bob,
        180,
        reply_to=question,
    )
    world.run()
    matrix = Matrix()
    matrix.bodies["$ask"] = "!sources how do we stop a spam wave from new accounts"
    bot = Bot(world.cfg, world.index, matrix)
    reply = await bot.responder.answer(command(matrix.bodies["$ask"], "$ask"))
    [section] = [s for s in reply.sections if question in s.sources]
    assert {detail, answer} <= set(section.shown)  # a linked answer, from its own window
    manifest = world.index.manifest

    def emitted() -> set[int]:
        manifest.refresh()
        return {a.emitted_ms for a in manifest.live(kind="answer")}

    [sent] = emitted()

    assert edit(world, detail, "never mind the link, it was only one account in the end")
    world.run()
    assert redact(world, detail) == {detail}
    bot.on_withdrawn({detail})
    await bot.idle()  # the reply edited
    world.run()
    edited = matrix.sent[-1][1]
    assert edited["m.relates_to"]["rel_type"] == "m.replace"
    # The edit keeps the question it answers (read back from the homeserver).
    assert edited["m.new_content"]["body"].startswith(
        "Sources for: how do we stop a spam wave from new accounts (edited: a message "
        "quoted here was deleted)"
    )
    assert emitted() == {sent}  # the edited reply's artifacts keep the reply's first date
    assert (
        answer in edited["m.new_content"]["body"]
        or "power levels" in edited["m.new_content"]["body"]
    )
    assert world.status(question) == world.status(answer) == "indexed"
    rc, out = cli("verify", "-c", world.config, "--derived-filter")
    assert rc == 0, out

    line = next(
        line for line in edited["m.new_content"]["body"].split("\n") if "power levels" in line
    )
    paste = world.post("the bot said: " + line.split(": ", 1)[1], "@carol:example.org")
    world.run()
    assert world.status(paste) == "derived"
    await bot.stop()


async def test_a_paste_dated_back_by_its_server_is_still_derived(world):
    """When the text arrived is the service's own clock: a sender's server that dates
    a paste before the answer (origin_server_ts) cannot make it older than it."""
    for body in SPAM_TALK:
        world.post(body)
    world.run()
    reply, _ = await ask(world, "how do we stop a spam wave from new accounts")
    world.n += 1
    backdated = f"$ev{world.n}"
    world.index.ingest.admit(
        [
            {
                "type": "m.room.message",
                "room_id": ROOM,
                "sender": "@mallory:example.org",
                "event_id": backdated,
                "origin_server_ts": 1_000,
                "content": {"msgtype": "m.text", "body": "the bot said: " + reply.quoted[0]},
            }
        ]
    )
    world.run()
    assert world.status(backdated) == "derived"


def test_the_matcher_holds_text_only_against_artifacts_emitted_before_it(world):
    add_corpus(world)
    world.index.manifest.refresh()
    [emitted] = {a.emitted_ms for a in world.index.manifest.live(kind="reference")}
    assert abs(emitted - time.time() * 1000) < 60_000  # to the ms, when `ref add` ran
    matcher = world.index.matcher
    assert matcher.match(VERBATIM) is not None
    assert matcher.match(VERBATIM, written_ms=emitted) is not None
    assert matcher.match(VERBATIM, written_ms=emitted - 1) is None


# -- around the eight ----------------------------------------------------------------------


async def test_verify_does_not_flag_the_windows_an_answer_quoted(world):
    for body in SPAM_TALK:
        world.post(body)
    world.run()
    reply, _ = await ask(world, "how do we stop a spam wave from new accounts")
    assert reply.sections
    rc, out = cli("verify", "-c", world.config, "--derived-filter")
    assert rc == 0, out


def test_verify_flags_combine_and_default_to_all(cycle):
    w, _ = cycle
    rc, out = cli("verify", "-c", w.config)
    assert rc == 0 and "derived-filter: ok" in out and "exclusions: 2" in out
    rc, out = cli("verify", "-c", w.config, "--exclusions", "--since", "yesterday-ish")
    assert rc == 2 and "--since" in out


def test_manifest_is_read_on_first_use(world):
    add_corpus(world)
    fresh = Manifest(manifest_path(world.cfg.data_dir), world.cfg.derived.shingle_size)
    assert len(fresh) == 0  # nothing read until asked
    fresh.refresh()
    assert len(fresh) == len(cut_sections(CORPUS, FIXTURE.name, FIXTURE.read_text()))


def test_import_reports_derived_messages(world, tmp_path):
    add_corpus(world)
    events = [
        {
            "type": "m.room.message",
            "room_id": ROOM,
            "sender": "@erin:example.org",
            "event_id": f"$imp{i}",
            "origin_server_ts": T0 + i,
            "content": {"msgtype": "m.text", "body": body},
        }
        for i, body in enumerate([VERBATIM, DISCUSSION])
    ]
    events.insert(
        0,
        {
            "type": "m.room.join_rules",
            "room_id": ROOM,
            "state_key": "",
            "sender": "@admin:example.org",
            "event_id": "$jr2",
            "origin_server_ts": 1,
            "content": {"join_rule": "public"},
        },
    )
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    rc, out = cli("import", "-c", world.config, "-q", str(path))
    assert rc == 0, out
    assert "indexed     1 messages" in out and "derived     1 " in out


def test_a_rebuild_resyncs_a_corpus_into_the_chunks_ref_add_cut(world):
    """`ref add|sync` and the rebuild's resync cut reference chunks of one size (they
    once differed: 500 and 1000 bytes), so a rebuild leaves the same chunks."""
    from matrix_sources.indexer.derived.reference import cut_chunks
    from matrix_sources.indexer.records import CORPUS_REFERENCE

    sections = cut_sections(CORPUS, FIXTURE.name, FIXTURE.read_text())
    size = world.cfg.index.chunk_policy.max_bytes
    assert sum(len(cut_chunks(s, size)) for s in sections) != sum(
        len(cut_chunks(s, 2 * size)) for s in sections
    )  # the fixture tells sizes apart
    add_corpus(world)
    store = world.index.store
    added = store.ids(CORPUS_REFERENCE)
    assert len(added) == sum(len(cut_chunks(s, size)) for s in sections)
    store.set_meta({"chunker": "0"})  # another chunker made the collection: rebuild
    assert world.index.ensure_meta() is True
    assert store.ids(CORPUS_REFERENCE) == added
