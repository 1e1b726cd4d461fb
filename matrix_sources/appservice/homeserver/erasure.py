"""A Synapse erasure reaching the index.

Synapse keeps serving an erased user's old messages, unredacted, to members who were in
the room (synapse#8185), the bot among them: the index would keep them for ever. With
homeserver.admin_token_file set, two ways find an erasure, neither depending on when
the user last left a room:

    a deactivation parts the user from every room at once:
    m.room.member leave of a user, by that user (not a kick), in an allowlisted room
        -> GET /_synapse/admin/v2/users/<user>
           erased: true -> forget_user(user, source=synapse_erasure): the redaction path
           not erased -> asked again RETRY_AFTER_S later (the flag and the parting
                         race in Synapse), then left alone
        one check per user at a time: a deactivation's burst of leaves asks once, and
        any later leave asks again

    at start (the catch-up), then every POLL_INTERVAL_S on the injected clock:
        GET /_synapse/admin/v3/users?deactivated=true, PAGE_SIZE users a page, at most
        PAGES_PER_ROUND pages a round, each round going on where the last stopped and
        back to the first page after the last
        -> each user erased and not forgotten now: forget_user, as above
        finds what no leave shows: an erasure made while the service was down, or of
        a user who had left every allowlisted room before

Without the token nothing is asked and `matrix-sources forget` is the way (docs/
deployment.md, "Erasure").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from matrix_sources.indexer.clock import REAL, Clock

from ..httpclient import HttpClient

log = logging.getLogger(__name__)

RETRY_AFTER_S = (5.0, 30.0)  # not erased yet: asked again after these
ADMIN_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 60.0  # the deactivated users looked through again after this long
PAGE_SIZE = 100  # users a page of the admin API's list
PAGES_PER_ROUND = 10  # at most this many pages a look: 1,000 deactivated users
LIST_PATH = "/_synapse/admin/v3/users"  # v3: deactivated=true lists only those


def self_leaves(events: list[Any], bot_user: str) -> set[str]:
    """Users who left a room on their own in these raw events (not the bot, not kicked)."""
    out = set()
    for ev in events:
        if not isinstance(ev, dict) or ev.get("type") != "m.room.member":
            continue
        user, content = ev.get("state_key"), ev.get("content")
        if (
            isinstance(user, str)
            and user != bot_user
            and user == ev.get("sender")
            and isinstance(content, dict)
            and content.get("membership") == "leave"
        ):
            out.add(user)
    return out


class ErasureWatch:
    """`forgotten(user)`: whether the user is forgotten now (not asked about again)."""

    def __init__(
        self,
        homeserver_url: str,
        admin_token: str,
        on_erased: Callable[[str], Awaitable[None]],
        forgotten: Callable[[str], bool] = lambda user: False,
        clock: Clock = REAL,
    ) -> None:
        self._admin = HttpClient(homeserver_url, admin_token, ADMIN_TIMEOUT_S)
        self._on_erased, self._forgotten, self._clock = on_erased, forgotten, clock
        self._checking: set[str] = set()  # users with a check under way
        self._tasks: set[asyncio.Task] = set()
        self._from = 0  # where the next look at the deactivated users starts

    def saw_leaves(self, users: set[str]) -> None:
        for user in sorted(users - self._checking):
            if self._forgotten(user):
                continue  # nothing of theirs is kept, nor will be
            self._checking.add(user)
            task = asyncio.create_task(self._check(user), name="erasure-check")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _get(self, path: str, params: dict[str, str] | None = None) -> dict | None:
        """One admin API request; None when Synapse refuses it (logged)."""
        query = f"?{urlencode(params)}" if params else ""
        resp = await self._admin.call_async("GET", f"{path}{query}")
        if resp.status != 200:
            log.warning("erasure_check_refused", extra={"path": path, "status": resp.status})
            return None
        return resp.data if isinstance(resp.data, dict) else None

    async def erased(self, user: str) -> bool:
        body = await self._get(f"/_synapse/admin/v2/users/{quote(user, safe='')}")
        return body is not None and body.get("erased") is True

    async def _check(self, user: str) -> None:
        try:
            for wait in (0.0, *RETRY_AFTER_S):
                if wait:
                    await self._clock.sleep(wait)
                try:
                    if await self.erased(user):
                        log.warning(
                            "user_erased_by_homeserver",
                            extra={"user_id": user, "found_by": "leave"},
                        )
                        await self._on_erased(user)
                        return
                except Exception:
                    log.warning("erasure_check_failed", exc_info=True, extra={"user_id": user})
        finally:
            self._checking.discard(user)

    async def poll_round(self) -> int:
        """One bounded look at the deactivated users; returns how many it forgot."""
        forgot = 0
        for _ in range(PAGES_PER_ROUND):
            body = await self._get(
                LIST_PATH,
                {
                    "deactivated": "true",
                    "order_by": "name",
                    "limit": str(PAGE_SIZE),
                    "from": str(self._from),
                },
            )
            users = body.get("users") if body is not None else None
            if not isinstance(users, list):
                return forgot  # refused or malformed: looked at again next round
            for entry in users:
                name = entry.get("name") if isinstance(entry, dict) else None
                if (
                    isinstance(name, str)
                    and entry.get("erased") is True
                    and not self._forgotten(name)
                ):
                    log.warning(
                        "user_erased_by_homeserver", extra={"user_id": name, "found_by": "poll"}
                    )
                    await self._on_erased(name)
                    forgot += 1
            token = body.get("next_token") if body is not None else None
            if not users or not (isinstance(token, str) and token.isdigit()):
                self._from = 0  # the last page: the next round starts over
                break
            self._from = int(token)
        return forgot

    async def watch(self) -> None:
        """The catch-up at start, then a look every POLL_INTERVAL_S (a task the service
        owns)."""
        while True:
            try:
                await self.poll_round()
            except Exception:
                log.warning("erasure_poll_failed", exc_info=True)
            await self._clock.sleep(POLL_INTERVAL_S)

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
