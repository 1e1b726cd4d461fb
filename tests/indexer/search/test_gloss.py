"""A question in Chinese glossed in English (indexer/search/gloss.py): its words cut by the
dictionary and given the plain sense the chat holds most (else the first), Latin-script
terms kept in place; the searcher searches the gloss beside the question, and the floor
stays the question's."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.chunker import build_windows, embed_text
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.search import searcher as searcher_module
from matrix_sources.indexer.search.gloss import gloss, has_han
from matrix_sources.indexer.search.searcher import Searcher, SourceQuery
from matrix_sources.indexer.store.eventlog import keywords
from tests.storekit import index, open_store


def test_words_are_cut_by_the_dictionary_and_given_their_sense():
    assert gloss("怎么备份数据库？") == "how? backup database"
    # The longest entry wins: 数据库 (database), not 数据 (data) and 库.
    assert "database" in gloss("数据库") and "data " not in gloss("数据库")


def test_latin_terms_stay_as_written_in_place():
    assert gloss("用 Twitter 注册后名字多了个后缀").startswith("Twitter register")
    assert gloss("Caddy 放在 PHP-FPM 容器前面时报 502 Bad Gateway").split()[:2] == [
        "Caddy",
        "PHP-FPM",
    ]


def test_one_character_words_are_left_out():
    # 我 (I), 的 (a particle), 换 (change): pronouns and particles would be noise.
    got = gloss("我管理的社区怎么换头像？").split()
    assert "I" not in got and "community" in got


def test_no_chinese_or_nothing_known_gives_no_gloss():
    assert gloss("how do I back up the database") == ""
    assert gloss("Как сделать резервную копию базы данных?") == ""
    assert gloss("㐀㐁") == ""  # Han, but no entry of two characters or more
    assert has_han("数据库 backup") and not has_han("backup")


def test_invisible_characters_do_not_cut_a_word():
    assert gloss("数据\u200b库\u2060备份") == gloss("数据库备份") == "database backup"


def test_japanese_is_not_read_as_chinese():
    # 手紙 is a letter in Japanese and toilet paper in Chinese: kana say which language.
    assert gloss("手纸") and gloss("手紙") == gloss("手纸")
    assert gloss("手紙を書きました") == ""
    assert gloss("データベースのバックアップ方法") == ""


def test_a_word_takes_the_sense_the_chat_holds_most():
    # CC-CEDICT: 容器 receptacle/vessel/(computing) container; 端口 interface/port.
    assert gloss("容器的端口") == "receptacle interface"  # no chat to ask: the first
    held = {"container": 40, "port": 90, "vessel": 2}
    assert gloss("容器的端口", lambda t: held.get(t, 0)) == "container port"
    # A sense whose rarest word no window holds counts as held by none; a tie keeps
    # the dictionary's order.
    assert gloss("容器的端口", lambda t: 0) == "receptacle interface"


def test_the_searcher_asks_the_keyword_index_which_sense_its_chat_means(tmp_path):
    store = open_store(tmp_path)
    emb = HashEmbedder()
    room = RoomID("!dev:example.org")
    bodies = [
        "publish the container port with -p 8080:80",
        "lunch plans for friday",
        "the receptacle interface review is on monday",
        "upgrade synapse tonight",
        "which port does the container listen on",
        "the container image is rebuilt",
    ]
    messages = [
        Message(
            EventID(f"$m{i}"), room, UserID("@a:example.org"), 1_700_000_000_000 + i * 7_200_000, b
        )
        for i, b in enumerate(bodies)
    ]
    windows = build_windows(messages, ChunkPolicy(max_bytes=10, gap_ms=1))
    index(store, windows, emb.encode([embed_text(w) for w in windows]))
    asked = SourceQuery.build(["容器的端口？"], 1)
    assert Searcher(emb, store).search(asked)[0].first_event_id in ("$m0", "$m4")
    # An event log from before the index (not built yet): the dictionary's first sense.
    with store.eventlog.transaction() as cur:
        keywords.reset(cur)
    assert Searcher(emb, store).search(asked)[0].first_event_id == "$m2"
    assert keywords.build(store.eventlog.db) == len(windows)
    assert Searcher(emb, store).search(asked)[0].first_event_id in ("$m0", "$m4")


@pytest.fixture
def chat(tmp_path):
    """English windows the hash embedder cannot connect to a Chinese question: only the
    words of its gloss can find them."""
    store = open_store(tmp_path)
    emb = HashEmbedder()
    room = RoomID("!ops:example.org")
    bodies = [
        "backup the postgres database every night",
        "lunch plans for friday",
        "the signing key expired and federation broke",
        "upgrade synapse tonight",
    ]
    messages = [
        Message(
            EventID(f"$m{i}"), room, UserID("@a:example.org"), 1_700_000_000_000 + i * 7_200_000, b
        )
        for i, b in enumerate(bodies)
    ]
    windows = build_windows(messages, ChunkPolicy(max_bytes=10, gap_ms=1))
    index(store, windows, emb.encode([embed_text(w) for w in windows]))
    return store, emb


def only_the_question(hit) -> float:
    """The fused score a hit would have from the question's own vector alone."""
    return 1 / (searcher_module.DEFAULT_RRF_K + hit.ranks[0][0]) if hit.ranks[0] else 0.0


def test_a_chinese_question_finds_english_chat_through_its_gloss(chat, monkeypatch):
    store, emb = chat
    asked = SourceQuery.build(["怎么备份数据库？"], 4)
    hits = Searcher(emb, store).search(asked)
    assert hits[0].first_event_id == "$m0" and hits[0].score > only_the_question(hits[0])
    monkeypatch.setattr(searcher_module, "gloss", lambda text, df=None: "")
    alone = {h.first_event_id: h for h in Searcher(emb, store).search(asked)}
    assert alone["$m0"].score == only_the_question(alone["$m0"])  # nothing else found it


def test_the_gloss_is_embedded_with_the_question_in_one_batch(chat):
    store, emb = chat
    calls: list[list[str]] = []
    real = emb.encode
    emb.encode = lambda texts, **kw: calls.append(list(texts)) or real(texts, **kw)
    Searcher(emb, store).search(SourceQuery.build(["怎么备份数据库？"], 1))
    assert calls == [["怎么备份数据库？", "how? backup database"]]


# -- with the shipped model and floor ------------------------------------------------------

ROOM = "!infra:example.org"
T0 = 1_700_000_000_000
# An English room of team chat; the answer to the question at 3 comes at 14.
CHAT = [
    ("dana", "morning all"),
    ("eli", "the staging deploy finished, logs look clean"),
    ("dana", "nice, I'll tell the frontend folks"),
    ("mira", "how do we back up the database every night? the old cron job is gone"),
    ("eli", "coffee first"),
    ("dana", "who has the keys to the conference room?"),
    ("eli", "front desk has a spare"),
    ("sam", "the CI runners are slow again today"),
    ("dana", "probably the cache, I'll clear it after lunch"),
    ("sam", "thanks"),
    ("eli", "did anyone review the onboarding doc?"),
    ("dana", "not yet, tomorrow"),
    ("sam", "the new monitors arrived"),
    ("eli", "lunch at noon?"),
    (
        "kai",
        "mira: run pg_dump from a systemd timer at 2am and copy the dump to the "
        "backup bucket, the unit files are in the ops repo",
    ),
    ("mira", "perfect, thanks kai"),
    ("sam", "the printer on floor 2 is jammed"),
    ("dana", "facilities are on it"),
    ("eli", "release notes for 2.3 are up"),
    ("sam", "friday drinks?"),
    ("dana", "sure"),
    ("eli", "I'm off early today"),
    ("kai", "the VPN certificate renews next week"),
    ("sam", "noted"),
]


@pytest.fixture(scope="module")
def english(tmp_path_factory):
    data = tmp_path_factory.mktemp("gloss")
    init_data_dir(data, "http://127.0.0.1:8008", "example.org")
    (data / "allowlist.yaml").write_text(f"rooms:\n  - '{ROOM}'\n", encoding="utf-8")
    y = YAML()
    raw = y.load((data / "config.yaml").read_text(encoding="utf-8"))
    assert raw["index"]["embedder"].get("model") in (None, "all-MiniLM-L6-v2")  # the default
    index = Index.open(load_config(data / "config.yaml"))
    state = [
        {
            "type": t,
            "room_id": ROOM,
            "sender": "@admin:example.org",
            "state_key": "",
            "event_id": f"${t}",
            "origin_server_ts": T0 - 1000,
            "content": c,
        }
        for t, c in (
            ("m.room.join_rules", {"join_rule": "public"}),
            ("m.room.history_visibility", {"history_visibility": "shared"}),
        )
    ]
    index.ingest.admit(
        state
        + [
            {
                "type": "m.room.message",
                "room_id": ROOM,
                "sender": f"@{who}:example.org",
                "event_id": f"$e{i}",
                "origin_server_ts": T0 + i * 60_000,
                "content": {"msgtype": "m.text", "body": body},
            }
            for i, (who, body) in enumerate(CHAT)
        ]
    )
    index.pipeline.process_all()
    yield index
    index.close()


@pytest.mark.slow
@pytest.mark.model
def test_asked_in_chinese_an_english_room_answers_first(english, monkeypatch):
    """With the shipped English model and floor: the question, in Chinese, finds the
    English answer first; without its gloss the model cannot read it there."""
    asked = SourceQuery.build(["数据库每天晚上怎么自动备份？"], 3)
    hits = english.searcher.search(asked)
    assert hits and "$e14" in hits[0].event_ids
    monkeypatch.setattr(searcher_module, "gloss", lambda text, df=None: "")
    alone = english.searcher.search(asked)
    assert not alone or "$e14" not in alone[0].event_ids


@pytest.mark.slow
@pytest.mark.model
def test_an_off_topic_chinese_question_still_gets_nothing(english):
    assert english.searcher.search(SourceQuery.build(["红烧肉怎么做才好吃？"], 3)) == []
