"""The stdio transport of `matrix-sources mcp`: JSON-RPC lines in and out, every line a
client sends answered.

The SDK's own transport parses a line with pydantic, which refuses a lone surrogate
(`"\\ud800"`: valid JSON, not text) as it refuses a line that is not JSON, and then
answers nothing at all: the client waits for good. Here a line is parsed with Python's
json, so such a request reaches the tool, which refuses it naming the field; a line that
is not JSON (nor UTF-8) is answered -32700 (Parse error), one that is JSON but not a
JSON-RPC message -32600 (Invalid Request, with its id when it has one), and a line over
MAX_LINE_BYTES -32700 without being read whole. An answer that holds a lone surrogate
(a request's own value quoted back) goes out with U+FFFD in its place.

As with the SDK, fd 0 reads /dev/null and fd 1 writes to standard error while serving:
a library that prints to standard output cannot break the framing.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Any

import anyio
import mcp.types as rpc
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

# Far over any valid call (8 texts of 1,000 bytes, each character escaped in 12 bytes).
MAX_LINE_BYTES = 1 << 20


def _refusal(code: int, message: str, request_id: object = None) -> rpc.JSONRPCError:
    rid = (
        request_id
        if isinstance(request_id, (str, int)) and not isinstance(request_id, bool)
        else None
    )
    return rpc.JSONRPCError(jsonrpc="2.0", id=rid, error=rpc.ErrorData(code=code, message=message))


def parse_line(raw: bytes) -> tuple[Any, rpc.JSONRPCError | None]:
    """A line's JSON-RPC message, or the error that answers it; (None, None) for a blank
    line."""
    if not raw.strip():
        return None, None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested past the parser
        return None, _refusal(rpc.PARSE_ERROR, "Parse error: the line is not JSON")
    try:
        return rpc.jsonrpc_message_adapter.validate_python(obj, by_name=False), None
    except ValidationError:
        return None, _refusal(
            rpc.INVALID_REQUEST,
            "Invalid Request: not a JSON-RPC 2.0 message",
            obj.get("id") if isinstance(obj, dict) else None,
        )


def _legible(value: Any) -> Any:
    """`value` with each lone surrogate of its strings as U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_legible(k): _legible(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_legible(v) for v in value]
    return value


def wire_line(message: Any) -> bytes:
    """One message as the line that carries it."""
    try:
        text = message.model_dump_json(by_alias=True, exclude_unset=True)
    except ValueError:  # PydanticSerializationError: a lone surrogate, which UTF-8 cannot carry
        text = json.dumps(
            _legible(message.model_dump(mode="json", by_alias=True, exclude_unset=True)),
            ensure_ascii=False,
        )
    return text.encode() + b"\n"


@contextmanager
def _claim_stdio() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """The protocol's input and output, as duplicates of fds 0 and 1; meanwhile fd 0
    reads /dev/null and fd 1 writes to standard error. Restored on exit."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        # closefd=False, never closed: a reading thread may still block on the descriptor
        # when the session ends, and must not find another file under it.
        yield (os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False))
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)


def _read_line(stream: IO[bytes]) -> tuple[bytes, bool]:
    """The next line (b"" at the end) and whether it was cut at MAX_LINE_BYTES; the rest
    of a cut line is read and dropped."""
    line = stream.readline(MAX_LINE_BYTES + 1)
    if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
        return line, False
    while (more := stream.readline(MAX_LINE_BYTES)) and not more.endswith(b"\n"):
        pass
    return line, True


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) for a lowlevel MCP server, over the process's stdio."""
    with _claim_stdio() as (wire_in, wire_out):
        lock = anyio.Lock()
        reader_in, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, writer_out = anyio.create_memory_object_stream[SessionMessage](0)

        async def emit(message: Any) -> None:
            data = wire_line(message)
            async with lock:  # answers from the reader and the server, whole lines
                await anyio.to_thread.run_sync(_write, wire_out, data)

        async def read() -> None:
            async with reader_in:
                while True:
                    raw, cut = await anyio.to_thread.run_sync(
                        _read_line, wire_in, abandon_on_cancel=True
                    )
                    if not raw:
                        return
                    message, refusal = (
                        (
                            None,
                            _refusal(
                                rpc.PARSE_ERROR, f"Parse error: a line over {MAX_LINE_BYTES} bytes"
                            ),
                        )
                        if cut
                        else parse_line(raw)
                    )
                    if refusal is not None:
                        await emit(refusal)
                    elif message is not None:
                        await reader_in.send(SessionMessage(message))

        async def write() -> None:
            async with writer_out:
                async for session_message in writer_out:
                    await emit(session_message.message)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(write)
            yield read_stream, write_stream


def _write(stream: IO[bytes], data: bytes) -> None:
    stream.write(data)
    stream.flush()
