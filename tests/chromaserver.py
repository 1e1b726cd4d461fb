"""A Chroma server (`chroma run` on 127.0.0.1) for the tests that need one: one per
test process, since each start costs about 1.5 s and every test names its own
collection."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.harness import free_port


@dataclass(frozen=True)
class ChromaServer:
    port: int
    data: Path  # its persist dir
    pid: int = 0


@contextmanager
def chroma_server_in(path: Path) -> Iterator[ChromaServer]:
    """Start `chroma run` with its persist dir and log under `path`; stop it after."""
    exe = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")
    port = free_port()
    log = open(path / "server.log", "wb")
    proc = subprocess.Popen(
        [exe, "run", "--path", str(path / "data"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=log,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1
            ) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
        try:  # until it listens, or exits
            proc.wait(0.2)
        except subprocess.TimeoutExpired:
            continue
        log.close()
        raise RuntimeError("chroma run did not start:\n" + (path / "server.log").read_text())
    try:
        yield ChromaServer(port, path / "data", proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
