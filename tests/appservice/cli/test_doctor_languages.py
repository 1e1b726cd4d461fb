"""doctor under the English model notices an allowlisted room that mostly writes
another language and suggests the pair with its costs (issue 45 item 3): a real data
dir, the CLI's import, the real packaged model's vocabulary."""

from __future__ import annotations

import json

import pytest

from matrix_sources.appservice.cli.doctor_languages import language_warnings
from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.models.embedder import load_embedder

pytestmark = pytest.mark.slow  # the real model

RU, EN = "!ru:example.org", "!en:example.org"
RUSSIAN = [
    "Как смонтировать раздел NTFS при загрузке системы?",
    "Попробуй добавить строку в fstab и перезагрузиться",
    "Почему принтер перестал печатать после обновления?",
    "Перезапусти службу cups, обычно это помогает",
]
ENGLISH = [
    "How do I mount an NTFS partition at boot?",
    "Add a line to fstab and reboot, that usually works",
    "Why did the printer stop printing after the upgrade?",
    "Restart the cups service, that usually helps",
]


def _room(room: str, bodies: list[str], start: int) -> list[dict]:
    rules = {
        "type": "m.room.join_rules",
        "room_id": room,
        "sender": "@admin:example.org",
        "state_key": "",
        "event_id": f"$rules{room}",
        "origin_server_ts": 1,
        "content": {"join_rule": "public"},
    }
    return [rules] + [
        {
            "type": "m.room.message",
            "room_id": room,
            "sender": f"@user{i % 3}:example.org",
            "event_id": f"$m{start + i}",
            "origin_server_ts": 1_700_000_000_000 + i * 60_000,
            "content": {"msgtype": "m.text", "body": f"{bodies[i % 4]} ({i})"},
        }
        for i in range(30)
    ]


def test_a_room_that_mostly_writes_russian_is_noticed(tmp_path, capsys):
    data = tmp_path / "d"
    assert main(["init", "--data-dir", str(data), "--domain", "example.org"]) == 0
    cfg_path = data / "config.yaml"
    assert main(["allowlist", "add", "-c", str(cfg_path), RU, EN]) == 0
    events = _room(RU, RUSSIAN, 0) + _room(EN, ENGLISH, 100)
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert main(["import", "-c", str(cfg_path), "-q", str(tmp_path / "events.jsonl")]) == 0
    cfg = load_config(cfg_path)
    minilm = load_embedder(cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir)
    [(name, detail, fix)] = list(language_warnings(cfg, minilm, [RU, EN]))
    assert name == f"language {RU}"
    assert detail.startswith("100% of its latest 30 messages do not read as English")
    assert "multilingual-e5-small+all-MiniLM-L6-v2" in fix and "twice the memory" in fix

    class Pair:  # a model that reads other languages (no English vocabulary): nothing
        dim = 769

    assert list(language_warnings(cfg, Pair(), [RU, EN])) == []
