"""Purging a room after the fact: a room that was indexed and then turns private, gains a
bridge, turns encrypted, shows a puppet or leaves the allowlist loses its windows, its
texts (on disk, not only in queries), its cursor, and gets one journal line; and nothing
of it is indexed again, even by a pipeline run racing the purge."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from matrix_sources.indexer.components import writers
from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.records import RoomID, UserID
from matrix_sources.indexer.search.texts import WindowTexts
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.indexer.store.test_history import db_bytes
from tests.storekit import texts

ROOM = RoomID("!ops:example.org")
CLEAN = RoomID("!clean:example.org")
BOT = UserID("@sourcesbot:example.org")
ALICE = UserID("@alice:example.org")
BOB = UserID("@bob:example.org")
PUPPET = UserID("@_discord_123456789:example.org")
CANARY = "CANARY-purge-4d1e-never-after"
CLEAN_WORDS = "rotate the signing key before friday"
T0 = 1_700_000_000_000


def ev(
    etype: str,
    event_id: str,
    content: dict,
    room: str = ROOM,
    sender: str = ALICE,
    state_key: str | None = None,
    ts: int = T0,
) -> dict:
    raw = {
        "type": etype,
        "room_id": room,
        "event_id": event_id,
        "sender": sender,
        "origin_server_ts": ts,
        "content": content,
    }
    if state_key is not None:
        raw["state_key"] = state_key
    return raw


def public_state(room: str = ROOM, alias: str = "#ops:example.org") -> list[dict]:
    return [
        ev("m.room.join_rules", f"$jr{room}", {"join_rule": "public"}, room, state_key=""),
        ev("m.room.canonical_alias", f"$ca{room}", {"alias": alias}, room, state_key=""),
        *[
            ev("m.room.member", f"$m{u}{room}", {"membership": "join"}, room, sender=u, state_key=u)
            for u in (ALICE, BOB, BOT)
        ],
    ]


def msg(event_id: str, body: str, room: str = ROOM, sender: str = ALICE, i: int = 0) -> dict:
    return ev(
        "m.room.message",
        event_id,
        {"msgtype": "m.text", "body": body},
        room,
        sender,
        ts=T0 + i * 1000,
    )


class Env:
    def __init__(self, root: Path, embedder=None, where=None) -> None:
        self.root = root
        self.eventlog = EventLog(where or root / "eventlog.sqlite3")
        self.journal = Journal(root / "journal.jsonl")
        self.store = ChromaStore(path=root / "chroma", eventlog=self.eventlog)
        self.gate = Gate(frozenset({ROOM, CLEAN}), BOT)
        self.ingest, self.pipeline = writers(
            self.eventlog, self.journal, self.store, embedder or HashEmbedder(), self.gate
        )

    def index_both_rooms(self) -> None:
        self.ingest.admit(
            public_state()
            + public_state(CLEAN, "#clean:example.org")
            + [
                msg("$a1", f"the secret is {CANARY}", i=1),
                msg("$a2", "and a second line of that room", sender=BOB, i=2),
                msg("$c1", CLEAN_WORDS, CLEAN, i=3),
            ]
        )
        assert self.pipeline.process_all() == 3
        assert self.windows(ROOM) and self.windows(CLEAN)
        assert self.files_with(CANARY)  # the checks below would see it: it is on disk

    def windows(self, room: str) -> list:
        return self.store.get(where={"room_id": room})

    def files_with(self, needle: str) -> list[str]:
        """Files holding `needle`: the event log with its WAL, the journal, Chroma's
        SQLite file. Not Chroma's HNSW buffers (*.bin): what they leak comes from this
        process's heap, which `run` and `import` keep clean (test_heap.py)."""
        raw = needle.encode()
        found = sorted(
            str(p.relative_to(self.root))
            for p in self.root.rglob("*")
            if p.is_file() and p.suffix != ".bin" and raw in p.read_bytes()
        )
        if self.eventlog.path is None and raw in db_bytes(self.root, self.eventlog):
            found.append("the PostgreSQL event log's rows")
        return found

    def entries(self, kind: str | None = None) -> list[dict]:
        return list(self.journal.read(kind=kind))

    def bodies(self, room: str) -> list:
        with self.eventlog.transaction(immediate=False) as cur:
            return [r[0] for r in cur.execute("SELECT body FROM events WHERE room_id = ?", (room,))]


@pytest.fixture
def env(tmp_path, eventlog_db):
    e = Env(tmp_path, where=eventlog_db)
    yield e
    e.eventlog.close()


def assert_purged(env: Env, rule: str, event_id: str | None, source: str = "push") -> dict:
    """The room's windows, texts and cursor are gone from the store, the event log and the
    disk; the clean room is untouched; one purge line names the room, rule and event, by
    id: never the room's name."""
    assert env.windows(ROOM) == []
    clean = texts(env.store, [w.window_id for w in env.windows(CLEAN)])
    assert clean and CLEAN_WORDS in list(clean.values())[0]
    assert env.eventlog.counts(ROOM) == {"purged": 2}
    assert env.bodies(ROOM) == [None, None]
    assert env.eventlog.cursor(ROOM) is None and env.eventlog.cursor(CLEAN) is not None
    assert env.files_with(CANARY) == []  # Chroma's files, the event log and its WAL
    [purge] = env.entries("purge")
    assert (purge["rule"], purge["room_id"]) == (rule, ROOM) and "room" not in purge
    assert "#ops" not in env.journal.path.read_text()
    assert purge.get("event_id") == event_id
    assert (purge["windows"], purge["messages"], purge["source"]) == (1, 2, source)
    return purge


TRIGGERS = {
    "turns invite-only": (
        rules.NOT_PUBLIC,
        ev("m.room.join_rules", "$flip", {"join_rule": "invite"}, state_key=""),
    ),
    "turns knock": (
        rules.NOT_PUBLIC,
        ev("m.room.join_rules", "$flip", {"join_rule": "knock"}, state_key=""),
    ),
    "gains m.bridge": (
        rules.BRIDGED_ROOM,
        ev("m.bridge", "$flip", {"protocol": {"id": "x"}}, state_key="discord/123"),
    ),
    "gains uk.half-shot.bridge": (
        rules.BRIDGED_ROOM,
        ev("uk.half-shot.bridge", "$flip", {}, state_key="irc"),
    ),
    "turns encrypted": (
        rules.ENCRYPTED_ROOM,
        ev("m.room.encryption", "$flip", {"algorithm": "m.megolm.v1.aes-sha2"}, state_key=""),
    ),
    "a puppet joins": (
        rules.PUPPET_SENDER,
        ev("m.room.member", "$flip", {"membership": "join"}, sender=PUPPET, state_key=PUPPET),
    ),
    "a puppet speaks": (rules.PUPPET_SENDER, msg("$flip", f"bridged {CANARY}", sender=PUPPET, i=9)),
}


@pytest.mark.parametrize("trigger", sorted(TRIGGERS))
def test_room_refused_after_the_fact_is_purged(env, trigger):
    rule, event = TRIGGERS[trigger]
    env.index_both_rooms()
    result = env.ingest.admit([event, msg("$later", f"after {CANARY}", i=10)])
    assert result.appended == 0
    assert_purged(env, rule, "$flip")
    assert env.eventlog.status_of("$later") is None  # refused from then on
    assert {e["event_id"] for e in env.entries("refusal")} >= {"$later"}
    assert CANARY not in (env.root / "journal.jsonl").read_text()
    assert env.pipeline.process_all() == 0 and env.windows(ROOM) == []
    payload = " ".join(texts(env.store).values()) + " ".join(
        json.dumps(w.senders) for w in env.store.get()
    )
    assert not re.search(r"@_?discord_", payload)


def test_room_leaving_the_allowlist_is_purged(env):
    env.index_both_rooms()
    env.gate.allowlist = frozenset({CLEAN})  # what AllowlistWatch.reload does
    [report] = env.ingest.purge_unlisted()
    assert (report.room_id, report.rule, report.windows, report.messages) == (
        ROOM,
        rules.NOT_ALLOWLISTED,
        1,
        2,
    )
    assert_purged(env, rules.NOT_ALLOWLISTED, None, source="allowlist")
    assert ROOM not in env.ingest.facts  # no longer read at all
    assert env.ingest.purge_unlisted() == []  # nothing left to purge
    env.ingest.admit([msg("$later", CANARY, i=10)])
    assert env.eventlog.status_of("$later") is None


def test_pending_events_of_a_purged_room_are_never_indexed(env):
    env.ingest.admit(public_state() + [msg("$a1", CANARY, i=1), msg("$a2", "more", i=2)])
    assert env.eventlog.counts(ROOM) == {"pending": 2}
    env.ingest.admit([TRIGGERS["turns invite-only"][1]])
    assert env.eventlog.counts(ROOM) == {"purged": 2}
    assert env.pipeline.process_all() == 0
    assert env.windows(ROOM) == [] and env.files_with(CANARY) == []
    [purge] = env.entries("purge")
    assert (purge["windows"], purge["messages"]) == (0, 2)


def test_messages_before_the_flip_in_one_batch_are_never_written(env):
    result = env.ingest.admit(
        public_state()
        + [msg("$a1", CANARY, i=1), TRIGGERS["gains m.bridge"][1], msg("$a2", CANARY, i=2)]
    )
    assert result.appended == 0 and result.refused == {rules.BRIDGED_ROOM: 2}
    assert env.eventlog.counts() == {} and env.files_with(CANARY) == []
    assert sorted(e["event_id"] for e in env.entries("refusal")) == ["$a1", "$a2"]
    assert env.entries("purge") == []  # nothing was stored, so nothing to purge


def test_purge_racing_an_upsert_does_not_bring_the_windows_back(tmp_path):
    """The purge lands while the pipeline embeds the room's window (tail already read):
    the pipeline must drop that batch instead of upserting it after the purge."""
    env: Env

    class PurgingEmbedder(HashEmbedder):
        def encode(self, texts):
            if any(CANARY in t for t in texts):
                env.ingest.admit([TRIGGERS["turns invite-only"][1]])
            return super().encode(texts)

    env = Env(tmp_path, PurgingEmbedder())
    env.ingest.admit(public_state() + [msg("$a1", CANARY, i=1), msg("$a2", "x", i=2)])
    assert env.pipeline.process_all() == 0
    assert env.windows(ROOM) == [] and env.eventlog.counts(ROOM) == {"purged": 2}
    assert env.files_with(CANARY) == []
    env.eventlog.close()


def test_purge_then_public_again_during_an_embed_still_drops_the_old_text(tmp_path):
    """Purged and public again before the racing batch commits: the gate admits the room
    once more, but the batch holds text read before the purge and must not land."""
    env: Env

    class FlippingEmbedder(HashEmbedder):
        def encode(self, texts):
            if any(CANARY in t for t in texts):
                env.ingest.admit([TRIGGERS["turns invite-only"][1]])
                env.ingest.admit(
                    [ev("m.room.join_rules", "$back", {"join_rule": "public"}, state_key="")]
                )
            return super().encode(texts)

    env = Env(tmp_path, FlippingEmbedder())
    env.ingest.admit(public_state() + [msg("$a1", CANARY, i=1)])
    assert env.pipeline.process_all() == 0
    assert env.ingest.admits(ROOM)  # public again: new messages may be indexed...
    assert env.windows(ROOM) == [] and env.files_with(CANARY) == []  # ...the old never
    env.ingest.admit([msg("$new", "a fresh message after the room reopened", i=5)])
    assert env.pipeline.process_all() == 1
    assert [w.event_ids for w in env.windows(ROOM)] == [("$new",)]
    env.eventlog.close()


def test_purge_waits_for_a_commit_in_progress(env):
    env.index_both_rooms()
    done = threading.Event()

    def purge():
        env.ingest.admit([TRIGGERS["turns encrypted"][1]])
        done.set()

    with env.pipeline.lock:  # a commit holding the lock
        t = threading.Thread(target=purge)
        t.start()
        assert not done.wait(0.3)
    t.join(10)
    assert done.is_set()
    assert_purged(env, rules.ENCRYPTED_ROOM, "$flip")


def test_facts_learned_anew_purge_a_room_that_changed_while_we_were_away(env):
    env.index_both_rooms()
    env.ingest.learn(
        ROOM,
        RoomFacts(
            join_rule="invite",
            members=frozenset({ALICE, BOB, BOT}),
            canonical_alias="#ops:example.org",
        ),
    )
    assert_purged(env, rules.NOT_PUBLIC, None, source="state")


def test_unknown_facts_are_not_a_reason_to_purge_nor_to_index(env):
    env.index_both_rooms()
    env.ingest.admit([msg("$a3", "pending when the facts went unknown", i=5)])
    env.ingest.learn(ROOM, RoomFacts())  # e.g. state refetched, join rule not seen yet
    assert env.windows(ROOM) and env.entries("purge") == []
    assert env.pipeline.process_all() == 0  # not admitted either: it waits
    assert env.eventlog.counts(ROOM) == {"indexed": 2, "pending": 1}


def test_a_purged_room_is_purged_once(env):
    env.index_both_rooms()
    env.ingest.admit([TRIGGERS["turns invite-only"][1]])
    env.ingest.admit([TRIGGERS["gains m.bridge"][1], msg("$later", CANARY, i=10)])
    env.ingest.learn(ROOM, env.ingest.facts[ROOM])
    assert len(env.entries("purge")) == 1


def test_room_public_again_indexes_only_new_messages(env):
    env.index_both_rooms()
    env.ingest.admit([TRIGGERS["turns invite-only"][1]])
    env.ingest.admit(
        [
            ev("m.room.join_rules", "$back", {"join_rule": "public"}, state_key=""),
            msg("$new", "a fresh message after the room reopened", i=20),
        ]
    )
    assert env.pipeline.process_all() == 1
    assert [w.event_ids for w in env.windows(ROOM)] == [("$new",)]
    assert env.eventlog.status_of("$a1") == ("purged", None)
    assert env.files_with(CANARY) == []


def test_compaction_keeps_the_other_rooms_readable_after_reopening(env):
    env.index_both_rooms()
    env.ingest.admit([TRIGGERS["turns invite-only"][1]])
    reopened = ChromaStore(path=env.root / "chroma", eventlog=env.eventlog)
    assert [w.window_id for w in reopened.get()] == [w.window_id for w in env.windows(CLEAN)]
    vec = HashEmbedder().encode([CLEAN_WORDS])
    [[hit]] = reopened.nearest(vec, 5, records=True)
    [(text, _)] = WindowTexts(env.eventlog).read([hit.window])
    assert hit.window.room_id == CLEAN and CLEAN_WORDS in text


def test_journal_command_prints_purges_by_rule(tmp_path, capsys):
    from matrix_sources.appservice.cli.main import main
    from matrix_sources.indexer.datadir import init_data_dir
    from matrix_sources.indexer.records import Refusal

    init_data_dir(tmp_path, domain="example.org")
    j = Journal(tmp_path / "journal.jsonl")
    j.purge(Refusal(rules.NOT_PUBLIC, ROOM, "$flip", whole_room=True), 3, 7)
    j.refusal(Refusal(rules.ENCRYPTED_EVENT, ROOM, "$enc"))
    assert main(["journal", "-c", str(tmp_path / "config.yaml"), "--rule", "not_public"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    entry = json.loads(line)
    assert (
        entry["kind"],
        entry["room_id"],
        entry["event_id"],
        entry["windows"],
        entry["messages"],
    ) == ("purge", ROOM, "$flip", 3, 7)


def test_member_events_are_judged_without_rescanning_every_member(env):
    """A big room's history is thousands of member events: each is judged by the member
    it adds, not by a pass over all members (quadratic on import)."""
    checked: list[str] = []
    real = env.gate.is_puppet
    env.gate.is_puppet = lambda user: checked.append(user) or real(user)
    n = 300
    env.ingest.admit(
        public_state()
        + [
            ev(
                "m.room.member",
                f"$j{i}",
                {"membership": "join"},
                sender=f"@u{i}:example.org",
                state_key=f"@u{i}:example.org",
            )
            for i in range(n)
        ]
    )
    assert env.ingest.admits(ROOM)
    assert len(checked) < 3 * n
    env.ingest.admit([TRIGGERS["a puppet joins"][1]])
    assert not env.ingest.admits(ROOM)
