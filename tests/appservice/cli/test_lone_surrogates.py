"""A search text holding a lone surrogate (issue 44, item 2): `"\\ud800"` is valid JSON and
a command line's byte that is not UTF-8 arrives as one (`\\xff` -> U+DCFF), but it is not
text: the model's tokenizer raised on it and the search API answered 500. Every front
refuses it the same way, naming the text: the search API (the real SearchAPI over the
real index, on aiohttp's test server), `matrix-sources search` from its arguments, its
standard input and a `--queries` file, stopped and while the service runs. `!sources`
says the same in the room (tests/appservice/bot/test_hostile_commands.py); the MCP tool,
through its stdio server, in tests/appservice/cli/test_mcp_lines.py."""

from __future__ import annotations

import asyncio
import io
import json

import aiohttp
import pytest

from matrix_sources.appservice.cli import search as cli_search
from matrix_sources.appservice.cli.main import main
from matrix_sources.appservice.homeserver.search_api import ROUTE
from matrix_sources.indexer.datadir import api_token
from tests.appservice.cli.test_cli import datadir  # noqa: F401  (the fixture)
from tests.appservice.cli.test_search_via_service import Service, cli, imported  # noqa: F401

# (texts, the index of the bad one, the character named)
BAD = [
    (["vacuum \ud800"], 0, "U+D800"),
    (["how do I vacuum", "\udc00\ud800 reversed"], 1, "U+DC00"),
    (["vacuum \udcff"], 0, "U+DCFF"),
]  # the byte 0xff of a command line
IDS = ["lone", "reversed", "byte-not-utf8"]


def refusal(i: int, char: str) -> str:
    return f"texts[{i}]: holds the character {char}, which is not text: remove it"


async def post(service: Service, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{service.server.port}{ROUTE}",
            json=body,
            headers={"Authorization": f"Bearer {api_token(service.cfg)}"},
        ) as resp:
            return resp.status, await resp.json()


@pytest.mark.parametrize("texts,i,char", BAD, ids=IDS)
async def test_the_search_api_answers_400_naming_the_text(imported, texts, i, char):  # noqa: F811
    service = Service(imported)
    await service.start()
    try:
        status, body = await post(service, {"texts": texts})
        # The legible query still searches; an unknown field named by a surrogate is
        # refused with the name escaped.
        ok, hits = await post(service, {"texts": ["vacuum"]})
        odd, unknown = await post(service, {"texts": ["vacuum"], "\ud800": 1})
    finally:
        await service.stop()
    assert (status, body) == (
        400,
        {"errcode": "M_INVALID_PARAM", "error": refusal(i, char), "field": f"texts[{i}]"},
    )
    assert ok == 200 and "hits" in hits
    assert odd == 400 and unknown["field"] == "\\ud800"
    assert len(service.asked) == 1  # the refused ones never reached the search


@pytest.mark.parametrize("texts,i,char", BAD, ids=IDS)
async def test_the_cli_refuses_it_naming_the_text(
    imported,
    capsys,
    monkeypatch,  # noqa: F811
    texts,
    i,
    char,
):
    args = [a for t in texts for a in ("-t", t)]
    assert cli(imported, args, capsys)[::2] == (2, f"error: {refusal(i, char)}\n")
    # Standard input's bytes that are not UTF-8: the same, not a traceback.
    raw = "\n".join(texts).encode("utf-8", "surrogateescape") if char == "U+DCFF" else None
    if raw is not None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"))
        assert cli(imported, [], capsys)[::2] == (2, f"error: {refusal(i, char)}\n")
    # Through the running service: refused before it is asked.
    service = Service(imported)
    await service.start()
    try:
        monkeypatch.setattr(cli_search.Searching, "_local", lambda self: pytest.fail("local"))
        code, _, err = await asyncio.to_thread(cli, imported, args, capsys)
    finally:
        await service.stop()
    assert (code, err) == (2, f"error: {refusal(i, char)}\n") and service.asked == []


def test_a_batch_refuses_the_line_and_answers_the_rest(imported, capsys):  # noqa: F811
    """A `--queries` line with a lone surrogate escaped, or with a byte that is not UTF-8
    (a traceback that ended the batch), fails alone."""
    qfile = imported.parent / "q.jsonl"
    qfile.write_bytes(
        b'{"id": "a", "texts": ["vacuum \\ud800"]}\n'
        b'{"id": "b", "texts": ["vacuum \xff"]}\n'
        b'{"id": "c", "texts": ["ntfs fstab"]}\n'
        b'{"id": "d", "texts": ["ok"], "\\udcff": 1}\n'
    )
    assert main(["search", "-c", str(imported), "--queries", str(qfile)]) == 1
    out = {o["id"]: o for o in map(json.loads, capsys.readouterr().out.splitlines())}
    assert out["a"]["error"] == refusal(0, "U+D800")
    assert out["b"]["error"] == refusal(0, "U+DCFF")
    assert out["c"]["hits"]
    assert out["d"]["error"].startswith("\\udcff: unknown field")
