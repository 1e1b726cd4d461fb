"""`matrix-sources mcp`: a real MCP client session (the `mcp` package's stdio client) with
the command as its server process, on a data dir, and against a running service's API
(tests/appservice/cli/test_search_via_service.py's stand-in over the real index; through Synapse in
tests/e2e/test_search_api_e2e.py)."""

from __future__ import annotations

import json
import os
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters, stdio_client

from matrix_sources.appservice.cli.main import main
from tests.appservice.cli.test_cli import ROOM, datadir  # noqa: F401  (the fixture)
from tests.appservice.cli.test_search_via_service import Service, imported  # noqa: F401  (the fixture)


@asynccontextmanager
async def session(cfg_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "matrix_sources.appservice.cli.main", "mcp", "-c", str(cfg_path)],
        env={k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "VIRTUAL_ENV")}
        | {"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"},
        cwd=os.getcwd(),
    )
    with open(cfg_path.parent / "mcp.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=120) as s:
                await s.initialize()
                yield s


def cli_hits(cfg_path, capsys, *words: str) -> list[dict]:
    assert main(["search", "-c", str(cfg_path), "--json", *words]) == 0
    return json.loads(capsys.readouterr().out)["hits"]


async def ask(s: ClientSession, **arguments):
    result = await s.call_tool("search", arguments)
    return result, result.structured_content


async def test_an_agent_searches_a_data_dir_and_gets_citations(imported, capsys):  # noqa: F811
    expected = cli_hits(imported, capsys, "--top", "3", "how do I mount an ntfs partition")
    assert expected
    async with session(imported) as s:
        tools = (await s.list_tools()).tools
        assert [t.name for t in tools] == ["search"]
        props = tools[0].input_schema["properties"]
        assert set(props) == {"texts", "top_k", "room", "corpus"}
        assert tools[0].input_schema["required"] == ["texts"]

        result, content = await ask(s, texts=["how do I mount an ntfs partition"], top_k=3)
        assert not result.is_error
        hits = content["hits"]
        # The same hits as `search --json`, in the same order, each cited.
        assert [h["event_ids"] for h in hits] == [e["event_ids"] for e in expected]
        first = hits[0]
        assert first["room_id"] == ROOM and first["rank"] == 1
        assert first["link"].startswith("https://matrix.to/#/%21eval-room%3Aexample.org/%24")
        assert first["time_first"].endswith("Z") and first["senders"]
        assert first["lines"] and all(
            ln["link"].startswith("https://matrix.to/#/")
            and ln["event_id"] in first["event_ids"]
            and ln["sender"].startswith("@")
            and ln["text"]
            for ln in first["lines"]
        )
        # The text is the reply `!sources` gives, which the CLI prints too.
        assert (
            main(["search", "-c", str(imported), "--top", "3", "how do I mount an ntfs partition"])
            == 0
        )
        assert result.content[0].text == capsys.readouterr().out.rstrip("\n")

        # A query to fix is an error result the agent reads, naming the field.
        result, _ = await ask(s, texts=["ok", "  "])
        assert result.is_error and "texts[1]" in result.content[0].text
        result, _ = await ask(s, texts=["x"], room="#eval:example.org")
        assert result.is_error and "room" in result.content[0].text
        # And the session goes on.
        result, content = await ask(s, texts=["printer cups"], corpus="chat", top_k=1)
        assert not result.is_error and len(content["hits"]) == 1


async def test_an_agent_searches_through_the_running_service(imported, capsys):  # noqa: F811
    expected = cli_hits(imported, capsys, "wifi", "firmware")
    service = Service(imported)
    await service.start()
    try:
        async with session(imported) as s:
            result, content = await ask(s, texts=["wifi firmware"])
    finally:
        await service.stop()
    assert not result.is_error
    assert [h["event_ids"] for h in content["hits"]] == [e["event_ids"] for e in expected]
    assert len(service.asked) == 1  # the service searched; the MCP process loaded nothing
    err = (imported.parent / "mcp.stderr").read_text()
    assert "loading the model" not in err, err
