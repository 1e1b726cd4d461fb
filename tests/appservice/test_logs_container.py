"""Logs in the container image (MATRIX_SOURCES_CONTAINER=1, set by the Containerfile):
without a TTY they go to stdout as JSON, one object a line; with one (`podman run -it`),
to stderr as the config says; outside the image, nothing changes."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from matrix_sources.appservice.logs import CONTAINER, setup_logging


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def own_handler_removed():
    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for h in [h for h in root.handlers if h not in before]:
        root.removeHandler(h)


def streams(monkeypatch, stdout: io.StringIO | None = None) -> tuple[io.StringIO, io.StringIO]:
    """Fresh stdout and stderr, set in the test itself (pytest sets its own capture
    between a fixture and the test)."""
    out, err = stdout or io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    return out, err


def emit() -> None:
    logging.getLogger("matrix_sources.probe").warning("probe_event", extra={"room_id": "!r"})


def test_in_the_image_without_a_tty_logs_are_json_on_stdout(monkeypatch):
    out, err = streams(monkeypatch)
    monkeypatch.setenv(CONTAINER, "1")
    setup_logging("INFO")  # config.yaml's logging.format: text
    emit()
    [line] = out.getvalue().splitlines()
    assert json.loads(line)["event"] == "probe_event"
    assert json.loads(line)["room_id"] == "!r"
    assert err.getvalue() == ""


def test_in_the_image_with_a_tty_logs_stay_text_on_stderr(monkeypatch):
    out, err = streams(monkeypatch, Terminal())
    monkeypatch.setenv(CONTAINER, "1")
    setup_logging("INFO")
    emit()
    assert "WARNING matrix_sources.probe probe_event room_id=!r" in err.getvalue()
    assert out.getvalue() == ""


def test_outside_the_image_logs_go_to_stderr_as_configured(monkeypatch):
    out, err = streams(monkeypatch)
    monkeypatch.delenv(CONTAINER, raising=False)
    setup_logging("INFO")
    emit()
    assert "probe_event room_id=!r" in err.getvalue() and out.getvalue() == ""
    setup_logging("INFO", as_json=True)  # reconfigured, not doubled
    emit()
    assert err.getvalue().count("probe_event") == 2
    assert json.loads(err.getvalue().splitlines()[-1])["event"] == "probe_event"
