"""End-to-end harness: a real Synapse, `matrix-sources run` as a real process, and
people at matrix-nio clients. Used by the `synapse`-marked tests.

The stack's event log is the data dir's SQLite file, or, with
MATRIX_SOURCES_TEST_STACK_DATABASE=postgresql, a schema of its own on the PostgreSQL
server of tests/pgkit.py (CI runs a share of the end-to-end tests so: .ci/run)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ruamel.yaml import YAML

from matrix_sources.appservice.httpclient import HttpClient
from matrix_sources.appservice.tools.localsynapse import LocalSynapse
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.store.eventlog.db import reader
from tests.vectorscan import files_holding

T = TypeVar("T")

STACK_DATABASE = "MATRIX_SOURCES_TEST_STACK_DATABASE"  # "postgresql": the stack's event log there


# Read in a process of its own: the service holds the store open.
_READ_VECTOR = """
import json, sys
from pathlib import Path
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
data = Path(sys.argv[1])
store = ChromaStore(path=data / "chroma", eventlog=EventLog(sys.argv[2], read_only=True))
print(json.dumps([[w.window_id, list(map(float, v))]
                  for w, v in store.get_with_vectors(sys.argv[3:])]))
"""


def wait_for(
    what: str,
    test: Callable[[], T],
    timeout: float = 60.0,
    every: float = 0.25,
    shows: Callable[[], object] | None = None,
) -> T:
    """Ask `test` again, `every` s, until it answers something true, and return that;
    fail naming `what` (and what `shows` says then) past `timeout` s. Real time: the
    `synapse`-marked tests wait on a real Synapse and a real service process. An async
    test whose clients must go on meanwhile runs it in a thread (`asyncio.to_thread`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = test()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(
        f"not within {timeout:.0f} s: {what}" + (f": {shows()}" if shows is not None else "")
    )


# A withdrawal reaches every file within 30 s, plus the stack's compaction interval (1 s).
WITHDRAWAL_SECONDS = 31.0


async def gone_from_every_file(
    stack: Stack, needle: str, vector: list[float] | None = None, within: float = WITHDRAWAL_SECONDS
) -> None:
    """No file of the data dir holds `needle`, nor `vector` (the window made from it:
    embeddings can be inverted, so a vector is as private as its text)."""

    def left() -> list:
        return stack.grep_data(needle) + (
            list(stack.files_holding_vector(vector)) if vector is not None else []
        )

    what = f"{needle!r} (or its window's vector) gone from every file"
    await asyncio.to_thread(wait_for, what, lambda: left() == [], within, every=0.5, shows=left)


def client_call(url: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    """A client-server API call as the user of `token`; its JSON answer ({} if none)."""
    resp = HttpClient(url, token, timeout=30).call(method, path, body)
    assert resp.ok, f"{method} {path}: {resp.status} {resp.body[:300]!r}"
    return resp.data if resp.body else {}


def newest_room_version(url: str, token: str) -> str:
    """The newest stable room version the homeserver at `url` offers."""
    caps = client_call(url, token, "GET", "/_matrix/client/v3/capabilities")["capabilities"]
    versions = caps["m.room_versions"]["available"]
    return max((v for v, s in versions.items() if s == "stable" and v.isdigit()), key=int)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServiceProcess:
    """`matrix-sources run -c CONFIG` in a subprocess, its stderr kept in a log file."""

    config: Path
    port: int
    log_path: Path
    proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120, wait_ready: bool = True) -> None:
        """Start and wait until ready (or, with wait_ready=False, until HTTP answers)."""
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "matrix_sources.appservice.cli.main",
                "run",
                "-c",
                str(self.config),
            ],
            stdout=log,
            stderr=log,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"matrix-sources run exited with {self.proc.returncode}:\n"
                    + self.log_path.read_text(errors="replace")[-4000:]
                )
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/_matrix/mau/ready", timeout=1
                ) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError:
                if not wait_ready:
                    return  # the HTTP side is up, the service is still starting
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            "matrix-sources run did not become ready:\n"
            + self.log_path.read_text(errors="replace")[-4000:]
        )

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Stack:
    root: Path
    data_dir: Path
    config: Path
    synapse: LocalSynapse
    service: ServiceProcess
    bot: str
    hs_token: str
    database: str  # store.database: the data dir's SQLite file, or a postgresql:// URL

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """Run `matrix-sources SUBCOMMAND -c config ARGS...`."""
        sub, *rest = args
        if sub == "allowlist":
            argv = ["allowlist", rest[0], "-c", str(self.config), *rest[1:]]
        else:
            argv = [sub, "-c", str(self.config), *rest]
        return subprocess.run(
            [sys.executable, "-m", "matrix_sources.appservice.cli.main", *argv],
            capture_output=True,
            text=True,
            timeout=300,
        )

    def allowlist_add(self, room: str) -> subprocess.CompletedProcess:
        """`allowlist add`, then wait until the running service has reloaded the file.
        The door check joins the bot at once, so the bot's membership says nothing about
        whether the service lists the room yet (it reloads within a poll interval): a
        message pushed before is not the listed room's, and only backfill reads it."""

        def reloads() -> int:
            return self.service.log_path.read_text(errors="replace").count("allowlist_reloaded")

        before = reloads()
        done = self.cli("allowlist", "add", room)
        assert done.returncode == 0, done.stderr
        wait_for("the service reloading the allowlist", lambda: reloads() != before, 30)
        return done

    def hit_ids(self, room: str, text: str) -> set[str]:
        """The event ids of every hit `matrix-sources search --room` finds for `text`."""
        res = self.cli("search", "--json", "--room", room, text)
        assert res.returncode == 0, res.stderr
        return {e for h in json.loads(res.stdout)["hits"] for e in h["event_ids"]}

    def journal(self) -> list[dict]:
        """The data dir's journal, one record a line ([] before its first line)."""
        path = self.data_dir / "journal.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def http(self, path: str) -> tuple[int, str]:
        """GET a path of the service's HTTP listener: (status, body)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.service.port}{path}", timeout=10
            ) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def event_status(self, event_id: str) -> str | None:
        try:
            with reader(self.database) as db:
                row = db.execute(
                    "SELECT status FROM events WHERE event_id = ?", (event_id,)
                ).fetchone()
        except FileNotFoundError:
            return None
        return row[0] if row else None

    def count_indexed(self, event_ids: list[str]) -> int:
        ids = sorted(set(event_ids))
        n = 0
        with reader(self.database) as db:
            for i in range(0, len(ids), 500):
                part = ids[i : i + 500]
                n += db.execute(
                    f"SELECT COUNT(*) FROM events WHERE event_id IN"
                    f" ({','.join('?' * len(part))}) AND status = 'indexed'",
                    part,
                ).fetchone()[0]
        return n

    def database_rows(self) -> bytes:
        """PostgreSQL: every row of every table of the stack's event log (what SQLite
        keeps in the data dir's files, which grep_data reads); b"" on SQLite."""
        if not self.database.startswith("postgresql"):
            return b""
        out = b""
        with reader(self.database) as db:
            tables = [
                r[0]
                for r in db.execute(
                    "SELECT table_name FROM information_schema.tables"
                    " WHERE table_schema = current_schema()"
                )
            ]
            for t in sorted(tables):
                out += repr(db.execute(f"SELECT * FROM {t}").fetchall()).encode()
        return out

    def wait_indexed(self, event_ids: list[str], timeout: float = 60) -> None:
        wait_for(
            "indexed",
            lambda: all(self.event_status(e) == "indexed" for e in event_ids),
            timeout,
            every=0.2,
            shows=lambda: {e: self.event_status(e) for e in event_ids},
        )

    def stored_vectors(self, window_ids: list[str]) -> dict[str, list[float]]:
        """The windows' vectors as the store holds them, read in a process of its own."""
        out = subprocess.run(
            [sys.executable, "-c", _READ_VECTOR, str(self.data_dir), self.database, *window_ids],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return dict(json.loads(out.stdout))

    def vector_of(self, event_id: str) -> list[float]:
        """The vector of the window that holds `event_id` now."""
        with reader(self.database) as db:
            [window] = db.execute(
                "SELECT window_id FROM events WHERE event_id = ?", (event_id,)
            ).fetchone()
        vector = self.stored_vectors([window])[window]
        assert files_holding(self.data_dir, vector)  # the scan can see it
        return vector

    def files_holding_vector(self, vector: list[float]) -> dict[str, int]:
        return files_holding(self.data_dir, vector)

    def grep_data(self, needle: str) -> list[Path]:
        """Every file under the data dir (event log, Chroma, journal) holding `needle`;
        on PostgreSQL also the event log's rows, as the path `postgresql:rows`."""
        raw = needle.encode()
        found = [p for p in self.data_dir.rglob("*") if p.is_file() and raw in p.read_bytes()]
        if raw in self.database_rows():
            found.append(Path("postgresql:rows"))
        return found


def make_stack(
    root: Path,
    embedder: str = "all-MiniLM-L6-v2",
    federating: bool = False,
    gate: dict | None = None,
) -> Stack:
    """`federating`: the homeserver federates over loopback (tests/federation.py), named
    `127.0.0.1:PORT`; `gate`: settings of the config's gate section."""
    data_dir = root / "data"
    hs_port, as_port = free_port(), free_port()
    if federating:
        synapse = LocalSynapse.federating(
            root / "hs", port=hs_port, appservice_registrations=[data_dir / "registration.yaml"]
        )
    else:
        synapse = LocalSynapse(
            root / "hs", port=hs_port, appservice_registrations=[data_dir / "registration.yaml"]
        )
    domain = synapse.server_name
    init_data_dir(data_dir, f"http://127.0.0.1:{hs_port}", domain, as_port=as_port)
    config = data_dir / "config.yaml"
    y = YAML()
    cfg = y.load(config.read_text())
    cfg["index"]["embedder"]["model"] = embedder  # the template's backend stays
    cfg["index"]["debounce_seconds"] = 0.3
    cfg["index"]["compaction_interval_seconds"] = 1
    cfg["logging"]["level"] = "DEBUG"  # the privacy tests read the logs at their loudest
    for key, value in (gate or {}).items():
        cfg["gate"][key] = value
    database = str(data_dir / "eventlog.sqlite3")
    if os.environ.get(STACK_DATABASE) == "postgresql":
        database = stack_schema()
        cfg["store"]["database"] = database
    with open(config, "w") as f:
        y.dump(cfg, f)
    reg = YAML(typ="safe").load((data_dir / "registration.yaml").read_text())
    service = ServiceProcess(config, as_port, root / "service.log")
    return Stack(
        root, data_dir, config, synapse, service, f"@sourcesbot:{domain}", reg["hs_token"], database
    )


def stack_schema() -> str:
    """A DSN on a fresh schema of the tests' PostgreSQL server, for one stack. Left in
    place afterwards: the server is a throwaway one (scripts/pg-server)."""
    import uuid

    from tests.pgkit import admin, base_dsn, with_schema

    schema = f"stack_{uuid.uuid4().hex[:12]}"
    admin(base_dsn(), f"CREATE SCHEMA {schema}")
    return with_schema(base_dsn(), schema)
