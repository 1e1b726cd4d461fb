"""Answering `!sources` in a room: parse, rate-limit, search off the event loop, reply.

User mistakes (`CommandError`) become a short reply in one place; nothing the asker
typed is logged or stored.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from indexer.events import MessageEvent
from indexer.search import Searcher

from .commands import HELP, CommandError, HelpCommand, parse_command
from .replies import Reply, render_error, render_help, render_hits

log = logging.getLogger("matrix_sources.responder")

Send = Callable[[str, dict], Awaitable[str]]


@dataclass
class RateLimiter:
    per_minute: int
    clock: Callable[[], float] = time.monotonic
    _seen: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))

    def retry_after(self, user: str) -> float:
        """0 if the user may ask now (and records the ask), else seconds to wait."""
        if self.per_minute <= 0:
            return 0.0
        now = self.clock()
        q = self._seen[user]
        while q and now - q[0] >= 60:
            q.popleft()
        if len(q) >= self.per_minute:
            return 60 - (now - q[0])
        q.append(now)
        return 0.0


@dataclass
class Responder:
    searcher: Searcher
    send: Send  # (room_id, content) -> event id
    bot_user: str
    default_top_k: int = 5
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter(6))
    domain: str | None = None
    answered: int = 0

    async def answer(self, ev: MessageEvent) -> Reply | None:
        m = ev.message
        if m.sender == self.bot_user:
            return None
        reply = await self._reply_for(ev)
        content = reply.content(in_reply_to=m.event_id, thread_root=ev.thread_root)
        await self.send(m.room_id, content)
        self.answered += 1
        return reply

    async def _reply_for(self, ev: MessageEvent) -> Reply:
        m = ev.message
        try:
            cmd = parse_command(m.body, m.room_id, self.default_top_k)
        except CommandError as e:
            return render_error(str(e))
        if isinstance(cmd, HelpCommand):
            return render_help(HELP)
        wait = self.limiter.retry_after(m.sender)
        if wait > 0:
            return render_error(f"You have asked a lot in the last minute; "
                                f"try again in {math.ceil(wait)} s.")
        started = time.monotonic()
        hits = await asyncio.to_thread(self.searcher.search, cmd.query)
        log.info("query_answered", extra={"room_id": m.room_id, "event_id": m.event_id,
                                          "texts": len(cmd.query.texts), "hits": len(hits),
                                          "ms": int((time.monotonic() - started) * 1000)})
        return render_hits(hits, cmd.query.texts, self.domain)
