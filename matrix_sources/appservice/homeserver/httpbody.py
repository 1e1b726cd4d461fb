"""Reading a request to the service: its bearer token (one rule for the appservice API
and the search API), and its body: bounded by what Synapse may legally send, parsed
off the event loop, and every hostile shape answered 4xx, never 500.

Synapse sends at most 100 events per transaction (synapse/appservice/scheduler.py), each
at most 64 KiB as canonical JSON (UTF-8). It serialises the transaction with Python's
default `ensure_ascii`, so a character outside the BMP (4 bytes in UTF-8) goes out as a
12-byte surrogate pair escape: 3x. A state event's `unsigned.prev_content` repeats its
content: 2x. Plus an envelope (ephemeral events, to-device, transaction id) of at most
1 MiB. aiohttp's default limit (1 MiB) answered 413 to a legal transaction, which
Synapse then resends forever: delivery stops for good.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

MAX_EVENTS_PER_TRANSACTION = 100
MAX_PDU_BYTES = 65536
ASCII_ESCAPE_FACTOR = 3
STATE_COPIES = 2
ENVELOPE_BYTES = 1 << 20
MAX_TRANSACTION_BYTES = (
    MAX_EVENTS_PER_TRANSACTION * MAX_PDU_BYTES * ASCII_ESCAPE_FACTOR * STATE_COPIES + ENVELOPE_BYTES
)
MAX_PING_BYTES = 64 * 1024
# Parsed in a worker thread: 20 MiB of JSON takes longer than a loop may be blocked.
PARSE_IN_THREAD_BYTES = 256 * 1024


def bearer(request: web.Request, query: bool = False) -> str | None:
    """The token of `Authorization: Bearer ...` (the scheme in any case, RFC 7235); ""
    for a header of another scheme; None without one. With `query`, a request without
    the header may give it as `?access_token=` (the appservice API, which older
    homeservers call so); the search API never takes it from the query string, which
    proxies and access logs keep."""
    auth = request.headers.get("Authorization")
    if auth is not None:
        scheme, _, token = auth.strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""
    return request.rel_url.query.get("access_token") if query else None


def error(status: int, errcode: str, message: str, **fields) -> web.Response:
    return web.json_response({"errcode": errcode, "error": message, **fields}, status=status)


class BodyError(Exception):
    """A body that cannot be a valid request; `response` says so to the sender."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


async def read_body(request: web.Request, limit: int) -> bytes:
    """The raw body, at most `limit` bytes (aiohttp's own client_max_size not involved)."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyError(error(413, "M_TOO_LARGE", f"body over {limit} bytes"))
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise BodyError(error(413, "M_TOO_LARGE", f"body over {limit} bytes"))
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    """JSON from bytes; BodyError (400) for anything that is not: bad bytes, bad syntax,
    nesting deep enough to exhaust the parser's recursion, an integer of too many digits."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # json.JSONDecodeError is a ValueError; so is an int over Python's digit limit.
        raise BodyError(error(400, "M_NOT_JSON", "body is not JSON")) from None


async def read_json_object(request: web.Request, limit: int) -> dict:
    """The body as a JSON object, read within `limit` and parsed off the loop when big."""
    raw = await read_body(request, limit)
    body = (
        await asyncio.to_thread(parse_json, raw)
        if len(raw) > PARSE_IN_THREAD_BYTES
        else parse_json(raw)
    )
    if not isinstance(body, dict):
        raise BodyError(error(400, "M_BAD_JSON", "body must be a JSON object"))
    return body
