"""The command line as a user meets it: help on every option, filters checked against
what exists, `-c DIR`, progress with a total, and the writer-lock refusal naming the
command that really holds the data dir."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.cli.main import build_parser, main

ROOM = "!listed:example.org"


@pytest.fixture
def datadir(tmp_path, capsys):
    assert main(["init", "--data-dir", str(tmp_path / "d"), "--domain", "example.org"]) == 0
    cfg = tmp_path / "d" / "config.yaml"
    y = YAML()
    data = y.load(cfg.read_text())
    data["index"]["embedder"] = "hash"
    with open(cfg, "w") as f:
        y.dump(data, f)
    assert main(["allowlist", "add", "-c", str(cfg), ROOM, "--comment", "#listed:example.org"]) == 0
    events = [
        {
            "type": "m.room.join_rules",
            "room_id": ROOM,
            "sender": "@a:example.org",
            "state_key": "",
            "event_id": "$jr",
            "origin_server_ts": 1,
            "content": {"join_rule": "public"},
        }
    ]
    events += [
        {
            "type": "m.room.message",
            "room_id": ROOM,
            "sender": "@a:example.org",
            "event_id": f"$m{i}",
            "origin_server_ts": 1_700_000_000_000 + i * 1000,
            "content": {"msgtype": "m.text", "body": f"message {i} about disks"},
        }
        for i in range(30)
    ]
    events.append(
        {
            "type": "m.room.encrypted",
            "room_id": ROOM,
            "sender": "@a:example.org",
            "event_id": "$enc",
            "origin_server_ts": 5,
            "content": {},
        }
    )
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    capsys.readouterr()
    return cfg, tmp_path


def _actions(parser: argparse.ArgumentParser, path: str = "matrix-sources"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_and_argument_has_help():
    missing = [
        f"{path} {a.option_strings or a.dest}" for path, a in _actions(build_parser()) if not a.help
    ]
    assert missing == []


def test_journal_filters_are_checked_against_what_exists(datadir, capsys):
    cfg, tmp = datadir
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    capsys.readouterr()
    assert main(["journal", "-c", str(cfg), "--rule", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "'bogus' is not a rule" in err and "encrypted_event" in err and "not_public" in err
    assert main(["journal", "-c", str(cfg), "--room", "#nope"]) == 2
    err = capsys.readouterr().err
    assert "'#nope' is unknown" in err and "allowlist" in err
    assert main(["journal", "-c", str(cfg), "--kind", "bogus"]) == 2
    assert "refusal" in capsys.readouterr().err
    # What exists is found: by id, by the alias kept in allowlist.yaml.
    for room in (ROOM, "#listed:example.org"):
        assert main(["journal", "-c", str(cfg), "--room", room, "--rule", "encrypted_event"]) == 0
        [entry] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert entry["event_id"] == "$enc"


def test_search_room_filter_is_checked(datadir, capsys):
    cfg, tmp = datadir
    assert main(["search", "-c", str(cfg), "--room", "!nope:example.org", "disks"]) == 2
    assert "'!nope:example.org' is not on the allowlist" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["journal"], ["allowlist", "list"], ["doctor"]])
def test_config_given_as_a_folder(datadir, capsys, command):
    cfg, tmp = datadir
    code = main([*command, "-c", str(cfg.parent)])
    assert code in (0, 1)  # doctor fails on the homeserver here, not on the path
    captured = capsys.readouterr()
    assert "IsADirectoryError" not in captured.err + captured.out
    if command == ["doctor"]:
        assert f"ok   config: {cfg}" in captured.out


def test_config_folder_without_config_says_the_fix(tmp_path, capsys):
    assert main(["journal", "-c", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no config.yaml" in err and "-c DIR/config.yaml" in err
    assert "Traceback" not in err


def test_import_shows_the_model_load_and_an_indexing_total(datadir, capsys):
    cfg, tmp = datadir
    capsys.readouterr()
    seen = {}
    from matrix_sources.appservice.cli import main as cli

    class Bar:
        def __init__(self, *a, total=None, desc="", **kw):
            self.desc, self.total = desc, total
            seen[desc] = self

        def update(self, n=1):
            assert self.total, f"{self.desc} moved before it had a total"

        def refresh(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    import tqdm

    real = tqdm.tqdm
    tqdm.tqdm = Bar
    try:
        assert cli.main(["import", "-c", str(cfg), str(tmp / "events.jsonl")]) == 0
    finally:
        tqdm.tqdm = real
    assert seen["indexing"].total == 30 and seen["reading"].total == 32
    assert "loading the model (hash" in capsys.readouterr().err


def test_the_commands_load_the_model_on_the_configured_backend(tmp_path, monkeypatch, capsys):
    """`run`, `import`, `search`, `backfill` load the model through progress.load_model:
    it runs the backend config.yaml names, with its ONNX files in the data dir."""
    from matrix_sources.appservice.cli import progress
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.config.sections import MODELS_DIR_ENV
    from matrix_sources.indexer.models import embedder

    monkeypatch.delenv(MODELS_DIR_ENV)  # the suite's shared exports (conftest.py)
    tmp = tmp_path
    assert main(["init", "--data-dir", str(tmp / "d"), "--domain", "example.org"]) == 0
    cfg_path = tmp / "d" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("backend: onnx-int8\n", "backend: onnx\n"))
    cfg = load_config(cfg_path)
    assert cfg.index.embedder.backend == "onnx"
    asked = []
    monkeypatch.setattr(
        embedder, "load_embedder", lambda *a, **k: asked.append(a) or embedder.HashEmbedder()
    )
    progress.load_model(cfg)
    assert asked == [(cfg.index.embedder.model, "onnx", tmp / "d" / "models")]
    assert "backend onnx" in capsys.readouterr().err


HOLDER = """
import sys, time
from pathlib import Path
sys.argv = ["/opt/x/bin/matrix-sources", "demo", "--data-dir", sys.argv[1]]
from matrix_sources.indexer.store.lock import WriterLock
WriterLock(Path(sys.argv[3]), "matrix-sources run").acquire()  # as Service does
print("held", flush=True)
time.sleep(60)
"""


def test_lock_refusal_names_the_holders_real_command(datadir, capsys):
    cfg, tmp = datadir
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cfg.parent)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 1
        err = capsys.readouterr().err
        assert f"in use by matrix-sources demo (pid {proc.pid})" in err
        assert "--data-dir" not in err
    finally:
        proc.kill()
        proc.wait()


def test_demo_without_its_extra_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nio" else real(name, *a)
    )
    assert main(["demo", "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "'.[demo]'" in err and "./scripts/demo" in err


def test_backfill_and_ref_sync_name_what_does_not_exist_before_loading_anything(datadir, capsys):
    cfg, tmp = datadir
    assert main(["backfill", "-c", str(cfg), "!nope:example.org"]) == 2
    err = capsys.readouterr().err
    assert "not on the allowlist: !nope:example.org" in err and "loading the model" not in err
    assert main(["ref", "sync", "-c", str(cfg), "bogus"]) == 1
    err = capsys.readouterr().err
    assert "no corpus named bogus" in err and "loading the model" not in err


def test_journal_hides_the_bots_own_messages_an_older_release_journalled(datadir, capsys):
    cfg, _ = datadir
    journal = cfg.parent / "journal.jsonl"
    old = {"kind": "refusal", "rule": "own_message", "room_id": ROOM, "event_id": "$bot1"}
    real = {"kind": "refusal", "rule": "encrypted_event", "room_id": ROOM, "event_id": "$e"}
    with open(journal, "a") as f:
        f.write(json.dumps(old) + "\n" + json.dumps(real) + "\n")
    assert main(["journal", "-c", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "$e" in out and "$bot1" not in out
    assert main(["journal", "-c", str(cfg), "--rule", "own_message"]) == 0  # asked: shown
    assert "$bot1" in capsys.readouterr().out
