"""Every language (issue 27): rooms written in Chinese, Russian and Arabic, each asked in
its own language, answer with the message that answers; a question about something
else in the same language gets "nothing matches".

The rooms (tests/fixtures/rooms/, written for these tests) are 32 to 34 messages of
ordinary team chat, each with one question and its answer a dozen messages later, as a
reply. They go through the real graph (Index.open on a data dir whose config names
multilingual-e5-small, the packaged 4-bit model), the shipped floor and all; and again
with that model beside all-MiniLM-L6-v2 in one vector (pair_embedder.py).
"""

from __future__ import annotations

import json

import pytest
from ruamel.yaml import YAML

from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import MODEL_FLOORS, load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.models.embedder import QuerySide
from matrix_sources.indexer.search.searcher import SourceQuery
from tests.paths import FIXTURES

# Each loads the multilingual model and indexes the rooms with it (about 10 s of CPU):
# in the full run and `-m slow`, as the other real-model backend tests.
pytestmark = pytest.mark.slow

ROOMS = FIXTURES / "rooms"
T0 = 1_700_000_000_000
ADMIN = "@admin:example.org"


def room(lang: str) -> dict:
    return json.loads((ROOMS / f"{lang}.json").read_text(encoding="utf-8"))


def events(lang: str, data: dict) -> list[dict]:
    """The room as Matrix events: public, history shared, each message from its sender,
    a minute apart, a reply carrying m.in_reply_to."""
    rid = f"!{lang}:example.org"
    out = [
        {
            "type": t,
            "room_id": rid,
            "sender": ADMIN,
            "state_key": "",
            "event_id": f"${lang}-{t}",
            "origin_server_ts": T0 - 1000,
            "content": c,
        }
        for t, c in (
            ("m.room.join_rules", {"join_rule": "public"}),
            ("m.room.history_visibility", {"history_visibility": "shared"}),
        )
    ]
    for i, (who, body, reply) in enumerate(data["messages"]):
        content = {"msgtype": "m.text", "body": body}
        if reply is not None:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": f"${lang}-{reply}"}}
        out.append(
            {
                "type": "m.room.message",
                "room_id": rid,
                "sender": f"@{who}:example.org",
                "event_id": f"${lang}-{i}",
                "origin_server_ts": T0 + i * 60_000,
                "content": content,
            }
        )
    return out


MODELS = {
    "multilingual-e5-small": "intfloat/multilingual-e5-small",
    "multilingual-e5-small+all-MiniLM-L6-v2": (
        "sentence-transformers/all-MiniLM-L6-v2+intfloat/multilingual-e5-small"
    ),
}


@pytest.fixture(scope="module", params=list(MODELS))
def index(tmp_path_factory, request):
    data = tmp_path_factory.mktemp("multilingual")
    init_data_dir(data, "http://127.0.0.1:8008", "example.org")
    y = YAML()
    raw = y.load((data / "config.yaml").read_text(encoding="utf-8"))
    raw["index"]["embedder"]["model"] = request.param
    del raw["index"]["embedder"]["backend"]  # the model's one backend, unwritten
    with open(data / "config.yaml", "w", encoding="utf-8") as f:
        y.dump(raw, f)
    (data / "allowlist.yaml").write_text(
        "rooms:\n" + "".join(f"  - '!{lang}:example.org'\n" for lang in ("zh", "ru", "ar")),
        encoding="utf-8",
    )
    index = Index.open(load_config(data / "config.yaml"))
    for lang in ("zh", "ru", "ar"):
        index.ingest.admit(events(lang, room(lang)))
    index.pipeline.process_all()
    yield index
    index.close()


@pytest.mark.model
def test_the_config_runs_the_multilingual_model_with_its_floor(index):
    cfg = index.cfg
    assert cfg.index.embedder.model in MODELS and cfg.index.embedder.backend == "q4"
    assert index.embedder.name == MODELS[cfg.index.embedder.model]
    assert isinstance(index.searcher.embedder, QuerySide)  # questions get both prefixes
    floor = MODEL_FLOORS[cfg.index.embedder.model][0]  # e5 0.85, the pair 0.85
    assert index.searcher.floor.min_similarity == cfg.search.min_similarity == floor
    assert floor == 0.85


@pytest.mark.model
@pytest.mark.parametrize("lang", ["zh", "ru", "ar"])
def test_a_question_in_the_rooms_language_finds_its_answer_first(index, lang):
    data = room(lang)
    assert len(data["messages"]) >= 30
    hits = index.searcher.search(SourceQuery.build([data["ask"]], 5))
    assert hits, f"{lang}: nothing matches"
    first = hits[0]
    assert first.room_id == f"!{lang}:example.org"
    assert f"${lang}-{data['answer']}" in first.cited_event_ids, (lang, first.cited_event_ids)
    # The reply quotes the answer as written, in its own script.
    answer = data["messages"][data["answer"]][1]
    assert any(line.body == answer for line in first.shown), [s.body for s in first.shown]


@pytest.mark.model
@pytest.mark.parametrize("lang", ["zh", "ru", "ar"])
def test_an_off_topic_question_in_the_rooms_language_gets_nothing(index, lang):
    assert index.searcher.search(SourceQuery.build([room(lang)["offtopic"]], 5)) == []


@pytest.mark.model
@pytest.mark.parametrize("lang", ["zh", "ru", "ar"])
def test_the_reply_speaks_english_and_quotes_the_answer_as_written(index, lang):
    """The reply's own sentences are English; the matched lines are the room's own
    words, clipped by characters (never inside a character) like any line."""
    import html

    from matrix_sources.appservice.bot.replies import MAX_LINE_CHARS, render_hits

    data = room(lang)
    reply = render_hits(index.searcher.search(SourceQuery.build([data["ask"]], 5)), (data["ask"],))
    assert reply.body.startswith(f"Sources for: {data['ask']}")
    answer = data["messages"][data["answer"]][1]
    shown = answer if len(answer) <= MAX_LINE_CHARS else answer[: MAX_LINE_CHARS - 1].rstrip()
    assert shown in reply.body and html.escape(shown) in reply.formatted_body
