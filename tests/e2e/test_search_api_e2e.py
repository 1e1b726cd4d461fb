"""One question, four ways, through a real Synapse and `matrix-sources run` with the real
model: the search API, `matrix-sources search` while the service runs (through that API),
`!sources` in the room, an MCP client session, and `matrix-sources search` once the
service is stopped (the data dir opened by the command). All give the same hits."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from ruamel.yaml import YAML

from matrix_sources.appservice.tools.chatclient import ChatClient

pytestmark = [pytest.mark.synapse, pytest.mark.model]

CONVERSATION = [
    "the server ran out of disk space again last night",
    "journalctl --vacuum-size=500M frees the old logs, and purge old media with the admin API",
    "also check /var/lib/docker, unused images pile up there: docker system prune",
    "thanks, that got back 40 GB",
    "anyone going to the meetup on thursday?",
]
QUESTION = "how can I get disk space back when the server is full"


def post(stack, body: object, token: str | None) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{stack.service.port}/_matrix_sources/v1/search",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def mcp_search(stack, texts: list[str]) -> dict:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "matrix_sources.appservice.cli.main", "mcp", "-c", str(stack.config)],
        env={
            "HF_HUB_OFFLINE": "1",
            **{k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "VIRTUAL_ENV")},
        },
        cwd=os.getcwd(),
    )
    with open(stack.root / "mcp.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=120) as s:
                await s.initialize()
                result = await s.call_tool("search", {"texts": texts})
    assert not result.is_error, result.content
    return result.structured_content


async def test_the_api_the_cli_sources_and_mcp_give_the_same_hits(stack):
    user, token = stack.synapse.register_user("dana", "dana-password")
    async with ChatClient(stack.synapse.url, user, token) as dana:
        room = await dana.create_room("Server admins", public=True)
        stack.allowlist_add(room)
        await dana.wait_for_member(room, stack.bot)
        ids = [await dana.send(room, body) for body in CONVERSATION]
        stack.wait_indexed(ids)

        api_token = (stack.data_dir / "api_token").read_text().strip()
        status, api = post(stack, {"texts": [QUESTION]}, api_token)
        assert status == 200 and api["hits"], api
        assert ids[1] in api["hits"][0]["event_ids"]
        # Only the API's own token: the appservice's open nothing here.
        reg = YAML(typ="safe").load((stack.data_dir / "registration.yaml").read_text())
        for other in (reg["as_token"], reg["hs_token"]):
            assert post(stack, {"texts": [QUESTION]}, other)[0] == 403
        assert post(stack, {"texts": [QUESTION]}, None)[0] == 401
        status, err = post(stack, {"texts": [QUESTION], "top_k": 99}, api_token)
        assert (status, err["field"]) == (400, "top_k")

        # The CLI while the service runs: through the API, no model of its own.
        running = stack.cli("search", "--json", QUESTION)
        assert running.returncode == 0, running.stderr
        assert "loading the model" not in running.stderr
        assert json.loads(running.stdout)["hits"] == api["hits"]
        text = stack.cli("search", QUESTION)
        assert text.returncode == 0 and "loading the model" not in text.stderr

        # `!sources` in the room: the same reply the CLI printed.
        reply = await dana.ask(room, f"!sources {QUESTION}", stack.bot)
        assert reply["content"]["body"] == text.stdout.rstrip("\n")

        # An agent's MCP session, against the running service.
        cited = await mcp_search(stack, [QUESTION])
        assert [h["event_ids"] for h in cited["hits"]] == [h["event_ids"] for h in api["hits"]]
        assert cited["hits"][0]["link"].startswith("https://matrix.to/#/")
        assert "loading the model" not in (stack.root / "mcp.stderr").read_text()

        # A question in another language that nothing answers: the room's reply, the
        # API, the CLI and MCP add the same note (the English model, the line to set).
        egg = "¿Cuánto tiempo hay que cocer un huevo para que la yema quede blanda?"
        status, none = post(stack, {"texts": [egg]}, api_token)
        assert status == 200 and none["hits"] == [], none
        assert "does not read as English" in none["note"]
        said = stack.cli("search", egg)
        assert said.returncode == 0 and said.stdout.rstrip("\n").endswith(none["note"])
        assert json.loads(stack.cli("search", "--json", egg).stdout)["note"] == none["note"]
        reply = await dana.ask(room, f"!sources {egg}", stack.bot)
        assert reply["content"]["body"].endswith(none["note"])
        assert (await mcp_search(stack, [egg]))["note"] == none["note"]

    stack.service.stop()
    stopped = stack.cli("search", "--json", QUESTION)
    assert stopped.returncode == 0, stopped.stderr
    assert "loading the model" in stopped.stderr  # the data dir opened by the command
    assert json.loads(stopped.stdout)["hits"] == api["hits"]
    assert stack.cli("search", QUESTION).stdout == text.stdout
