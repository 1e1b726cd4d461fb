"""The command line, driven in process with the deterministic embedder: init, allowlist,
import, search (single, multi-text, --json, --queries batch) and journal."""

from __future__ import annotations

import io
import json

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.cli.main import main
from tests.fakeclock import FakeClock

ROOM, OTHER = "!eval-room:example.org", "!not-listed:example.org"


def state(room: str, etype: str, content: dict, key: str = "") -> dict:
    return {
        "type": etype,
        "room_id": room,
        "sender": "@admin:example.org",
        "state_key": key,
        "event_id": f"${room}-{etype}",
        "origin_server_ts": 1,
        "content": content,
    }


def msg(room: str, n: int, body: str, ts: int | None = None) -> dict:
    return {
        "type": "m.room.message",
        "room_id": room,
        "sender": f"@user{n % 3}:example.org",
        "event_id": f"$m{n}-{room[1:5]}",
        "origin_server_ts": ts or 1_700_000_000_000 + n * 1000,
        "content": {"msgtype": "m.text", "body": body},
    }


@pytest.fixture
def datadir(tmp_path, capsys):
    assert main(["init", "--data-dir", str(tmp_path / "d"), "--domain", "example.org"]) == 0
    cfg = tmp_path / "d" / "config.yaml"
    y = YAML()
    data = y.load(cfg.read_text())
    data["index"]["embedder"] = "hash"
    data["index"]["window_max_bytes"] = 120
    data["search"]["min_similarity"] = -1  # the floor is calibrated for the real model
    with open(cfg, "w") as f:
        y.dump(data, f)
    assert main(["allowlist", "add", "-c", str(cfg), ROOM, "--comment", "#eval:example.org"]) == 0
    events = [
        state(ROOM, "m.room.join_rules", {"join_rule": "public"}),
        state(OTHER, "m.room.join_rules", {"join_rule": "public"}),
    ]
    bodies = [
        "how do I mount an ntfs partition",
        "use ntfs-3g and add it to fstab",
        "the printer queue is stuck again",
        "restart cups with systemctl",
        "which kernel supports my wifi card",
        "the broadcom driver needs firmware",
    ]
    events += [msg(ROOM, i, b) for i, b in enumerate(bodies)]
    events += [msg(OTHER, 100, "secret ntfs plans canaryword")]
    (tmp_path / "events.jsonl").write_text(
        "\n".join(json.dumps(e) for e in events) + "\n{not json\n"
    )
    capsys.readouterr()
    return cfg, tmp_path


def test_init_refuses_to_overwrite(datadir, capsys):
    cfg, tmp = datadir
    assert main(["init", "--data-dir", str(cfg.parent)]) == 1
    assert "--force" in capsys.readouterr().err


def test_import_summary_and_search_json(datadir, capsys):
    cfg, tmp = datadir
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "read        9 events" in out
    assert "new         6 messages" in out
    assert "refused     2 (not_allowlisted)" in out
    assert "bad lines   1 not JSON (lines 10)" in out
    # Importing again adds nothing and indexes nothing twice.
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    assert "new         0 messages" in capsys.readouterr().out

    assert main(["search", "-c", str(cfg), "--json", "--top", "2", "ntfs partition fstab"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert 1 <= len(hits) <= 2
    keys = {
        "window_id",
        "room_id",
        "corpus",
        "event_ids",
        "first_event_id",
        "last_event_id",
        "senders",
        "ts_first",
        "ts_last",
        "score",
        "text",
    }
    assert keys <= set(hits[0])
    assert hits[0]["room_id"] == ROOM and "ntfs" in hits[0]["text"]
    assert hits[0]["first_event_id"] == hits[0]["event_ids"][0]
    assert all("canaryword" not in h["text"] for h in hits)


def test_search_several_texts_and_refusals(datadir, capsys):
    cfg, tmp = datadir
    main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")])
    capsys.readouterr()
    assert (
        main(["search", "-c", str(cfg), "--json", "-t", "printer cups", "-t", "wifi firmware"]) == 0
    )
    assert len(json.loads(capsys.readouterr().out)["hits"]) >= 2
    nine = [a for i in range(9) for a in ("-t", f"t{i}")]
    assert main(["search", "-c", str(cfg), *nine]) == 2
    assert "texts" in capsys.readouterr().err
    assert main(["search", "-c", str(cfg), "-t", "ok", "-t", "a" * 1001]) == 2
    err = capsys.readouterr().err
    assert "texts[1]" in err and "1001" in err
    assert main(["search", "-c", str(cfg), "--top", "0", "ok"]) == 2
    assert "top_k" in capsys.readouterr().err


def test_unquoted_words_are_one_question_shown_as_the_room_shows_it(datadir, capsys, monkeypatch):
    """What every newcomer types: nine words unquoted, one text (not 9 texts refused);
    printed as the reply reads, with the room, the quoted lines and the permalinks."""
    cfg, tmp = datadir
    main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")])
    capsys.readouterr()
    words = "how do I mount my ntfs partition with fstab".split()
    assert main(["search", "-c", str(cfg), "--json", *words]) == 0
    one = json.loads(capsys.readouterr().out)["hits"]
    assert main(["search", "-c", str(cfg), "--json", "-t", " ".join(words)]) == 0
    assert json.loads(capsys.readouterr().out)["hits"] == one
    assert main(["search", "-c", str(cfg), *words]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Sources for: how do I mount my ntfs partition with fstab")
    assert "https://matrix.to/#/" in out and "> " in out and "ntfs" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("printer cups\n\nwifi firmware\n"))
    assert main(["search", "-c", str(cfg), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["hits"]) >= 2


def test_search_batch_mode(datadir, capsys):
    cfg, tmp = datadir
    main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")])
    capsys.readouterr()
    lines = [
        {"id": "q1", "texts": ["ntfs fstab"], "top_k": 1},
        {"id": "q2", "texts": []},
        {"id": "q3", "texts": ["ok", ""]},
        {"id": "q4", "texts": ["cups printer", "restart cups"], "room": ROOM},
        {"id": "q5", "texts": ["x"], "top_k": 50},
    ]
    qfile = tmp / "q.jsonl"
    qfile.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    assert main(["search", "-c", str(cfg), "--queries", str(qfile)]) == 1  # some were bad
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    by_id = {o["id"]: o for o in out if o["id"]}
    assert len(by_id["q1"]["hits"]) == 1
    assert by_id["q2"]["error"].startswith("texts:")
    assert by_id["q3"]["error"].startswith("texts[1]:")
    assert by_id["q4"]["hits"] and all(h["room_id"] == ROOM for h in by_id["q4"]["hits"])
    assert by_id["q5"]["error"].startswith("top_k:")
    assert out[-1]["error"].startswith("line:")


def test_allowlist_keeps_comment_and_journal_prints(datadir, capsys):
    cfg, tmp = datadir
    text = (cfg.parent / "allowlist.yaml").read_text()
    assert f"'{ROOM}'  # #eval:example.org" in text or f"{ROOM}  # #eval:example.org" in text
    assert main(["allowlist", "list", "-c", str(cfg)]) == 0
    # One line per room, its id first, its comment (the alias) after it.
    assert capsys.readouterr().out.splitlines() == [f"{ROOM}  # #eval:example.org"]
    enc = {
        "type": "m.room.encrypted",
        "room_id": ROOM,
        "sender": "@u:example.org",
        "event_id": "$enc1",
        "origin_server_ts": 5,
        "content": {"ciphertext": "zzz"},
    }
    (tmp / "enc.jsonl").write_text(
        json.dumps(state(ROOM, "m.room.join_rules", {"join_rule": "public"}))
        + "\n"
        + json.dumps(enc)
        + "\n"
    )
    main(["import", "-c", str(cfg), "-q", str(tmp / "enc.jsonl")])
    capsys.readouterr()
    assert main(["journal", "-c", str(cfg), "--rule", "encrypted_event"]) == 0
    [entry] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert entry["event_id"] == "$enc1" and entry["room_id"] == ROOM and "zzz" not in str(entry)


def test_config_errors_exit_non_zero_naming_the_file(tmp_path, capsys):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("homeserver:\n  url: http://127.0.0.1:8008\n")
    assert main(["search", "-c", str(cfg), "x"]) == 1
    err = capsys.readouterr().err
    assert str(cfg) in err and "homeserver.domain" in err


def _files_bytes(folder) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_forget_removes_a_users_text_from_every_file_and_lists_and_undoes(datadir, capsys):
    cfg, tmp = datadir
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    assert b"ntfs-3g" in _files_bytes(cfg.parent)  # user1 said it
    capsys.readouterr()
    assert main(["forget", "-c", str(cfg), "@user1:example.org"]) == 0
    out = capsys.readouterr().out
    assert "forgotten: @user1:example.org: 2 messages removed" in out
    assert b"ntfs-3g" not in _files_bytes(cfg.parent)
    assert b"broadcom" in _files_bytes(cfg.parent)  # user2's words stay
    assert main(["forget", "-c", str(cfg), "--list"]) == 0
    assert capsys.readouterr().out.split() == ["@user1:example.org"]
    assert main(["forget", "-c", str(cfg), "--undo", "@user1:example.org"]) == 0
    assert "undone: @user1:example.org" in capsys.readouterr().out
    assert main(["forget", "-c", str(cfg), "--list"]) == 0
    listed = capsys.readouterr()
    assert (listed.out, listed.err) == ("", "nobody is forgotten\n")
    assert main(["forget", "-c", str(cfg), "user1"]) == 1


def test_forget_with_the_lock_held_goes_to_the_services_spool(datadir, capsys, monkeypatch):
    from matrix_sources.appservice.cli import forget
    from matrix_sources.indexer.store.lock import WriterLock

    cfg, tmp = datadir
    clock = FakeClock(0.0)
    monkeypatch.setattr(forget, "REAL", clock.clock)  # the command's clock: fake
    with WriterLock(cfg.parent, "matrix-sources run"):
        assert main(["forget", "-c", str(cfg), "@user1:example.org"]) == 1
    assert "did not answer within 30 s" in capsys.readouterr().err
    assert 30 <= clock.now <= 30.4  # it waited the whole timeout, polling
    [req] = (cfg.parent / "spool").glob("*.request.json")
    assert json.loads(req.read_text()) == {"op": "forget", "user_id": "@user1:example.org"}


def test_an_imported_acl_refuses_and_withdraws_and_the_journal_shows_it(datadir, capsys):
    """Issue 46: an import whose file holds a spam wave and, later, the moderators' ACL."""
    cfg, tmp = datadir

    def said(n: int, sender: str, body: str) -> dict:
        return {
            "type": "m.room.message",
            "room_id": ROOM,
            "sender": sender,
            "event_id": f"$wave{n}",
            "origin_server_ts": 10 + n,
            "content": {"msgtype": "m.text", "body": body},
        }

    acl = state(ROOM, "m.room.server_acl", {"allow": ["*"], "deny": ["*.evil.example", 3]})
    lines = [
        state(ROOM, "m.room.join_rules", {"join_rule": "public"}),
        said(1, "@s:a.evil.example", "wavecanary-1 cheap pills"),
        said(2, "@f:notevil.example", "the welcome message stays"),
        acl,
        said(3, "@s:b.evil.example:8448", "wavecanary-2 more pills"),
    ]
    (tmp / "wave.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "wave.jsonl")]) == 0
    assert "refused     2 (server_denied)" in capsys.readouterr().out
    assert b"wavecanary" not in _files_bytes(cfg.parent)
    assert main(["journal", "-c", str(cfg), "--rule", "server_denied", "--kind", "refusal"]) == 0
    refused = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {e["event_id"] for e in refused} == {"$wave1", "$wave3"}
    assert main(["journal", "-c", str(cfg), "--kind", "server_acl"]) == 0
    [fault] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert fault["detail"].startswith("deny[1] is not a string")


def test_search_why_explains_a_hit_and_after_nothing_matches_the_closest(datadir, capsys):
    """The shell's own `why` (issue 51): the CLI's "nothing matches" names `search --why
    1`, not the room's `!sources why 1`, and --why N says why hit N ranked where it did."""
    cfg, tmp = datadir
    main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")])
    capsys.readouterr()
    assert main(["search", "-c", str(cfg), "--why", "1", "ntfs", "fstab"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Hit 1: ") and "fused score" in out
    assert main(["search", "-c", str(cfg), "--why", "9", "ntfs", "fstab"]) == 2
    assert "ask about 1 to" in capsys.readouterr().err
    y = YAML()
    data = y.load(cfg.read_text())
    data["search"]["min_similarity"] = 0.99  # nothing clears it
    with open(cfg, "w") as f:
        y.dump(data, f)
    assert main(["search", "-c", str(cfg), "quokkas", "islands"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Nothing in the index answers that")
    assert "!sources" not in out and "matrix-sources search --why 1" in out
    assert main(["search", "-c", str(cfg), "--why", "1", "quokkas", "islands"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Nothing matched; the closest was") and "floor" in out
    assert main(["search", "-c", str(cfg), "--why", "2", "quokkas", "islands"]) == 2
