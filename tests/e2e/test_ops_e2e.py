"""Running it for real: /health, /metrics on real traffic, `!sources status`, doctor."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.tools.chatclient import ChatClient
from tests.harness import Stack, make_stack, wait_for

pytestmark = [pytest.mark.synapse, pytest.mark.model]


@pytest.fixture(scope="module")
def late_stack(tmp_path_factory) -> Stack:
    """The service started before its homeserver, as systemd may well do."""
    s = make_stack(tmp_path_factory.mktemp("ops"))
    try:
        yield s
    finally:
        s.service.stop()
        s.synapse.stop()


def metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name + (("{" + labels + "}") if labels else "")) + r" ([0-9.e+-]+)"
    m = re.search(r"^" + pattern + r"$", text, re.M)
    return float(m.group(1)) if m else 0.0


def doctor(stack: Stack, config=None) -> tuple[int, str]:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "matrix_sources.appservice.cli.main",
            "doctor",
            "-c",
            str(config or stack.config),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return res.returncode, res.stdout + res.stderr


async def test_health_waits_for_the_homeserver_then_metrics_move(late_stack):
    s = late_stack
    s.service.start(wait_ready=False)
    status, body = s.http("/health")
    assert status == 503
    checks = json.loads(body)["checks"]
    assert checks == {
        "store": True,
        "model": True,
        "homeserver": False,
        "appends": True,
        "pipeline": True,
    }
    assert "unreachable" in json.loads(body)["detail"]

    s.synapse.start()
    wait_for(
        "ready again",
        lambda: s.http("/health")[0] == 200,
        every=0.3,
        shows=lambda: s.http("/health"),
    )
    assert json.loads(s.http("/health")[1])["status"] == "ready"

    before = s.http("/metrics")[1]
    user, token = s.synapse.register_user("admin", "admin-password")
    async with ChatClient(s.synapse.url, user, token) as admin:
        room = await admin.create_room("Ops", public=True)
        assert s.cli("allowlist", "add", room).returncode == 0
        await admin.wait_for_member(room, s.bot)
        ids = [await admin.send(room, f"the backup job failed on night {i}") for i in range(3)]
        await admin.send(room, "!sources backup failure")
        s.wait_indexed(ids)
        await admin.ask(room, "!sources why did the backup fail", s.bot)

    # The event log's figures are read in a worker thread, started by a scrape and
    # served to the next: scrape until they show what was indexed.
    def caught_up() -> str | None:
        after = s.http("/metrics")[1]
        lag = f'matrix_sources_cursor_lag_seconds{{room_id="{room}"}} 0.0'
        return (
            after
            if lag in after and metric(after, "matrix_sources_pipeline_queue_depth") == 0
            else None
        )

    after = wait_for(
        "the figures caught up", caught_up, 30, every=1.0, shows=lambda: s.http("/metrics")[1]
    )

    name = "matrix_sources_events_received_total"
    assert (
        metric(after, name, 'type="m.room.message"')
        >= metric(before, name, 'type="m.room.message"') + 4
    )
    assert metric(after, "matrix_sources_windows_upserted_total") > metric(
        before, "matrix_sources_windows_upserted_total"
    )
    assert metric(after, "matrix_sources_transactions_received_total") > metric(
        before, "matrix_sources_transactions_received_total"
    )
    assert (
        metric(after, "matrix_sources_search_latency_seconds_count")
        >= metric(before, "matrix_sources_search_latency_seconds_count") + 1
    )
    assert metric(after, "matrix_sources_embedding_batch_size_count") >= 1
    assert metric(after, "matrix_sources_pipeline_queue_depth") == 0
    assert f'matrix_sources_cursor_lag_seconds{{room_id="{room}"}} 0.0' in after
    assert metric(after, "matrix_sources_ready") == 1
    # The keyword leg answers from the event log's keyword index (ready from the start).
    assert metric(after, "matrix_sources_term_index_ready") == 1


async def test_status_for_admins_only(late_stack):
    s = late_stack
    admin, admin_token = s.synapse.login("admin", "admin-password")
    member, member_token = s.synapse.register_user("member", "member-password")
    async with (
        ChatClient(s.synapse.url, admin, admin_token) as a,
        ChatClient(s.synapse.url, member, member_token) as m,
    ):
        room = await a.create_room("Status room", public=True)
        assert s.cli("allowlist", "add", room).returncode == 0
        await a.wait_for_member(room, s.bot)
        ids = [await a.send(room, f"status check message {i}") for i in range(2)]
        s.wait_indexed(ids)
        await m._client.join(room)

        reply = (await a.ask(room, "!sources status", s.bot))["content"]
        assert "Index status" in reply["body"]
        assert "Status room: 2 messages in 1 windows, 0 pending" in reply["body"]
        assert "<table>" in reply["formatted_body"]

        refused = (await m.ask(room, "!sources status", s.bot))["content"]["body"]
        assert "Sorry" in refused and "moderators" in refused and "messages" not in refused


def test_doctor_checks_fail_and_pass(late_stack, tmp_path):
    s = late_stack
    code, out = doctor(s)
    assert code == 0, out
    for name in ("config", "registration", "homeserver", "store", "model"):
        assert re.search(rf"^ok   {name}", out, re.M), (name, out)
    assert re.search(r"^ok   room !\S+: Ops: join rule public", out, re.M), out

    y = YAML()

    def broken(edit) -> tuple[int, str]:
        data = y.load(s.config.read_text())
        edit(data)
        path = tmp_path / f"config-{len(list(tmp_path.iterdir()))}.yaml"
        with open(path, "w") as f:
            y.dump(data, f)
        # Paths in the config are relative to its folder: keep it beside the data.
        target = s.data_dir / path.name
        target.write_text(path.read_text())
        return doctor(s, target)

    code, out = broken(lambda d: d["homeserver"].__setitem__("url", "http://127.0.0.1:9"))
    assert code == 1 and "FAIL homeserver" in out and "fix:" in out
    code, out = broken(lambda d: d["appservice"].__setitem__("registration", "other-reg.yaml"))
    assert code == 1 and "FAIL registration" in out
    (s.data_dir / "wrong-token.yaml").write_text(
        (s.data_dir / "registration.yaml").read_text().replace("as_token: ", "as_token: x")
    )
    code, out = broken(lambda d: d["appservice"].__setitem__("registration", "wrong-token.yaml"))
    assert code == 1 and "FAIL homeserver: whoami with as_token was refused" in out
    code, out = broken(lambda d: d.__setitem__("allowlist", "bad-allowlist.yaml"))
    (s.data_dir / "bad-allowlist.yaml").write_text("rooms:\n  - '!nosuchroom:localhost'\n")
    code, out = broken(lambda d: d.__setitem__("allowlist", "bad-allowlist.yaml"))
    assert code == 1 and "FAIL room !nosuchroom:localhost: the bot cannot read" in out
    (s.data_dir / "not-a-dir").write_text("x")
    code, out = broken(lambda d: d["index"]["chroma"].__setitem__("path", "not-a-dir"))
    assert code == 1 and "FAIL store" in out
    code, out = broken(lambda d: d["index"].__setitem__("embedder", "no-such-model"))
    assert code == 1 and "FAIL model" in out
    code, out = broken(lambda d: d["homeserver"].__setitem__("domain", "example.com"))
    assert code == 1 and "FAIL config" in out and "homeserver.domain" in out
