"""`matrix-sources search` and `matrix-sources mcp` while a service runs: asked through the
search API, with no model and no store of their own, and answering exactly what they
answer from the data dir when it is stopped. The service here is the real SearchAPI over
the real index (Chroma, event log, the deterministic embedder), on aiohttp's test server,
holding the data dir's writer lock as `run` does; the end-to-end test through Synapse is
tests/e2e/test_search_api_e2e.py."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from ruamel.yaml import YAML

from matrix_sources.appservice.bot.replies import render_hits
from matrix_sources.appservice.cli import search as cli_search
from matrix_sources.appservice.cli.main import main
from matrix_sources.appservice.homeserver.ratelimit import TokenBucket
from matrix_sources.appservice.homeserver.search_api import SearchAPI
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.datadir import api_token
from matrix_sources.indexer.records import EventID, Hit, Line, RefSource, RoomID, UserID, WindowID
from matrix_sources.indexer.store.lock import WriterLock, holder
from tests.appservice.cli.test_cli import ROOM, datadir  # noqa: F401  (the fixture)
from tests.appservice.homeserver.test_search_api import HIT
from tests.fakeclock import FakeClock
from tests.harness import free_port

QUESTIONS = [
    ["--json", "how", "do", "I", "mount", "an", "ntfs", "partition"],
    ["how", "do", "I", "mount", "an", "ntfs", "partition"],
    ["--json", "printer", "cups"],
    ["--top", "2", "-t", "printer queue stuck", "-t", "wifi firmware"],
    ["--json", "--room", "#eval:example.org", "--corpus", "chat", "fstab"],
]
# What the API path must not import: the model, the store, Matrix, and the modules that
# open them (they pull the rest in, lazily or not).
HEAVY = (
    "torch",
    "chromadb",
    "mautrix",
    "onnxruntime",
    "sentence_transformers",
    "matrix_sources.indexer.components",
    "matrix_sources.indexer.store.vectors.chroma",
    "matrix_sources.indexer.search.searcher",
    "matrix_sources.indexer.models.embedder",
)


def set_port(cfg_path, port: int) -> None:
    y = YAML()
    data = y.load(cfg_path.read_text())
    data["appservice"]["port"] = port
    with open(cfg_path, "w") as f:
        y.dump(data, f)


def cli(cfg_path, args: list[str], capsys) -> tuple[int, str, str]:
    code = main(["search", "-c", str(cfg_path), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


class Service:
    """The service's search API over the data dir's index, holding its writer lock."""

    def __init__(self, cfg_path, per_minute: int = 0, burst: int = 1) -> None:
        self.cfg = load_config(cfg_path)
        self.index = Index.open(self.cfg)
        self.asked: list = []
        self.clock = FakeClock(0.0)
        self.waiting_for: str | None = None
        self.api = SearchAPI(
            api_token(self.cfg),
            self.search,
            lambda: self.waiting_for,
            TokenBucket(per_minute, burst, Clock(now=self.clock)),
            5,
        )
        self.lock = WriterLock(self.cfg.data_dir, "matrix-sources run")
        self.server: TestServer | None = None

    def search(self, query):
        self.asked.append(query)
        return self.index.searcher.search(query)

    async def start(self) -> None:
        app = web.Application()
        self.api.attach(app.router)
        self.server = TestServer(app, port=free_port())
        await self.server.start_server()
        set_port(self.cfg.file, self.server.port)
        self.lock.acquire()

    async def stop(self) -> None:
        self.lock.release()
        await self.server.close()
        self.api.close()
        self.index.close()


@pytest.fixture
def imported(datadir, capsys):  # noqa: F811
    cfg, tmp = datadir
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    capsys.readouterr()
    return cfg


@pytest.fixture
def no_local_search(monkeypatch):
    """Fails a test whose command opened the data dir or loaded a model."""

    def refuse(self):
        raise AssertionError("the command opened the data dir while the service runs")

    monkeypatch.setattr(cli_search.Searching, "_local", refuse)


async def test_search_asks_the_running_service_and_prints_what_the_data_dir_gives(
    imported, capsys, monkeypatch
):
    stopped = [cli(imported, q, capsys) for q in QUESTIONS]
    assert all(code == 0 and out for code, out, _ in stopped)
    service = Service(imported)
    await service.start()
    try:
        monkeypatch.setattr(
            cli_search.Searching,
            "_local",
            lambda self: pytest.fail("opened the data dir while the service runs"),
        )
        running = [await asyncio.to_thread(cli, imported, q, capsys) for q in QUESTIONS]
    finally:
        await service.stop()
    assert [(c, o) for c, o, _ in running] == [(c, o) for c, o, _ in stopped]
    assert all("loading the model" not in err for _, _, err in running)
    assert len(service.asked) == len(QUESTIONS)  # every one answered by the service
    assert service.asked[-1].room_id == ROOM  # the alias resolved here, the id sent
    assert json.loads(running[0][1])["hits"]  # and there was something to compare


async def test_a_batch_through_the_service_waits_out_its_rate_limit(imported, capsys, monkeypatch):
    lines = [
        {"id": f"q{i}", "texts": [t]}
        for i, t in enumerate(["ntfs fstab", "printer cups", "wifi firmware"])
    ]
    lines.append({"id": "bad", "texts": ["x"], "top-k": 2})
    qfile = imported.parent / "q.jsonl"
    qfile.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert main(["search", "-c", str(imported), "--queries", str(qfile)]) == 1
    stopped = capsys.readouterr().out
    service = Service(imported, per_minute=60, burst=1)
    waits: list[float] = []

    def fake_sleep(seconds: float) -> None:  # the service's clock moves instead
        waits.append(seconds)
        service.clock.now += seconds

    monkeypatch.setattr(cli_search, "REAL", Clock(sleep_blocking=fake_sleep))
    await service.start()
    try:
        monkeypatch.setattr(cli_search.Searching, "_local", lambda self: pytest.fail("local"))
        code = await asyncio.to_thread(
            main, ["search", "-c", str(imported), "--queries", str(qfile)]
        )
    finally:
        await service.stop()
    assert code == 1 and capsys.readouterr().out == stopped
    assert waits == [1.0, 1.0] and len(service.asked) == 3
    assert '"error": "top-k: unknown field' in stopped


async def test_refusals_of_the_service_say_what_to_do(imported, capsys, monkeypatch):
    service = Service(imported, per_minute=60, burst=1)
    await service.start()
    try:
        monkeypatch.setattr(cli_search.Searching, "_local", lambda self: pytest.fail("local"))
        service.waiting_for = "waiting for the homeserver"
        code, out, err = await asyncio.to_thread(cli, imported, ["ntfs"], capsys)
        assert (code, out) == (75, "") and "waiting for the homeserver" in err
        assert "try again in 5 s" in err
        service.waiting_for = None
        assert (await asyncio.to_thread(cli, imported, ["ntfs"], capsys))[0] == 0
        code, out, err = await asyncio.to_thread(cli, imported, ["ntfs"], capsys)
        assert code == 75 and "too many searches" in err and "try again in 1 s" in err
        # The token file changed after the service read it: refused, and said so.
        service.cfg.api_token_path.write_text("another-token-" + "z" * 30 + "\n")
        service.clock.now += 60
        code, out, err = await asyncio.to_thread(cli, imported, ["ntfs"], capsys)
        assert code == 1 and str(service.cfg.api_token_path) in err and "restart" in err
    finally:
        await service.stop()


def test_a_held_data_dir_with_no_service_listening_is_searched_itself(imported, capsys):
    """`import` or `backfill` holds the lock and serves nothing: searched as before."""
    code, stopped, _ = cli(imported, ["--json", "ntfs", "partition"], capsys)
    set_port(imported, free_port())
    with WriterLock(imported.parent, "matrix-sources import"):
        assert holder(imported.parent).startswith("matrix-sources import")
        code, out, err = cli(imported, ["--json", "ntfs", "partition"], capsys)
    assert (code, out) == (0, stopped)
    assert "matrix-sources import" in err and "searching the data dir itself" in err
    assert holder(imported.parent) is None


async def test_the_api_path_imports_no_model_store_or_matrix_library(imported):
    """The process of `matrix-sources search` against a running service imports none of
    torch, chromadb, mautrix, onnxruntime, sentence-transformers, nor the modules that
    open the index."""
    service = Service(imported)
    await service.start()
    probe = (
        "import sys, json\nfrom matrix_sources.appservice.cli.main import main\n"
        f"code = main(['search', '-c', {str(imported)!r}, '--json', 'printer', 'cups'])\n"
        f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]),"
        " file=sys.stderr)\n"
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            probe,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await service.stop()
    assert json.loads(err.decode().strip().splitlines()[-1]) == [0, []], err.decode()
    assert json.loads(out)["hits"] and len(service.asked) == 1


def test_a_hit_read_back_from_its_json_renders_as_the_hit_did():
    """The CLI renders the service's hits from their JSON: nothing the reply shows may
    be lost on the way (who answered, the linked lines, a reference's file and heading)."""
    ref = Hit(
        WindowID("r1"),
        RoomID(""),
        "ops",
        "reference",
        (),
        (),
        0,
        0,
        0.02,
        "# Keys\nrotate with generate_signing_key\nthen restart",
        similarity=0.5,
        ref=RefSource("ops", "keys.md", "Keys › Rotation"),
    )
    plain = Hit(
        WindowID("w2"),
        RoomID("!r:x.org"),
        "",
        "chat",
        (EventID("$1"),),
        (UserID("@d:x.org"),),
        5,
        5,
        0.01,
        "d: hi",
        shown=(Line(EventID("$1"), UserID("@d:x.org"), 5, "hi"),),
    )
    hits = [HIT, ref, plain]
    back = [Hit.from_search_json(json.loads(json.dumps(h.to_json()))) for h in hits]
    assert [h.to_json() for h in back] == [h.to_json() for h in hits]
    texts = ("how do I rotate the key",)
    assert render_hits(back, texts, "example.org") == render_hits(hits, texts, "example.org")
    assert "carol" in render_hits(back, texts, "example.org").body  # an answer's sender


def test_a_service_that_listens_but_does_not_answer_is_an_error_not_a_second_store(
    imported, capsys, monkeypatch
):
    """The service holds the data dir and its port takes the connection but drops it
    (crashing, or another program there): an error saying so, never the data dir opened
    beside a live service."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    set_port(imported, listener.getsockname()[1])

    def drop() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    threading.Thread(target=drop, daemon=True).start()
    monkeypatch.setattr(cli_search.Searching, "_local", lambda self: pytest.fail("local"))
    try:
        with WriterLock(imported.parent, "matrix-sources run"):
            code, out, err = cli(imported, ["--json", "ntfs"], capsys)
    finally:
        listener.close()
    assert (code, out) == (1, "") and "no answer from http://127.0.0.1:" in err
