"""The guard of tests/conftest.py: a fast test that sleeps real time fails, naming where:
in the test's own code, or in the product's that the test reached."""

from __future__ import annotations

import asyncio
import time

import pytest

from matrix_sources.appservice.homeserver.roomstate import StateRetry
from matrix_sources.indexer.clock import REAL
from matrix_sources.indexer.ingest.spool import wait_answer
from tests.conftest import guard_sleeps
from tests.paths import ROOT


@pytest.mark.real_sleep_ok  # it sleeps on purpose: the probe
def test_the_guard_catches_a_real_sleep(monkeypatch):
    sleeps = guard_sleeps(monkeypatch)
    time.sleep(0)  # a yield, not a wait
    assert sleeps.found == []
    time.sleep(0.001)
    asyncio.run(asyncio.sleep(0.001))
    assert [f.split(" at ")[0] for f in sleeps.found] == ["0.001s", "0.001s"]
    assert all("tests/test_no_real_sleep.py" in f for f in sleeps.found)
    sleeps.found.clear()
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", "pass"], check=True)  # polls inside: not ours
    assert sleeps.found == []


@pytest.mark.real_sleep_ok  # it sleeps on purpose: the probe
def test_the_guard_catches_a_real_sleep_in_the_product(monkeypatch, tmp_path):
    """Product code that a fast test reaches sleeps real time on the default clock (its
    REAL one, the test gave it no fake): the guard names the product's module."""
    sleeps = guard_sleeps(monkeypatch)
    # Blocking, through the clock: `matrix-sources forget` waiting for the service.
    assert wait_answer(tmp_path / "no.answer.json", timeout=0) is None
    assert [f.split(":")[0] for f in sleeps.found] == ["0.2s at indexer/ingest/spool.py"]
    sleeps.found.clear()

    # On the event loop, through the clock: a room's state fetched again after a wait.
    async def retry_once() -> list[str]:
        known: list[str] = []

        async def fetch(room: str) -> None:
            pass

        retry = StateRetry(fetch, known.append, initial=0.001)
        retry.add("!r:example.org")
        while not known:
            await asyncio.sleep(0)
        return known

    assert asyncio.run(retry_once()) == ["!r:example.org"]
    assert [f.split(":")[0] for f in sleeps.found] == [
        "0.001s at appservice/homeserver/roomstate.py"
    ]
    sleeps.found.clear()

    # The clock's own timer (Clock.later): the clock is named.
    async def later() -> None:
        fired = asyncio.Event()
        await REAL.later(0.001, fired.set, "probe")
        assert fired.is_set()

    asyncio.run(later())
    assert [f.split(" at ")[1].split(":")[0] for f in sleeps.found] == ["indexer/clock.py"]
    sleeps.found.clear()

    # Straight to time.sleep in a product module, the clock bypassed (the architecture
    # test forbids it; the guard catches it all the same).
    probe: dict = {}
    exec(
        compile(
            "import time\ndef nap():\n    time.sleep(0.001)\n",
            str(ROOT / "appservice" / "probe.py"),
            "exec",
        ),
        probe,
    )
    probe["nap"]()
    assert [f.split(":")[0] for f in sleeps.found] == ["0.001s at appservice/probe.py"]
