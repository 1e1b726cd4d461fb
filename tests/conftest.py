from pathlib import Path

import pytest

from tests.chromaserver import ChromaServer, chroma_server_in
from tests.harness import Stack, make_stack
from tests.paths import ROOT
from tests.pgkit import fresh_schema


def full_strength(config) -> bool:
    """The full run (no -m) and any -m naming `slow`; the fast suite is another -m."""
    expr = config.option.markexpr
    return not expr or "slow" in expr


def pytest_configure(config):
    from . import strength

    strength.FULL = full_strength(config)  # before any test module reads it
    share_model_exports(config)


def share_model_exports(config) -> None:
    """Every data dir of this test process, and every service and CLI process it starts,
    finds the ONNX export of the packaged model in one folder (the models_dir setting's
    $MATRIX_SOURCES_MODELS_DIR, as the image uses it), made once: a fresh data dir's
    first start otherwise spends 15 s of both cores exporting it (onnx_embedder.py), in
    each of some 40 stacks and data dirs of the full run. The files are named by the
    weights' digest and written to a temporary name then renamed, so processes sharing
    the folder never read half a model. A test of the setting itself sets its own."""
    import os
    import shutil
    import tempfile

    from matrix_sources.indexer.config.sections import MODELS_DIR_ENV

    if os.environ.get(MODELS_DIR_ENV):
        return
    shared = tempfile.mkdtemp(prefix="matrix-sources-test-models-")
    os.environ[MODELS_DIR_ENV] = shared
    config.add_cleanup(lambda: shutil.rmtree(shared, ignore_errors=True))


def pytest_collection_modifyitems(config, items):
    """`slow` tests run in the full run (no -m) and when -m names them; a run picked by
    another marker expression (`-m "not synapse"`, the fast suite) leaves them out."""
    if full_strength(config):
        return
    slow = [i for i in items if i.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if not i.get_closest_marker("slow")]


@pytest.fixture
def model_exports() -> Path:
    """The folder holding this run's ONNX exports of the packaged models (above), for a
    test that loads a model without a data dir."""
    import os

    from matrix_sources.indexer.config.sections import MODELS_DIR_ENV

    return Path(os.environ[MODELS_DIR_ENV])


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    """A real Synapse with the generated registration and `matrix-sources run` with the
    real model, shared by the tests of one module."""
    s = make_stack(tmp_path_factory.mktemp("stack"))
    s.synapse.start()
    try:
        s.service.start()
        yield s
    finally:
        s.service.stop()
        s.synapse.stop()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory) -> ChromaServer:
    """A Chroma server on 127.0.0.1, one per test process; each test names its own
    collection in it."""
    with chroma_server_in(tmp_path_factory.mktemp("chroma-server")) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def eventlog_db(request, tmp_path):
    """Where a test's event log lives, once on each database: an SQLite file in the
    test's folder, and an empty schema of the PostgreSQL server CI starts (pgkit.py)."""
    if request.param == "sqlite":
        yield tmp_path / "eventlog.sqlite3"
        return
    with fresh_schema() as dsn:
        yield dsn


# -- the fast suite waits for no real time ------------------------------------------------
# A test that is neither `synapse` nor `slow` advances a fake clock (tests/fakeclock.py)
# instead of sleeping; a real sleep fails it, naming where it slept: in the test's own
# code, or in the product's (matrix_sources/) that the test reached, through the
# injected Clock (indexer/clock.py, which looks time.sleep and asyncio.sleep up at each
# call) or not. A library's own polling inside a call (subprocess.wait's, say) is the
# library's.

OURS = tuple(f"{ROOT / d}/" for d in ("tests", "matrix_sources"))
CLOCK_MODULE = str(ROOT / "matrix_sources" / "indexer" / "clock.py")


class RealSleeps:
    def __init__(self) -> None:
        self.found: list[str] = []

    def note(self, seconds) -> None:
        """A sleep asked for by our code: its caller (past the guard's own wrappers) is
        a module of the tests or of the product. Named by the first caller that is not
        the clock's own (Clock.sleep, retrying, later) when that one is ours too."""
        if isinstance(seconds, (int, float)) and seconds > 0:
            import sys

            caller = sys._getframe(2)
            while caller is not None and caller.f_code.co_filename == __file__:
                caller = caller.f_back  # our own wrappers, stacked
            if caller is None or not caller.f_code.co_filename.startswith(OURS):
                return
            named = caller
            while named is not None and named.f_code.co_filename == CLOCK_MODULE:
                named = named.f_back
            if named is None or not named.f_code.co_filename.startswith(OURS):
                named = caller  # the clock's own task (Clock.later): the clock is named
            name = named.f_code.co_filename
            self.found.append(f"{seconds}s at {name[len(str(ROOT)) + 1 :]}:{named.f_lineno}")


def guard_sleeps(monkeypatch) -> RealSleeps:
    import asyncio
    import time

    sleeps = RealSleeps()
    real_sleep, real_async_sleep = time.sleep, asyncio.sleep

    def sleep(seconds):
        sleeps.note(seconds)
        return real_sleep(seconds)

    def async_sleep(seconds, *args, **kwargs):
        sleeps.note(seconds)
        return real_async_sleep(seconds, *args, **kwargs)

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(asyncio, "sleep", async_sleep)
    return sleeps


@pytest.fixture(autouse=True)
def no_real_sleep(request, monkeypatch):
    if (
        request.node.get_closest_marker("synapse")
        or request.node.get_closest_marker("slow")
        or request.node.get_closest_marker("real_sleep_ok")
    ):
        yield
        return
    sleeps = guard_sleeps(monkeypatch)
    yield
    if sleeps.found:
        pytest.fail(
            "a fast test slept real time (use tests/fakeclock.py): " + ", ".join(sleeps.found[:5]),
            pytrace=False,
        )
