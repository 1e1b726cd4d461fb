"""Room facts from the homeserver: the state of a room, fetched as the bot; telling an
outage of the homeserver from a room whose state cannot be had; fetching such a room
again later.

    fetch fails --is_outage--> homeserver unreachable: the transaction gets 503
                \\-otherwise--> this room only: its events refused for now (journal:
                                state_unavailable), StateRetry fetches it again with
                                backoff, then its history comes back through backfill
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import aiohttp
from mautrix.api import HTTPAPI, Method, Path
from mautrix.errors import MatrixConnectionError, MatrixRequestError, MForbidden, MNotFound

from matrix_sources.indexer.clock import REAL, Clock, retrying
from matrix_sources.indexer.ingest.events import StateEvent, parse_event
from matrix_sources.indexer.ingest.roomfacts import RoomFacts, facts_from_state

log = logging.getLogger(__name__)

# A gateway in front of the homeserver saying it is not there.
GATEWAY_DOWN = frozenset({502, 503, 504})


async def fetch_room_facts(api: HTTPAPI, room_id: str) -> RoomFacts | None:
    """The room's current facts, or None if the bot cannot see the room (not joined,
    no such room). Other errors propagate: `is_outage` tells the caller which."""
    try:
        raw = await api.request(Method.GET, Path.v3.rooms[room_id].state)
    except (MForbidden, MNotFound):
        return None
    events = [
        ev
        for ev in map(parse_event, raw if isinstance(raw, list) else [])
        if isinstance(ev, StateEvent)
    ]
    return facts_from_state(events)


class RoomStateHidden(Exception):
    """The homeserver does not show the bot this room's state (not joined yet)."""

    def __init__(self, room_id: str) -> None:
        super().__init__(f"the homeserver does not show {room_id}'s state to the bot yet")


def is_outage(exc: BaseException) -> bool:
    """Whether a failed request means the homeserver is unreachable (every room fails
    alike, Synapse should retry the transaction), not that this one room failed."""
    if isinstance(exc, MatrixRequestError):
        return exc.http_status in GATEWAY_DOWN
    return isinstance(
        exc,
        (
            MatrixConnectionError,
            aiohttp.ClientConnectionError,
            ConnectionError,
            asyncio.TimeoutError,
            TimeoutError,
        ),
    )


class StateRetry:
    """Rooms whose state could not be fetched, fetched again with backoff (doubling,
    capped) until it works; then `on_known(room)` (the service backfills the room)."""

    def __init__(
        self,
        fetch: Callable[[str], Awaitable[None]],
        on_known: Callable[[str], None],
        initial: float = 5.0,
        maximum: float = 600.0,
        clock: Clock = REAL,
    ) -> None:
        self._fetch = fetch
        self._on_known = on_known
        self.initial, self.maximum = initial, maximum
        self._clock = clock
        self._tasks: dict[str, asyncio.Task] = {}

    @property
    def waiting(self) -> set[str]:
        return set(self._tasks)

    def add(self, room_id: str) -> None:
        if room_id not in self._tasks:
            task = asyncio.create_task(self._retry(room_id), name="state-retry")
            self._tasks[room_id] = task
            task.add_done_callback(lambda _t: self._tasks.pop(room_id, None))

    async def _retry(self, room_id: str) -> None:
        attempt = 0

        async def fetch() -> None:
            nonlocal attempt
            attempt += 1
            await self._fetch(room_id)

        def failed(e: Exception, delay: float) -> None:
            log.warning(
                "room_state_retry_failed",
                exc_info=e,
                extra={"room_id": room_id, "attempt": attempt, "retry_in": delay},
            )

        await self._clock.sleep(self.initial)  # it has just failed once: wait before the first
        await retrying(
            fetch,
            retry_if=lambda e: True,
            on_retry=failed,
            initial=min(self.initial * 2, self.maximum),
            maximum=self.maximum,
            clock=self._clock,
        )
        log.info("room_state_known", extra={"room_id": room_id, "attempt": attempt})
        self._on_known(room_id)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
