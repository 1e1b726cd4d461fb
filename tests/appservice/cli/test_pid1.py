"""The command as PID 1, the container's entrypoint: the kernel delivers it no SIGTERM it
has no handler for, so `podman stop` would wait 10 s and kill it. Until a command sets
its own handler (`run` once the service is built), SIGTERM ends it at once with 143."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from matrix_sources.indexer.datadir import init_data_dir
from tests.paths import ROOT


def hash_embedder_data_dir(tmp_path: Path) -> Path:
    init_data_dir(tmp_path / "d", "http://127.0.0.1:9", "example.org")
    path = tmp_path / "d" / "config.yaml"
    y = YAML()
    data = y.load(path.read_text())
    data["index"]["embedder"] = "hash"
    with open(path, "w") as f:
        y.dump(data, f)
    return path


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_as_pid_1_sigterm_ends_a_command_without_a_handler_of_its_own(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) for a PID namespace")
    config = hash_embedder_data_dir(tmp_path)
    # `mcp` serves on stdio and sets no SIGTERM handler: it waits on its open stdin.
    cmd = [
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        sys.executable,
        "-m",
        "matrix_sources.appservice.cli.main",
        "mcp",
        "-c",
        str(config),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    watchdog = threading.Timer(120, proc.kill)  # never hang the suite
    watchdog.start()
    try:
        assert "serving the `search` tool" in proc.stderr.readline()  # waiting on stdin
        [pid1] = children(proc.pid)
        [ns] = [
            ln
            for ln in Path(f"/proc/{pid1}/status").read_text().splitlines()
            if ln.startswith("NSpid:")
        ]
        assert ns.split()[-1] == "1"  # PID 1 in its namespace, as in a container
        os.kill(pid1, signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stderr.close()
