"""The guard of tests/conftest.py: a fast test that sleeps real time fails, naming where."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.conftest import guard_sleeps


@pytest.mark.real_sleep_ok  # it sleeps on purpose: the probe
def test_the_guard_catches_a_real_sleep(monkeypatch):
    sleeps = guard_sleeps(monkeypatch)
    time.sleep(0)  # a yield, not a wait
    assert sleeps.found == []
    time.sleep(0.001)
    asyncio.run(asyncio.sleep(0.001))
    assert [f.split(" at ")[0] for f in sleeps.found] == ["0.001s", "0.001s"]
    assert all("test_no_real_sleep.py" in f for f in sleeps.found)
    sleeps.found.clear()
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # polls inside: not ours
    assert sleeps.found == []
