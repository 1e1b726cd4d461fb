"""appservice/httpclient.py, the service's one client for its own calls, against a real
HTTP server on loopback: the same answers blocking and async, the bearer token sent,
JSON both ways, an error status an answer, no answer an `Unreachable` naming why."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from matrix_sources.appservice.httpclient import HttpClient, Unreachable


class Server(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None, str | None, bytes]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append(
            (
                self.command,
                self.path,
                self.headers.get("Authorization"),
                self.headers.get("Content-Type"),
                body,
            )
        )
        if self.path == "/drop":  # takes the request, never answers
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        code, data, ctype = {
            "/json": (200, json.dumps({"room_id": "!r:example.org"}).encode(), "application/json"),
            "/echo": (200, body, "application/json"),
            "/refused": (
                403,
                b'{"errcode": "M_FORBIDDEN", "error": "not you"}',
                "application/json",
            ),
            "/gateway": (502, b"<html>Bad Gateway</html>", "text/html"),
        }[self.path]
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Retry-After", "7")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    Server.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    t = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"  # a trailing slash: taken off
    httpd.shutdown()
    httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


async def both(client: HttpClient, method: str, path: str, body=None):
    """The same call blocking and async: the two sides must agree."""
    sync = client.call(method, path, body)
    return sync, await client.call_async(method, path, body)


async def test_a_get_carries_the_bearer_token_and_reads_json(server):
    for resp in await both(HttpClient(server, "tok"), "GET", "/json"):
        assert (resp.status, resp.ok, resp.is_json) == (200, True, True)
        assert resp.data == {"room_id": "!r:example.org"}
        assert resp.header("retry-after") == resp.header("Retry-After") == "7"
    assert [s[:4] for s in Server.seen] == [("GET", "/json", "Bearer tok", None)] * 2


async def test_a_body_goes_as_json_and_no_token_means_no_header(server):
    for resp in await both(HttpClient(server), "POST", "/echo", {"texts": ["é"]}):
        assert resp.data == {"texts": ["é"]}
    assert [(s[2], s[3]) for s in Server.seen] == [(None, "application/json")] * 2
    assert json.loads(Server.seen[0][4]) == {"texts": ["é"]}


async def test_an_error_status_is_an_answer_with_its_matrix_error(server):
    for resp in await both(HttpClient(server, "tok"), "GET", "/refused"):
        assert (resp.status, resp.ok) == (403, False)
        assert (resp.errcode, resp.error) == ("M_FORBIDDEN", "not you")


async def test_a_body_that_is_not_json_is_kept_raw(server):
    for resp in await both(HttpClient(server), "GET", "/gateway"):
        assert (resp.status, resp.is_json, resp.data, resp.errcode) == (502, False, None, "")
        assert resp.body == b"<html>Bad Gateway</html>"


async def test_nothing_listening_is_unreachable_and_refused():
    url = f"http://127.0.0.1:{free_port()}"
    client = HttpClient(url, "tok", timeout=5)
    for call in (lambda: client.call("GET", "/x"), None):
        with pytest.raises(Unreachable) as info:
            if call:
                call()
            else:
                await client.call_async("GET", "/x")
        assert info.value.refused and info.value.url == f"{url}/x"
        assert str(info.value).startswith(f"no answer from {url}/x (")
        assert isinstance(info.value, OSError)  # what callers catching OSError expect


async def test_a_connection_taken_and_dropped_is_unreachable_but_not_refused(server):
    client = HttpClient(server, timeout=5)
    with pytest.raises(Unreachable) as sync:
        client.call("GET", "/drop")
    with pytest.raises(Unreachable) as async_:
        await client.call_async("GET", "/drop")
    assert not sync.value.refused and not async_.value.refused


async def test_proxies_of_the_environment_are_not_used(server, monkeypatch):
    """As aiohttp (and mautrix) ignore them, so does the blocking side: a command
    reaches the homeserver and the loopback search API directly, never through the
    proxy the environment names (here the test server, which would answer)."""
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, server)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    client = HttpClient(f"http://127.0.0.1:{free_port()}", timeout=5)
    with pytest.raises(Unreachable):
        client.call("GET", "/json")
    with pytest.raises(Unreachable):
        await client.call_async("GET", "/json")
    assert Server.seen == []
