"""A question the English model does not read as English meets chat in its own language
by the language alone (issue 51, off-topic; indexer/search/language.py OtherLanguage).

With the shipped config and the packaged English model: a Spanish question about
cooking must not be answered by the room's Spanish small talk, nor by the English lines
that speak of Spanish; a Spanish question naming the technical thing still finds the
English answer, and a Spanish window holding the question's words is still found."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.ingest.allowlist import add_room
from matrix_sources.indexer.search import searcher as searcher_module
from matrix_sources.indexer.search.abstain import Floor
from matrix_sources.indexer.search.language import OtherLanguage, foreign, other_language
from matrix_sources.indexer.search.searcher import SourceQuery

ROOM = "!help:example.org"
T0 = 1_700_000_000_000
MINUTE = 60_000

# (sender, minutes after T0, body, index of the message it replies to)
CHAT = [
    ("ana", 0, "how do I mount an NTFS partition automatically at boot?", None),
    ("ben", 2, "add a line for it to /etc/fstab with the ntfs-3g type and its UUID", 0),
    ("ana", 4, "thanks, that worked after a reboot", None),
    ("rosa", 60, "hola, alguien habla español por aquí?", None),
    ("luis", 62, "hola algun argentino en el canal?", None),
    ("rosa", 63, "¿alguien sabe de una buena distro para empezar con linux?", None),
    ("bot", 64, "En la mayoría de los canales de Ubuntu se habla sólo en inglés.", 5),
    ("kim", 120, "we cant speak spanish here?", None),
    ("ben", 121, "english only channel please, there are other channels for that", 7),
    ("ana", 180, "my wifi drops every few minutes on the new kernel", None),
    ("ben", 183, "try turning off power saving for the wireless card", 9),
]


def events() -> list[dict]:
    out: list[dict] = [
        {
            "type": "m.room.join_rules",
            "room_id": ROOM,
            "sender": "@ana:example.org",
            "state_key": "",
            "event_id": "$jr",
            "origin_server_ts": T0 - 1,
            "content": {"join_rule": "public"},
        }
    ]
    for i, (who, minute, body, reply) in enumerate(CHAT):
        content: dict = {"msgtype": "m.text", "body": body}
        if reply is not None:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": f"$m{reply}"}}
        out.append(
            {
                "type": "m.room.message",
                "room_id": ROOM,
                "sender": f"@{who}:example.org",
                "event_id": f"$m{i}",
                "origin_server_ts": T0 + minute * MINUTE,
                "content": content,
            }
        )
    return out


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    data = tmp_path_factory.mktemp("other-language") / "d"
    init_data_dir(data, domain="example.org")
    cfg = load_config(data / "config.yaml")
    add_room(cfg.allowlist_path, ROOM)
    index = Index.open(cfg)
    index.ingest.admit(events())
    index.pipeline.process_all()
    yield index
    index.close()


def ask(index, text: str):
    return index.searcher.search(SourceQuery.build([text], 5))


def cited(hits) -> set[str]:
    return {e for h in hits for e in h.cited_event_ids}


@pytest.mark.model
@pytest.mark.parametrize(
    "question",
    [
        "¿Cuánto tiempo hay que cocer un huevo para que la yema quede blanda?",
        "¿Qué lugares hay que ver en Lisboa en un fin de semana?",
        "¿Cómo quito una mancha de vino tinto de una alfombra blanca?",
    ],
)
def test_a_spanish_question_about_something_else_gets_nothing(index, question):
    assert ask(index, question) == []


@pytest.mark.model
def test_without_the_rule_the_spanish_small_talk_answered_them(index, monkeypatch):
    """What the rule changes, with this room and the shipped floor: the same questions
    found the Spanish small talk or the lines about Spanish (so the test above can fail)."""
    monkeypatch.setattr(searcher_module, "other_language", lambda texts, embedder: None)
    found = [
        ask(index, q)
        for q in (
            "¿Cuánto tiempo hay que cocer un huevo para que la yema quede blanda?",
            "¿Qué lugares hay que ver en Lisboa en un fin de semana?",
            "¿Cómo quito una mancha de vino tinto de una alfombra blanca?",
        )
    ]
    assert any(found)


@pytest.mark.model
def test_a_spanish_question_naming_the_thing_finds_the_english_answer(index):
    hits = ask(index, "¿Cómo monto una partición NTFS automáticamente al arrancar?")
    assert hits and "$m1" in hits[0].cited_event_ids


@pytest.mark.model
def test_a_spanish_window_holding_the_questions_words_is_found(index):
    assert "$m5" in cited(ask(index, "buena distro para empezar"))


@pytest.mark.model
def test_english_questions_are_not_judged(index):
    hits = ask(index, "wireless keeps disconnecting with the latest kernel")
    assert hits and "$m10" in hits[0].cited_event_ids
    assert other_language(["wireless keeps disconnecting"], index.searcher.embedder) is None


VOCAB = frozenset("how do i mount the disk at boot a line in fstab we can speak here".split())


def test_what_reads_foreign():
    assert foreign("hola algun argentino en el canal", VOCAB) is True
    assert foreign("how do I mount the disk", VOCAB) is False
    assert foreign("ok", VOCAB) is None  # too short to tell
    assert foreign("测试一下", VOCAB) is True  # another script
    assert foreign("Как смонтировать диск?", VOCAB) is True


def test_the_floor_for_a_question_in_another_language():
    spanish = OtherLanguage(VOCAB, latin=True)
    q = Floor(0.34, 0.11).for_query(["¿cómo monto el disco al arrancar?"], other_language=spanish)
    assert q.needed(["we mount the disco at boot here"]) == pytest.approx(0.34)  # shares "disco"
    assert q.needed(["we can speak here"]) == float("inf")  # shares no word
    assert q.needed(["hola algun argentino en el canal disco"]) == float("inf")  # Spanish too
    # The window reads English, but shares the question's words ("el", "disco") only in
    # its line in another language: their language's words, not its topic's.
    mixed = ["how do i mount the disk at boot a line in fstab", "hola algun argentino el disco"]
    assert foreign("\n".join(mixed), VOCAB) is False
    assert q.needed(mixed) == float("inf")
    # The window reads English, its matched line does not.
    assert q.needed(["we mount the disco at boot here"], "el disco de rosa") == float("inf")
    # A question in another script shares no word with English chat: only the language
    # of the hit counts (its gloss reaches the English answer).
    chinese = Floor(0.34, 0.11).for_query(
        ["如何挂载磁盘"], other_language=OtherLanguage(VOCAB, False)
    )
    assert chinese.needed(["how do i mount the disk at boot"]) == pytest.approx(0.45)
    assert chinese.needed(["测试一下 测试一下 测试"]) == float("inf")
    # Not judged without it.
    plain = Floor(0.34, 0.11).for_query(["¿cómo monto el disco al arrancar?"])
    assert plain.needed(["hola algun argentino por aqui"]) == pytest.approx(0.45)


@pytest.mark.model
def test_why_after_nothing_says_the_language_was_the_reason(index):
    from matrix_sources.appservice.bot.replies import render_why

    texts = ("¿Cuánto tiempo hay que cocer un huevo para que la yema quede blanda?",)
    hits, closest = index.searcher.search_with_closest(SourceQuery.build(list(texts), 5))
    assert hits == [] and closest is not None
    body = render_why(1, closest, texts, 60, index.searcher.floor_for(texts)).body
    assert "does not read as English" in body and "only a window holding" in body
    assert "inf" not in body


@pytest.mark.model
def test_the_shell_says_why_and_the_json_carries_the_note(tmp_path, capsys):
    """`matrix-sources search` on the data dir (no service running): the question in
    Spanish gets "nothing matches" with the line that sets the multilingual model, as
    the room's reply has it; `--json` carries it as "note", as the search API does."""
    import json

    from matrix_sources.appservice.cli.main import main

    data = tmp_path / "d"
    init_data_dir(data, domain="example.org")
    add_room(load_config(data / "config.yaml").allowlist_path, ROOM)
    (tmp_path / "events.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in events()), encoding="utf-8"
    )
    cfg = str(data / "config.yaml")
    assert main(["import", "-c", cfg, "-q", str(tmp_path / "events.jsonl")]) == 0
    capsys.readouterr()
    egg = "¿Cuánto tiempo hay que cocer un huevo para que la yema quede blanda?"
    assert main(["search", "-c", cfg, egg]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Nothing in the index answers that")
    assert "does not read as English" in out and "multilingual-e5-small+all-MiniLM-L6-v2" in out
    assert main(["search", "-c", cfg, "--json", egg]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["hits"] == [] and "does not read as English" in got["note"]
    assert main(["search", "-c", cfg, "--json", "wifi drops on the new kernel"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)
    batch = tmp_path / "q.jsonl"
    batch.write_text(
        json.dumps({"id": "egg", "texts": [egg]})
        + "\n"
        + json.dumps({"id": "wifi", "texts": ["wifi drops on the new kernel"]})
        + "\n",
        encoding="utf-8",
    )
    assert main(["search", "-c", cfg, "--queries", str(batch)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert "does not read as English" in lines[0]["note"] and "note" not in lines[1]
