"""`matrix-sources mcp` as a JSON-RPC client meets it (issue 44, item 2): the command
spawned as a subprocess, spoken to in raw JSON lines on its stdin and stdout, each answer
read back with the SDK's own strict parser (what a client does with it).

It answered nothing to a line that is not JSON, and nothing to a call holding a lone
surrogate (the SDK's transport refused the line as not JSON and dropped it): the client
waited for good. Every line now gets its answer: -32700 for a parse error, -32600 for JSON
that is not JSON-RPC, and the tool's `isError` naming the field for a query to fix, an
unknown argument included (as the search API refuses it)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from mcp.types import jsonrpc_message_adapter

from matrix_sources.appservice.cli.mcpstdio import MAX_LINE_BYTES
from tests.appservice.cli.test_cli import datadir  # noqa: F401  (the fixture)
from tests.appservice.cli.test_search_via_service import imported  # noqa: F401  (the fixture)

ANSWER_SECONDS = 60  # a bound on a hang, never waited out by a passing test


class Lines:
    """The MCP server process, one JSON-RPC line at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 100

    async def send(self, line: bytes) -> None:
        self.proc.stdin.write(line + b"\n")
        await self.proc.stdin.drain()

    async def answer(self) -> dict:
        """The next line out, parsed strictly (a lone surrogate or bytes that are not
        UTF-8 fail here), as a dict."""
        line = await asyncio.wait_for(self.proc.stdout.readline(), ANSWER_SECONDS)
        assert line, "the server closed its output"
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        return message.model_dump(by_alias=True, exclude_unset=True)

    async def call(self, arguments_json: str) -> dict:
        """tools/call of `search` with these arguments, written as raw JSON."""
        self.next_id += 1
        await self.send(
            f'{{"jsonrpc": "2.0", "id": {self.next_id}, "method": "tools/call", '
            f'"params": {{"name": "search", "arguments": {arguments_json}}}}}'.encode()
        )
        out = await self.answer()
        assert out["id"] == self.next_id, out
        return out["result"]


@pytest.fixture
async def server(imported, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "VIRTUAL_ENV", "PATH")}
    with open(tmp_path / "mcp.stderr", "wb") as errlog:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "matrix_sources.appservice.cli.main",
            "mcp",
            "-c",
            str(imported),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
            env=env | {"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"},
            limit=4 * MAX_LINE_BYTES,
        )
    lines = Lines(proc)
    await lines.send(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-lines", "version": "1"},
                },
            }
        ).encode()
    )
    assert "result" in await lines.answer()
    await lines.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    yield lines
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), ANSWER_SECONDS) == 0
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()


def text_of(result: dict) -> str:
    return result["content"][0]["text"]


async def test_every_line_is_answered_parse_error_or_invalid_request(server):
    """One server for all: each line below is answered, and the session goes on."""
    for line in (
        b"{not json",
        b"\xff\xfe",
        b'{"texts": ["x"]',
        b"[" * 100_000 + b"]" * 100_000,
    ):  # nested past the parser
        await server.send(line)
        assert await server.answer() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error: the line is not JSON"},
        }, line[:20]
    for line, rid in ((b"[]", None), (b'{"id": 7, "method": 3}', 7), (b'"ping"', None)):
        await server.send(line)
        out = await server.answer()
        assert (out["id"], out["error"]["code"]) == (rid, -32600), out
    # An id that is not text: answered all the same, with U+FFFD for what UTF-8 cannot carry.
    await server.send(b'{"jsonrpc": "2.0", "id": "q\\ud800", "method": "ping"}')
    assert await server.answer() == {"jsonrpc": "2.0", "id": "q\ufffd\ufffd\ufffd", "result": {}}
    # A line over the limit: answered without being read whole.
    await server.send(
        b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "pad": "' + b"x" * MAX_LINE_BYTES + b'"}'
    )
    out = await server.answer()
    assert out["error"]["code"] == -32700 and str(MAX_LINE_BYTES) in out["error"]["message"]
    assert not (await server.call('{"texts": ["ntfs fstab"]}')).get("isError")


async def test_a_lone_surrogate_or_an_unknown_argument_is_a_tool_error_naming_it(server):
    result = await server.call('{"texts": ["ntfs fstab"], "top-k": 2}')
    assert result["isError"] is True
    assert text_of(result) == (
        "error: top-k: unknown field; the fields are texts, top_k, room, corpus"
    )
    for texts, field, char in (
        ('["vacuum \\ud800"]', "texts[0]", "U+D800"),
        ('["how do I vacuum", "\\udc00\\ud800 reversed"]', "texts[1]", "U+DC00"),
    ):
        result = await server.call('{"texts": ' + texts + "}")
        assert result["isError"] is True
        assert text_of(result) == (
            f"error: {field}: holds the character {char}, which is not text: remove it"
        )
    # A name that is itself a lone surrogate: named escaped, in an answer a client reads.
    result = await server.call('{"texts": ["ntfs fstab"], "\\ud800": 1}')
    assert result["isError"] is True and text_of(result).startswith("error: \\ud800: unknown")
    # A value quoted back by the argument check (a string, not a list) is legible too.
    result = await server.call('{"texts": "vacuum \\ud800"}')
    assert result["isError"] is True and "texts" in text_of(result)
    result = await server.call('{"texts": ["ntfs fstab"], "top_k": 1}')
    assert not result.get("isError") and len(result["structuredContent"]["hits"]) == 1
