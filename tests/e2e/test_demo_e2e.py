"""`matrix-sources demo` end to end: a real Synapse, the real model, three speakers in
the seeded room, the first answer, and a second account registered the way the demo
says (both ways: open registration from a client, and register_new_matrix_user). Run
again, it resumes with the same accounts."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import urllib.request

import pytest

from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.store.eventlog.log import EventLog

pytestmark = [pytest.mark.synapse, pytest.mark.model]


def register(url: str, user: str, password: str) -> dict:
    body = json.dumps(
        {"username": user, "password": password, "auth": {"type": "m.login.dummy"}}
    ).encode()
    req = urllib.request.Request(
        f"{url}/_matrix/client/v3/register",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_demo_seeds_from_three_users_and_says_how_to_register(tmp_path, capsys):
    root = tmp_path / "demo-data"
    assert main(["demo", "--data-dir", str(root), "--no-serve"]) == 0
    out = capsys.readouterr().out
    assert "--- the bot answered ---" in out and "from alice, bob, carol" in out
    first_answer = out.split("--- the bot answered ---")[1].split("\n----")[0]
    log = EventLog(root / "service" / "eventlog.sqlite3")
    with log.transaction(immediate=False) as cur:
        senders = {r[0] for r in cur.execute("SELECT DISTINCT sender FROM events")}
    log.close()
    assert senders == {"@alice:localhost", "@bob:localhost", "@carol:localhost"}
    assert "registration is open on this local demo server only" in out
    [command] = [line.strip() for line in out.splitlines() if "register_new_matrix_user" in line]

    # Run again: it resumes (same accounts, room already seeded) and serves Synapse again,
    # so the printed ways to make an account can be tried against it.
    from matrix_sources.appservice.tools import demo

    state = json.loads((root / "demo.json").read_text())
    assert sorted(state["registered"]) == ["alice", "bob", "carol", "demo"]
    synapse = demo.LocalSynapse(root / "synapse", port=state["hs_port"], open_registration=True)
    with synapse:
        assert register(synapse.url, "dana", "dana-password")["user_id"] == "@dana:localhost"
        args = shlex.split(command.replace("NAME", "erin").replace("PASSWORD", "erin-pass"))
        res = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert synapse.login("erin", "erin-pass")[0] == "@erin:localhost"
    assert main(["demo", "--data-dir", str(root), "--no-serve"]) == 0
    out = capsys.readouterr().out
    assert "already seeded" in out and "--- the bot answered ---" in out
    assert re.search(r"alice|bob|carol", out.split("--- the bot answered ---")[1])

    # The first answer quotes the lines that answer the disk questions (bob's
    # media_retention and compressor advice), not only the questions themselves.
    hits = re.split(r"\n(?=\d+\. )", first_answer.strip())[1:]
    quoted = [
        [line.strip()[2:] for line in h.splitlines() if line.strip().startswith("> ")] for h in hits
    ]
    every = [q for qs in quoted for q in qs]
    answers = ("media_retention", "synapse_auto_compressor")
    for word in answers:
        assert any(word in q for q in every), f"{word} not quoted in:\n{first_answer}"
    assert any(w in q for w in answers for q in quoted[0]), first_answer
