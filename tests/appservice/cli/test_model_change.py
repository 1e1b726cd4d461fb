"""The README's change of model on a real data dir (issue 45 item 4): a config `init`
wrote (backend onnx-int8), its model line set to the pair, the next command says what
happens (every message embedded again, about how long) and does it; stopped halfway, the
next one finishes it. The real packaged models, a real Chroma, the CLI's own commands."""

from __future__ import annotations

import json

import pytest

from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.models.embedder import load_embedder
from matrix_sources.indexer.pipeline import pipeline as pipeline_module
from matrix_sources.indexer.pipeline.importer import import_events
from matrix_sources.indexer.records import CORPUS_CHAT

pytestmark = pytest.mark.slow  # loads both real models

ROOM = "!room:example.org"
PAIR = "multilingual-e5-small+all-MiniLM-L6-v2"


class Stopped(Exception):
    """The process stopped in the middle of the re-embedding (a crash, a SIGKILL)."""


def _events(n: int) -> str:
    topics = ["mount an ntfs partition", "the printer queue", "wifi firmware", "grub menu"]
    public = {
        "type": "m.room.join_rules",
        "room_id": ROOM,
        "sender": "@admin:example.org",
        "state_key": "",
        "event_id": "$rules",
        "origin_server_ts": 1,
        "content": {"join_rule": "public"},
    }
    rows = [public] + [
        {
            "type": "m.room.message",
            "room_id": ROOM,
            "sender": f"@user{i % 3}:example.org",
            "event_id": f"$m{i}",
            "origin_server_ts": 1_700_000_000_000 + i * 3_600_000,  # an hour apart
            "content": {"msgtype": "m.text", "body": f"message {i} about {topics[i % 4]}"},
        }
        for i in range(n)
    ]
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _dims(cfg_path) -> tuple[int, set[int]]:
    cfg = load_config(cfg_path)
    index = Index.open(cfg, load_embedder(cfg.index.embedder.model, cfg.index.embedder.backend))
    try:
        ids = sorted(index.store.ids(CORPUS_CHAT))
        return len(ids), {len(v) for _, v in index.store.get_with_vectors(ids)}
    finally:
        index.close()


def test_a_change_of_model_says_what_happens_does_it_and_resumes(tmp_path, capsys, monkeypatch):
    data = tmp_path / "d"
    assert main(["init", "--data-dir", str(data), "--domain", "example.org"]) == 0
    cfg = data / "config.yaml"
    assert main(["allowlist", "add", "-c", str(cfg), ROOM]) == 0
    (tmp_path / "events.jsonl").write_text(_events(40))
    assert main(["import", "-c", str(cfg), "-q", str(tmp_path / "events.jsonl")]) == 0
    windows, dims = _dims(cfg)
    assert windows >= 10 and dims == {384}

    # The README's one line, on the config as init wrote it (backend: onnx-int8).
    text = cfg.read_text()
    assert "backend: onnx-int8" in text
    cfg.write_text(text.replace("model: all-MiniLM-L6-v2", f"model: {PAIR}", 1))

    # Stopped after the first step of the re-embedding (steps of 8 windows here).
    monkeypatch.setattr(pipeline_module, "EMBED_BATCH", 8)
    monkeypatch.setattr(pipeline_module, "UPSERT_BATCH", 8)
    conf = load_config(cfg)
    index = Index.open(conf, load_embedder(conf.index.embedder.model, conf.index.embedder.backend))
    index.pipeline.embed_group = 8
    # The room's state, as the service fetches it at start (here: read from a file).
    (tmp_path / "state.jsonl").write_text(_events(0))
    import_events(tmp_path / "state.jsonl", index.ingest, index.pipeline)

    def stop(n: int) -> None:
        raise Stopped

    capsys.readouterr()
    with pytest.raises(Stopped):
        index.rebuild("index.embedder.model changed", stop)
    pending = index.eventlog.counts().get("pending", 0)
    index.close()
    assert 0 < pending <= 40

    # The next command finds the new model's meta, resumes and finishes it.
    assert main(["import", "-c", str(cfg), "-q", str(tmp_path / "events.jsonl")]) == 0
    err = capsys.readouterr().err
    assert f"resuming: {pending} messages still to embed" in err
    assert (windows, {769}) == _dims(cfg)


def test_the_change_is_announced_with_its_estimate(tmp_path, capsys):
    data = tmp_path / "d"
    assert main(["init", "--data-dir", str(data), "--domain", "example.org"]) == 0
    cfg = data / "config.yaml"
    assert main(["allowlist", "add", "-c", str(cfg), ROOM]) == 0
    (tmp_path / "events.jsonl").write_text(_events(12))
    assert main(["import", "-c", str(cfg), "-q", str(tmp_path / "events.jsonl")]) == 0
    windows, _ = _dims(cfg)
    cfg.write_text(cfg.read_text().replace("model: all-MiniLM-L6-v2", f"model: {PAIR}", 1))
    capsys.readouterr()
    assert main(["import", "-c", str(cfg), "-q", str(tmp_path / "events.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "rebuilding the collection from the event log: embedder:" in err
    assert "every message is embedded again with" in err and "12 messages, about 1 min" in err
    assert "stopped, it resumes at the next start" in err
    assert (windows, {769}) == _dims(cfg)
