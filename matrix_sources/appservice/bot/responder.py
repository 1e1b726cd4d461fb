"""Answering `!sources` in a room: parse, rate-limit, search off the event loop, reply.

User mistakes (`CommandError`) become a short reply in one place; nothing the asker
typed is logged or stored. Anything else that fails gets a short reply saying so, and
is logged with a traceback and the command's ids. Searches run in an executor of their
own (never the default one, which admitting transactions uses). A reply that cannot be
sent because the homeserver is unreachable is sent once it is back (SEND_RETRY_FOR).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict, defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

from matrix_sources.indexer.clock import REAL, Clock, retrying
from matrix_sources.indexer.derived.filter import EmittedSection
from matrix_sources.indexer.ingest.events import COMMAND_PREFIX, MessageEvent
from matrix_sources.indexer.records import Hit, Message, RoomID
from matrix_sources.indexer.search.abstain import QueryFloor
from matrix_sources.indexer.search.query import SourceQuery

from .commands import (
    HELP,
    CommandError,
    ForgetMeCommand,
    HelpCommand,
    ReportCommand,
    SearchCommand,
    StatusCommand,
    WhyCommand,
    parse_command,
)
from .replies import Reply, render_error, render_help, render_hits, render_why

log = logging.getLogger(__name__)

Send = Callable[[str, dict], Awaitable[str]]
ResolveAlias = Callable[[str], Awaitable[str | None]]
Status = Callable[[str, str], Awaitable[Reply]]  # (room, asker) -> reply


@dataclass(frozen=True, slots=True)
class Searched:
    """A search the reply answered: what the moderators' report counts (bot.py)."""

    texts: tuple[str, ...]
    hits: int  # 0: "nothing matches"


# (the command, the reply's event id, the search) -> None, after the send
OnSearched = Callable[[MessageEvent, str, Searched], Awaitable[None]]
# (reply event id, sections, ms when its send began) -> artifacts added
RecordAnswer = Callable[[str, list[EmittedSection], int], int]
LAST_QUERIES_KEPT = 1000  # per (room, user), in memory only, for `!sources why N`
SEARCH_THREADS = 2  # the machine's cores; more searches at once only queue on them
SEND_RETRY_FOR = 3600.0  # seconds a reply waits for an unreachable homeserver
SEND_RETRY_MAX = 60.0
FAILED = "Sorry, that failed on my side. The error is logged; please try again later."


@dataclass
class RateLimiter:
    per_minute: int
    clock: Clock = REAL
    _seen: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))

    def retry_after(self, user: str) -> float:
        """0 if the user may ask now (and records the ask), else seconds to wait."""
        if self.per_minute <= 0:
            return 0.0
        now = self.clock.now()
        q = self._seen[user]
        while q and now - q[0] >= 60:
            q.popleft()
        if len(q) >= self.per_minute:
            return 60 - (now - q[0])
        q.append(now)
        return 0.0


class SearchPort(Protocol):
    """What the responder asks of the searcher (indexer/search/searcher.Searcher)."""

    def search_with_closest(self, query: SourceQuery) -> tuple[list[Hit], Hit | None]:
        """The hits, and when the floor left none, the closest one below it."""
        ...

    def floor_for(self, texts: Sequence[str]) -> QueryFloor | None:
        """The floor `why 1` explains after "nothing matches", as the search judged."""
        ...


@dataclass
class Responder:
    searcher: SearchPort
    send: Send  # (room_id, content) -> event id
    bot_user: str
    default_top_k: int = 5
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter(6))
    domain: str | None = None
    resolve_alias: ResolveAlias | None = None
    rrf_k: int = 60
    status: Status | None = None
    report: Status | None = None  # `!sources report`: the room's moderators (bot.py)
    on_searched: OnSearched | None = None
    # (sender, undo) -> the reply: `!sources forget me` / `index me` (bot.py)
    forget_me: Callable[[str, bool], Awaitable[Reply]] | None = None
    on_search_seconds: Callable[[float], None] | None = None
    # room (None: all) -> messages stored but not indexed yet: "nothing matches" says so
    pending: Callable[[str | None], int] | None = None
    # texts -> what "nothing matches" adds ('' for nothing): an English-only model's
    # note for a question in another language (indexer/search/language.py)
    language_note: Callable[[Sequence[str]], str] | None = None
    answered: int = 0
    # (room, user) -> (distinct texts, hits) of the last query; never written to disk.
    _last: OrderedDict = field(default_factory=OrderedDict)
    # (reply event id, sections) -> artifacts added; called after the send returned.
    record_answer: RecordAnswer | None = None
    # (reply id, room, command id, thread root, reply) -> None: what the reply quoted, by
    # event id, so a later redaction can edit it (indexer/store/answers.py). After the send.
    record_quotes: Callable[[str, str, str, str | None, Reply], None] | None = None
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="search")
    )
    clock: Clock = REAL  # the search's duration, the waits of a reply, its send stamp
    # Whether a failed send means the homeserver is down (wait for it), not this reply
    # refused: the homeserver side's judgement (roomstate.is_outage), through the Bot.
    is_outage: Callable[[BaseException], bool] = lambda e: isinstance(
        e, (ConnectionError, TimeoutError)
    )

    async def answer(self, ev: MessageEvent) -> Reply | None:
        m = ev.message
        if m.sender == self.bot_user:
            return None
        searched: Searched | None = None
        try:
            reply, searched = await self._reply_for(ev)
        except Exception:
            log.exception("answer_failed", extra={"room_id": m.room_id, "event_id": m.event_id})
            reply = render_error(FAILED)
        content = reply.content(in_reply_to=m.event_id, thread_root=ev.thread_root)
        sent_ms = self.clock.now_ms()  # nobody can paste the reply before this
        event_id = await self._send_when_up(m.room_id, m.event_id, content)
        self.answered += 1
        if self.on_searched is not None and searched is not None:
            try:
                await self.on_searched(ev, event_id, searched)
            except Exception:
                log.exception(
                    "feedback_record_failed", extra={"room_id": m.room_id, "event_id": event_id}
                )
        if self.record_answer is not None and reply.sections:
            await self._record_answer(m.room_id, event_id, reply, sent_ms)
        if self.record_quotes is not None and reply.hits:
            try:
                await asyncio.to_thread(
                    self.record_quotes, event_id, m.room_id, m.event_id, ev.thread_root, reply
                )
            except Exception:
                log.exception(
                    "quotes_record_failed", extra={"room_id": m.room_id, "event_id": event_id}
                )
        return reply

    async def say(self, ev: MessageEvent, reply: Reply) -> str:
        """Reply to a command with `reply` as it is (no search)."""
        m = ev.message
        return await self._send_when_up(
            m.room_id, m.event_id, reply.content(in_reply_to=m.event_id, thread_root=ev.thread_root)
        )

    async def _send_when_up(self, room_id: str, command_id: str, content: dict) -> str:
        """Send, and while the homeserver is unreachable keep trying (backoff doubling,
        capped) for SEND_RETRY_FOR seconds: a command that came just before an outage
        is answered when it ends."""

        def waiting(e: Exception, delay: float) -> None:
            log.warning(
                "reply_waiting_for_homeserver",
                exc_info=e,
                extra={"room_id": room_id, "event_id": command_id, "retry_in": delay},
            )

        return await retrying(
            lambda: self.send(room_id, content),
            retry_if=self.is_outage,
            initial=1.0,
            maximum=SEND_RETRY_MAX,
            give_up_after=SEND_RETRY_FOR,
            on_retry=waiting,
            clock=self.clock,
        )

    async def _record_answer(self, room_id: str, event_id: str, reply: Reply, sent_ms: int) -> None:
        """The reply is sent (committed): now what it quoted becomes answer artifacts, so
        a paste of it back into a room is derived text, not evidence. They are dated
        when the send began, or a paste that arrived before this record could pass."""
        assert self.record_answer is not None  # called only when there is one
        try:
            added = await asyncio.to_thread(
                self.record_answer, event_id, list(reply.sections), sent_ms
            )
        except Exception:
            log.exception("answer_record_failed", extra={"room_id": room_id, "event_id": event_id})
            return
        log.info(
            "answer_recorded",
            extra={
                "room_id": room_id,
                "event_id": event_id,
                "sections": len(reply.sections),
                "artifacts": added,
            },
        )

    async def _reply_for(self, ev: MessageEvent) -> tuple[Reply, Searched | None]:
        """The reply, and the search it answers (None: no search ran)."""
        m = ev.message
        try:
            cmd = parse_command(m.body, m.room_id, self.default_top_k)
        except CommandError as e:
            return render_error(str(e)), None
        if isinstance(cmd, HelpCommand):
            return render_help(HELP), None
        if isinstance(cmd, WhyCommand):
            return self._why(m.room_id, m.sender, cmd.n), None
        if isinstance(cmd, (StatusCommand, ReportCommand)):
            answer = self.status if isinstance(cmd, StatusCommand) else self.report
            if answer is None:
                return render_error(f"`{COMMAND_PREFIX} {cmd.word}` is not available here."), None
            return await answer(m.room_id, m.sender), None
        if isinstance(cmd, ForgetMeCommand):
            if self.forget_me is None:
                return render_error("Forgetting is not available here."), None
            return await self.forget_me(m.sender, cmd.undo), None  # the sender: nobody else
        return await self._search(m, cmd)

    async def _search(self, m: Message, cmd: SearchCommand) -> tuple[Reply, Searched | None]:
        query = cmd.query
        if cmd.room_alias is not None:
            room_id = await self.resolve_alias(cmd.room_alias) if self.resolve_alias else None
            if room_id is None:
                return render_error(
                    f"I can't find the room {cmd.room_alias}; "
                    "check the alias or use the room id (!...)."
                ), None
            query = replace(query, room_id=RoomID(room_id))
        wait = self.limiter.retry_after(m.sender)
        if wait > 0:
            return render_error(
                f"You have asked a lot in the last minute; try again in {math.ceil(wait)} s."
            ), None
        started = self.clock.now()
        hits, closest = await asyncio.get_running_loop().run_in_executor(
            self.executor, self.searcher.search_with_closest, query
        )
        took = self.clock.now() - started
        if self.on_search_seconds:
            self.on_search_seconds(took)
        log.info(
            "query_answered",
            extra={
                "room_id": m.room_id,
                "event_id": m.event_id,
                "texts": len(query.texts),
                "hits": len(hits),
                "ms": int(took * 1000),
            },
        )
        self._remember(m.room_id, m.sender, tuple(dict.fromkeys(query.texts)), hits, closest)
        pending = 0 if hits or self.pending is None else self.pending(query.room_id)
        note = "" if hits or self.language_note is None else self.language_note(query.texts)
        return (
            render_hits(
                hits,
                query.texts,
                self.domain,
                room=query.room_id is not None,
                pending=pending,
                nothing_note=note,
            ),
            Searched(query.texts, len(hits)),
        )

    def _remember(
        self,
        room_id: str,
        user: str,
        texts: tuple[str, ...],
        hits: list[Hit],
        closest: Hit | None = None,
    ) -> None:
        key = (room_id, user)
        self._last[key] = (texts, hits, closest)
        self._last.move_to_end(key)
        while len(self._last) > LAST_QUERIES_KEPT:
            self._last.popitem(last=False)

    def _why(self, room_id: str, user: str, n: int) -> Reply:
        last = self._last.get((room_id, user))
        if last is None:
            return render_error("Ask something first; then `!sources why 1` explains hit 1.")
        texts, hits, closest = last
        if not hits and closest is not None:  # "nothing matches": why 1 is the closest
            if n != 1:
                return render_error(
                    "Your last query had no hits; `!sources why 1` explains the closest one."
                )
            return render_why(1, closest, texts, self.rrf_k, self.searcher.floor_for(texts))
        if not 1 <= n <= len(hits):
            return render_error(
                (
                    "Your last query had 1 hit; `!sources why 1` explains it."
                    if len(hits) == 1
                    else f"Your last query had {len(hits)} hits; ask about 1 to {len(hits)}."
                )
                if hits
                else "Your last query had no hits to explain."
            )
        return render_why(n, hits[n - 1], texts, self.rrf_k)
