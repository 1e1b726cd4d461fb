"""Header bytes that are not UTF-8, or not allowed at all, on every endpoint that takes a
token (issue 44, item 1), on the service's own aiohttp application (mautrix's, with our
transaction handler and the search API on it), spoken to as raw bytes on a socket.

`Authorization: Bearer \\xff\\xfe` answered 500 with a traceback (the token's `.encode()`);
it is a wrong token like any other. A header the HTTP parser refuses (`a\\x00b`) was
logged with its bytes quoted; the log keeps the status and the reason only."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from aiohttp.test_utils import TestServer

from matrix_sources.appservice.homeserver.ratelimit import TokenBucket
from matrix_sources.appservice.homeserver.search_api import ROUTE, SearchAPI
from matrix_sources.appservice.homeserver.service import _SourcesAppService, _StateStore
from matrix_sources.appservice.logs import KeyValueFormatter, setup_logging
from tests.appservice.homeserver.test_hostile_transactions import Env
from tests.appservice.homeserver.test_search_api import TOKEN as API_TOKEN
from tests.appservice.homeserver.test_search_api import Searches
from tests.appservice.homeserver.test_transactions import HS_TOKEN

# mautrix's AppService still hands aiohttp a loop; the service runs the same code.
pytestmark = pytest.mark.filterwarnings("ignore:loop argument is deprecated:DeprecationWarning")

SECRET = "s3cr3t-kept-out-of-logs"
# (method, path, body): each endpoint that checks a token.
ENDPOINTS = [
    ("PUT", "/_matrix/app/v1/transactions/t1", {"events": []}),
    ("POST", "/_matrix/app/v1/ping", {}),
    ("GET", "/_matrix/app/v1/users/%40someone%3Aexample.org", None),
    ("GET", "/_matrix/app/v1/rooms/%23room%3Aexample.org", None),
    ("POST", ROUTE, {"texts": ["how do I rotate the key"]}),
]


@pytest.fixture
def service_logging():
    """The service's log setup (as `matrix-sources run` makes it), undone afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    setup_logging("INFO")
    yield
    for h in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(h)
    root.setLevel(level)
    for f in list(logging.getLogger("aiohttp.server").filters):
        logging.getLogger("aiohttp.server").removeFilter(f)


@pytest.fixture
async def server(tmp_path):
    env = Env(tmp_path)
    az = _SourcesAppService(
        server="http://127.0.0.1:9",
        domain="example.org",
        as_token="as-token-0123456789abcdef",
        hs_token=HS_TOKEN,
        bot_localpart="sourcesbot",
        id="matrix-sources",
        state_store=_StateStore(),
    )
    az.transaction_handler = env.handler
    api = SearchAPI(API_TOKEN, Searches(), lambda: None, TokenBucket(0, 1), default_top_k=5)
    api.attach(az.app.router)
    srv = TestServer(az.app)
    await srv.start_server()
    yield srv
    await srv.close()
    api.close()
    env.ingest.eventlog.close()


async def raw_request(
    srv: TestServer, method: str, path: str | bytes, body: dict | None, authorization: bytes | None
) -> tuple[int, bytes]:
    """One request with the path's and the Authorization header's bytes as given (no
    header for None); (status, response)."""
    data = b"" if body is None else json.dumps(body).encode()
    target = path if isinstance(path, bytes) else path.encode()
    reader, writer = await asyncio.open_connection(srv.host, srv.port)
    try:
        writer.write(
            method.encode()
            + b" "
            + target
            + b" HTTP/1.1\r\nHost: localhost\r\n"
            + (b"Authorization: " + authorization + b"\r\n" if authorization else b"")
            + f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    return int(response.split(b" ", 2)[1]), response


def logged(caplog) -> str:
    """Every captured record as the service writes it, in both formats."""
    return "\n".join(
        f.format(r)
        for r in caplog.records
        for f in (KeyValueFormatter(), KeyValueFormatter(as_json=True))
    )


@pytest.mark.parametrize(
    "method,path,body", ENDPOINTS, ids=["transactions", "ping", "users", "rooms", "search"]
)
@pytest.mark.parametrize(
    "token",
    [b"\xff\xfe", b"Bearer \xff\xfe", b"Bearer a\xc3", b"Bearer \xed\xa0\x80" + SECRET.encode()],
    ids=["no-scheme", "ff-fe", "cut-utf8", "utf8-surrogate"],
)
async def test_a_token_of_bytes_not_utf8_is_a_wrong_token(
    server, service_logging, caplog, method, path, body, token
):
    caplog.set_level(logging.INFO)
    wrong, _ = await raw_request(server, method, path, body, b"Bearer wrong-token")
    assert wrong in (401, 403)
    status, response = await raw_request(server, method, path, body, token)
    assert status == wrong, response
    assert b"Traceback" not in response
    text = logged(caplog)
    assert "Traceback" not in text and "UnicodeEncodeError" not in text
    assert SECRET not in text and "\\xff" not in text and "\\udcff" not in text


@pytest.mark.parametrize(
    "method,path,body", ENDPOINTS[:4], ids=["transactions", "ping", "users", "rooms"]
)
@pytest.mark.parametrize(
    "query", [b"%FF%FE", b"%ED%A0%80", b"\xff\xfe"], ids=["escaped", "escaped-surrogate", "raw"]
)
async def test_an_access_token_parameter_of_bytes_not_utf8_is_a_wrong_token(
    server, service_logging, caplog, method, path, body, query
):
    """The homeserver's endpoints also take `?access_token=` (the search API does not)."""
    caplog.set_level(logging.INFO)
    wrong, _ = await raw_request(server, method, path + "?access_token=wrong", body, None)
    assert wrong in (401, 403)
    status, response = await raw_request(
        server, method, path.encode() + b"?access_token=" + query, body, None
    )
    assert status in (wrong, 400), response  # 400: a request line the parser refuses
    assert "Traceback" not in logged(caplog) and b"Traceback" not in response


@pytest.mark.parametrize(
    "method,path,body", ENDPOINTS, ids=["transactions", "ping", "users", "rooms", "search"]
)
async def test_header_bytes_the_parser_refuses_never_reach_a_log_line(
    server, service_logging, caplog, method, path, body
):
    caplog.set_level(logging.INFO)
    status, _ = await raw_request(server, method, path, body, b"Bearer a\x00" + SECRET.encode())
    assert status == 400  # not HTTP at all: aiohttp's parser refuses it before any handler
    text = logged(caplog)
    assert SECRET not in text and "Authorization" not in text and "Traceback" not in text
    [line] = [KeyValueFormatter().format(r) for r in caplog.records if r.name == "aiohttp.server"]
    assert " WARNING aiohttp.server http_request_refused " in line
    assert "status=400" in line and 'reason="Invalid header value char"' in line
