"""`matrix-sources mcp -c CONFIG`: the search as a Model Context Protocol tool over stdio,
so an agent looks conversations up and cites them (docs/api.md, "MCP").

One tool, `search`, taking the search API's fields (texts, top_k, room, corpus) and
answered as `matrix-sources search` answers (search.py's `Searching`): through the running
service's API, else from the data dir opened here. Its result carries the reply's text
as `!sources` reads, and, structured, every hit's citations: room, time range, senders,
event ids and matrix.to links, each quoted line with its own.

Standard output is the protocol's: everything said to a person goes to standard error.
The transport is mcpstdio.py's, which answers every line a client sends; the tool refuses
an argument it does not know by name, as the search API refuses a field.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from matrix_sources.indexer.config import Config
from matrix_sources.indexer.records import CORPUS_REFERENCE, Hit
from matrix_sources.indexer.search.query import (
    MAX_TEXT_BYTES,
    MAX_TEXTS,
    MAX_TOP_K,
    QueryError,
    SourceQuery,
    check_fields,
)

from ..bot.replies import permalink, reference_lines, shown_lines, via_servers
from .apiclient import ServiceError, describe
from .mcpstdio import stdio_streams
from .search import Searching, render

TOOL = "search"
DESCRIPTION = (
    "Search the Matrix community's indexed public rooms by meaning (and by keyword for a "
    "few search words). Give the question as it would be asked in the room; several "
    "phrasings of one question in `texts` are fused into one ranking. Each hit is a "
    "stretch of conversation with its matched question and the answers to it, cited by "
    "room, time, senders, event ids and matrix.to links: quote and cite those. No hits "
    "means nothing in the index answers it."
)


def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def citation(rank: int, d: dict, texts: tuple[str, ...], domain: str) -> dict[str, Any]:
    """One hit as an agent cites it: where, when, who, and each quoted line's link."""
    hit = Hit.from_search_json(d)
    out: dict[str, Any] = {"rank": rank, "corpus": hit.corpus, "similarity": hit.similarity}
    if hit.corpus == CORPUS_REFERENCE:
        ref = d.get("ref") or {}
        out.update(reference=ref, lines=[{"text": t} for t in reference_lines(hit, texts)])
        return out
    via = via_servers(hit, domain)
    out.update(
        room_id=hit.room_id,
        room=hit.room_label or hit.room_id,
        time_first=iso(hit.ts_first),
        time_last=iso(hit.ts_last),
        senders=list(dict.fromkeys([*hit.senders, *(a.sender for a in hit.answers)])),
        link=permalink(hit.room_id, hit.first_event_id, via),
        event_ids=list(hit.cited_event_ids),
        lines=[
            {
                "event_id": ln.event_id,
                "sender": ln.sender,
                "time": iso(ln.ts),
                "text": ln.body,
                "link": permalink(hit.room_id, ln.event_id, via),
                **({"answer": ln.linked} if ln.linked else {}),
            }
            for ln in shown_lines(hit)
        ],
    )
    return out


def answer(
    cfg: Config,
    searching: Searching,
    texts: list[str],
    top_k: int | None,
    room: str | None,
    corpus: str | None,
    given: Iterable[object] = (),
):
    """The tool's result: the reply's text, and the hits' citations as structured
    content; a query to fix (`given`: the names of the arguments as sent, an unknown one
    refused by name as the search API refuses it) or a refusal of the service as an
    error result the agent reads."""
    from mcp.types import CallToolResult, TextContent

    def failed(message: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(text=f"error: {message}")], is_error=True)

    try:
        check_fields(given)
        query = SourceQuery.build(
            texts, cfg.search.default_top_k if top_k is None else top_k, room, corpus
        )
    except QueryError as e:
        return failed(str(e))
    try:
        hits = searching.ask(query)
    except ServiceError as e:
        client = searching.service()
        return failed(describe(e, client, cfg) if client else e.message)
    cited = [citation(n, d, query.texts, cfg.homeserver.domain) for n, d in enumerate(hits, 1)]
    return CallToolResult(
        content=[TextContent(text=render(cfg, hits, query.texts, searching.note))],
        structured_content={"hits": cited, **searching.note_field()},
    )


class _Server(MCPServer):
    async def run_stdio_async(self) -> None:
        """On our stdio transport (mcpstdio.py), which answers every line."""
        async with stdio_streams() as (read_stream, write_stream):
            await self._lowlevel_server.run(
                read_stream, write_stream, self._lowlevel_server.create_initialization_options()
            )


def arguments_given(ctx: Context) -> tuple[object, ...]:
    """The names of the tool's arguments as the client sent them (the SDK's validation
    drops one it does not know)."""
    params = ctx.request_context.params or {}
    arguments = params.get("arguments") if isinstance(params, Mapping) else None
    return tuple(arguments) if isinstance(arguments, Mapping) else ()


def build_server(cfg: Config, searching: Searching):
    server = _Server(name="matrix-sources", instructions=DESCRIPTION, log_level="WARNING")
    one_at_a_time = asyncio.Lock()  # Searching opens the data dir once, lazily

    @server.tool(name=TOOL, description=DESCRIPTION)
    async def search(
        texts: Annotated[
            list[str],
            Field(
                description=f"the question, and up to {MAX_TEXTS - 1} other phrasings of it "
                f"(each at most {MAX_TEXT_BYTES} bytes)"
            ),
        ],
        top_k: Annotated[
            int | None,
            Field(description=f"how many hits, 1 to {MAX_TOP_K} (default: the service's)"),
        ] = None,
        room: Annotated[
            str | None, Field(description="only this room: its id, '!...:server'")
        ] = None,
        corpus: Annotated[
            Literal["chat", "reference"] | None,
            Field(description="only chat, or only the reference documentation"),
        ] = None,
        ctx: Context | None = None,
    ):
        given = arguments_given(ctx) if ctx is not None else ()
        async with one_at_a_time:  # off the loop: a search from the data dir is blocking
            return await asyncio.to_thread(
                answer, cfg, searching, texts, top_k, room, corpus, given
            )

    return server


def run_mcp(cfg: Config) -> int:
    searching = Searching(cfg)
    print(
        f"matrix-sources mcp: serving the `{TOOL}` tool on stdio for {cfg.data_dir}",
        file=sys.stderr,
        flush=True,
    )
    try:
        asyncio.run(build_server(cfg, searching).run_stdio_async())
    finally:
        searching.close()
    return 0
