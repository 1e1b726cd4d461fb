"""Readiness at /health: 200 only while the service does its job.

    starting: store, model, homeserver not all up yet (detail: what it waits for)
    failing:  up, but appends to the event log fail, or the pipeline failed its last
              PIPELINE_FAILING_RUNS runs in a row (detail: which, with the error type)
    ready:    everything else

Every answer also says how far indexing is behind (`backlog`: pending messages, the
oldest one's wait, the bound, whether transactions are refused for it: backlog.py);
being behind is not failing.

Failures are read from the parts that see them (the transaction handler, the pipeline
worker) through `problems`, callables that return a reason or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

PIPELINE_FAILING_RUNS = 3  # failed runs in a row before /health says so

Problem = Callable[[], str | None]


def appends_problem(failures: Callable[[], int]) -> Problem:
    def check() -> str | None:
        n = failures()
        return f"appends to the event log failing ({n} in a row)" if n else None

    return check


def pipeline_problem(failures: Callable[[], int], error: Callable[[], str | None]) -> Problem:
    def check() -> str | None:
        n = failures()
        if n < PIPELINE_FAILING_RUNS:
            return None
        return f"pipeline failing ({n} runs in a row, last error {error()})"

    return check


@dataclass
class Health:
    """Ready only when the store and model are loaded, the homeserver answered, and
    nothing in `problems` reports a failure."""

    store: bool = False
    model: bool = False
    homeserver: bool = False
    detail: str = "starting"
    problems: dict[str, Problem] = field(default_factory=dict)  # check name -> probe
    backlog: Callable[[], dict] | None = None  # BacklogBound.report
    keywords: Callable[[], dict] | None = None  # the keyword index: ready, or its build's progress

    def failures(self) -> dict[str, str]:
        return {
            name: reason for name, probe in self.problems.items() if (reason := probe()) is not None
        }

    @property
    def ready(self) -> bool:
        return self.store and self.model and self.homeserver and not self.failures()

    async def handle(self, _request: web.Request) -> web.Response:
        failures = self.failures()
        started = self.store and self.model and self.homeserver
        status = "ready" if started and not failures else "failing" if started else "starting"
        checks = {"store": self.store, "model": self.model, "homeserver": self.homeserver}
        checks.update({name: name not in failures for name in self.problems})
        detail = "; ".join(failures.values()) if started else self.detail
        body = {"status": status, "checks": checks, "detail": detail}
        if self.keywords is not None:
            body["keyword_index"] = self.keywords()
        if self.backlog is not None:
            body["backlog"] = backlog = self.backlog()
            if backlog["full"] and started:
                body["detail"] = "; ".join(
                    filter(
                        None,
                        (
                            detail,
                            (
                                f"indexing {backlog['pending']} messages behind, "
                                f"the oldest waiting "
                                f"{backlog['oldest_pending_seconds']:g} s: transactions refused "
                                "(Synapse keeps them) until it catches up"
                            ),
                        ),
                    )
                )
        return web.json_response(body, status=200 if status == "ready" else 503)
