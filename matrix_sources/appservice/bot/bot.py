"""The bot: everything `!sources` does, apart from the plumbing that speaks Matrix.

    transaction (appservice/homeserver) --routed, typed--> Bot
        commands   -> a bounded pool -> Responder -> reply (m.notice) -> its text
                      dropped from the event log (kept there from the transaction on:
                      indexer/store/commands.py); at start, one a crash left unanswered
                      is answered, or, taken over RESTARTED_AFTER_S ago, told so
        invites    -> join (a DM or a private room: people ask from there; the gate
                      stores nothing of it)
        withdrawn  -> every reply that quoted a withdrawn message (redaction, forget,
                      retention) edited without it, and its answer artifacts renewed
        feedback   -> a search answered in an indexed room, the votes (👍 👎 ✅) on the
                      answers, the redactions withdrawing either: written to the event
                      log's feedback tables by one thread of their own, a batch per
                      transaction (indexer/store/eventlog/feedback.py)

The bot reaches Matrix only through `Matrix`, a port the homeserver side fills in
(appservice/cli/serve.py wires the two); neither side imports the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.ingest.events import MessageEvent, ReactionEvent
from matrix_sources.indexer.ingest.followed import load_followed
from matrix_sources.indexer.ingest.forget import Forgetting
from matrix_sources.indexer.ingest.reactions import votes
from matrix_sources.indexer.moderation.report import DAY_MS, Report, build_report, same_question
from matrix_sources.indexer.records import EventID, RoomID, UserID
from matrix_sources.indexer.search.language import english_only_note
from matrix_sources.indexer.store.eventlog.feedback import Asked, FeedbackTables, Reaction

from .answer_edits import WithdrawnLately, edit_replies
from .commandpool import CommandPool
from .commands import CommandError, SearchCommand, parse_command
from .digest import Digest, expire_feedback
from .replies import Reply, render_notice
from .report import render_notice as render_report
from .report import report_refusal
from .responder import RateLimiter, Responder, Searched
from .status import may_see_status, power_from_state, render_status, status_refusal

log = logging.getLogger(__name__)

# A command a crash left unanswered for longer than this is not answered after the
# restart (the asker has moved on, or asked again): the bot says it restarted.
RESTARTED_AFTER_S = 60.0
# At stop, the answers under way may finish this long (inside a container's 10 s): one
# whose reply the homeserver took but that was not yet marked answered would be
# answered twice, again after the restart.
STOP_GRACE_S = 5.0
RESTARTED = "Sorry, I restarted before I could answer this. Please ask again if you still need it."
REPORT_DAYS = 7  # what `!sources report` covers


class Matrix(Protocol):
    """What the bot asks of the homeserver."""

    async def send(self, room_id: str, content: dict) -> str: ...
    async def join(self, room_id: str) -> None: ...
    async def room_state(self, room_id: str) -> list: ...
    async def resolve_alias(self, alias: str) -> str | None: ...
    async def event_body(self, room_id: str, event_id: str) -> str | None: ...
    def is_outage(self, exc: BaseException) -> bool: ...


class Bot:
    def __init__(
        self,
        cfg: Config,
        index: Index,
        matrix: Matrix,
        on_search_seconds: Callable[[float], None] | None = None,
        index_changed: Callable[[], None] = lambda: None,
        clock: Clock = REAL,
        on_question: Callable[[str, int], None] | None = None,
        on_votes: Callable[[list[Reaction]], None] | None = None,
    ) -> None:
        """`index_changed`: windows to re-chunk (a forget): the service's worker runs;
        `clock`: the rate limit, a reply's waits and stamps, the wall clock kept commands
        and feedback are stamped with, and the digest's schedule; `on_question(room,
        hits)` and `on_votes(votes)`: what the report counts, as it is kept (the metrics)."""
        self.cfg, self.index, self.matrix = cfg, index, matrix
        self.index_changed = index_changed
        self.kept = index.commands  # CommandLog; None: not kept
        # The moderators' report (eventlog/feedback.py); None: nothing kept.
        self.feedback: FeedbackTables | None = index.eventlog.feedback
        # Its writes, in order, on one thread: never the loop, never the default pool
        # that admitting transactions uses (a flood of votes must not delay a 200).
        self._writes = ThreadPoolExecutor(1, thread_name_prefix="feedback")
        self._clock = clock
        self._on_question, self._on_votes = on_question, on_votes
        self.responder = Responder(
            index.searcher,
            matrix.send,
            cfg.bot_user,
            cfg.search.default_top_k,
            RateLimiter(cfg.search.rate_limit_per_minute, clock),
            domain=cfg.homeserver.domain,
            resolve_alias=matrix.resolve_alias,
            rrf_k=cfg.search.rrf_k,
            status=self._status,
            on_search_seconds=on_search_seconds,
            record_answer=index.record_answer,
            record_quotes=self._record_quotes,
            is_outage=matrix.is_outage,
            forget_me=self._forget_me,
            on_searched=self._searched,
            report=self._report,
            pending=lambda room: index.eventlog.counts(None if room is None else RoomID(room)).get(
                "pending", 0
            ),
            language_note=english_only_note(index.embedder),
            clock=clock,
        )
        self.commands = CommandPool(self._answer)
        # The commands this process took before it resumed the kept ones: searches are
        # served before start-up ends, so a command taken meanwhile is kept unanswered
        # (it is under way) and must not be resumed as a crash's, answered twice. None:
        # no command is kept, so none is resumed.
        self._taken: set[str] | None = set() if self.kept is not None else None
        self._tasks: set[asyncio.Task] = set()
        self._chores: set[asyncio.Task] = set()  # for as long as the bot runs
        self._withdrawn = WithdrawnLately()
        self._loop: asyncio.AbstractEventLoop | None = None  # on_withdrawn's
        self.clock = clock
        self.digest = (
            Digest(cfg, index, matrix, self.clock, self.report)
            if cfg.moderation.digest_room
            else None
        )

    # -- what the homeserver side routes here ------------------------------------------

    def on_commands(self, commands: Iterable[MessageEvent]) -> None:
        for cmd in commands:
            if self._taken is not None:
                self._taken.add(cmd.message.event_id)
            if not self.commands.submit(cmd):  # dropped (logged): not kept either
                self._spawn(self._answered(cmd), "command-dropped")

    async def prepare(self) -> str:
        """Before the service takes transactions: why it must not start ('' if it may):
        a digest room that is allowlisted, or unknown."""
        return await self.digest.prepare() if self.digest is not None else ""

    def resume(self) -> None:
        """At start: the commands a crash left unanswered; the digest and the expiry of
        the report's data, for as long as the bot runs."""
        if self.kept is not None:
            self._spawn(self._resume(), "commands-resume")
        if self.feedback is not None:
            self._chore(expire_feedback(self.cfg, self.feedback, self.clock), "feedback-expiry")
        if self.digest is not None:
            self._chore(self.digest.run(), "digest")

    def on_invites(self, room_ids: Iterable[str]) -> None:
        for room_id in room_ids:
            self._spawn(self._accept_invite(room_id), "accept-invite")

    def on_withdrawn(self, event_ids: Iterable[str]) -> None:
        ids = set(event_ids)
        if ids:
            self._withdrawn.add(ids)
            self._loop = asyncio.get_running_loop()
            self._spawn(
                edit_replies(
                    self.index, ids, self.matrix.send, self._question, self.cfg.homeserver.domain
                ),
                "edit-replies",
            )

    def on_reactions(self, reactions: Iterable[ReactionEvent]) -> None:
        """A transaction's reactions: the votes on the bot's answers counted, the rest
        (other keys, other messages) ignored."""
        found = votes(list(reactions), self._clock.now_ms())
        if found and self.feedback is not None:
            self._spawn(self._count_votes(found), "feedback-votes")

    def on_redacted(self, event_ids: Iterable[str]) -> None:
        """A transaction's redactions: a vote or a question they name leaves the report."""
        ids = [EventID(e) for e in event_ids]
        if ids and self.feedback is not None:
            self._spawn(self._write(self.feedback.withdraw, ids), "feedback-withdraw")

    async def idle(self) -> None:
        """Until every command taken is answered and every task spawned (votes, edits,
        invites) is done."""
        while True:
            await self.commands.join()
            if not self._tasks:
                return
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        for t in list(self._tasks | self._chores):
            t.cancel()
        await asyncio.gather(*self._tasks, *self._chores, return_exceptions=True)
        await self.commands.stop(lambda: self.clock.sleep(STOP_GRACE_S))
        self.responder.executor.shutdown(wait=True, cancel_futures=True)
        self._writes.shutdown(wait=True)  # what was taken is written

    # -- behaviour ---------------------------------------------------------------------

    async def _answer(self, cmd: MessageEvent) -> None:
        try:
            await self.responder.answer(cmd)
        finally:  # answered, or failed and said so; not when the service stops
            if not _cancelling():
                await self._answered(cmd)

    async def _answered(self, cmd: MessageEvent) -> None:
        if self.kept is not None:
            await asyncio.to_thread(self.kept.answered, cmd.message.event_id, self._clock.now_ms())

    async def _resume(self) -> None:
        now_ms = self._clock.now_ms()
        left = await asyncio.to_thread(self.kept.unanswered, now_ms)
        taken, self._taken = self._taken or set(), None
        left = [c for c in left if c.message.event_id not in taken]
        stale = [c for c in left if now_ms - c.received_at > RESTARTED_AFTER_S * 1000]
        log.info(
            "commands_resumed",
            extra={"answered_now": len(left) - len(stale), "too_old": len(stale)},
        )
        for c in left:
            cmd = MessageEvent(c.message, c.thread_root, is_command=True)
            if c in stale:
                await self.responder.say(cmd, render_notice(RESTARTED))
                await self._answered(cmd)
            else:
                self.on_commands([cmd])

    async def _write(self, call: Callable[[Any], Any], arg: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._writes, call, arg)

    async def _count_votes(self, found: list[Reaction]) -> None:
        assert self.feedback is not None
        counted = await self._write(self.feedback.react, found)
        if counted and self._on_votes is not None:
            self._on_votes(counted)

    async def _searched(self, cmd: MessageEvent, reply_event_id: str, searched: Searched) -> None:
        """A search answered: kept for the report if it was asked in an indexed room
        (a DM or a private room leaves no trace); its text only if nothing matched."""
        m = cmd.message
        if self.feedback is None or not self.index.ingest.admits(m.room_id):
            return
        text = "\n".join(dict.fromkeys(searched.texts)) if searched.hits == 0 else None
        recorded = await self._write(
            self.feedback.record,
            Asked(
                m.event_id,
                m.room_id,
                m.sender,
                self._clock.now_ms(),
                EventID(reply_event_id),
                searched.hits,
                text,
            ),
        )
        if recorded and self._on_question is not None:
            self._on_question(m.room_id, searched.hits)

    async def _accept_invite(self, room_id: str) -> None:
        try:
            await self.matrix.join(room_id)
        except Exception:
            log.warning("invite_join_failed", exc_info=True, extra={"room_id": room_id})

    def _record_quotes(
        self,
        reply_event_id: str,
        room_id: str,
        command_event_id: str,
        thread_root: str | None,
        reply,
    ) -> None:
        quoted = [sec.shown for sec in reply.sections]
        self.index.answers.record(
            reply_event_id, room_id, command_event_id, thread_root, list(reply.hits), quoted
        )
        late = self._withdrawn.among(e for ids in quoted for e in ids)
        if late and self._loop is not None:  # withdrawn while the reply was on its way
            self._loop.call_soon_threadsafe(self.on_withdrawn, late)

    async def _question(self, room_id: str, command_id: str | None) -> tuple[str, ...]:
        """The texts a command asked, read from the homeserver (the event log drops a
        command's text once it is answered); () when it is gone or unreadable."""
        if command_id is None:
            return ()
        try:
            body = await self.matrix.event_body(room_id, command_id)
        except Exception as e:
            if not self.matrix.is_outage(e):
                log.warning(
                    "command_unreadable", extra={"room_id": room_id, "event_id": command_id}
                )
            return ()
        try:
            cmd = parse_command(body, room_id) if body else None
        except CommandError:
            return ()
        return cmd.query.texts if isinstance(cmd, SearchCommand) else ()

    async def _forget_me(self, sender: str, undo: bool) -> Reply:
        """`!sources forget me`: the sender's words leave the index by the redaction path
        (text zeroed, windows re-chunked, compaction, answers edited) and what they send
        from now on is refused; `index me` admits what they send from now on."""
        forgetting = Forgetting(self.index.ingest, self._clock)
        user = UserID(sender)
        if undo:
            if await asyncio.to_thread(forgetting.unforget_user, user, "command"):
                return render_notice(
                    "From now on what you say is indexed again. What was "
                    "removed before stays removed."
                )
            return render_notice(
                "You had not asked to be forgotten: what you say in the indexed rooms is indexed."
            )
        report = await asyncio.to_thread(forgetting.forget_user, user, "command")
        self.index_changed()
        self.on_withdrawn(report.event_ids)
        n = report.total  # the whole forget: a run a crash cut off counts too
        return render_notice(
            f"Done: {n} message{'' if n == 1 else 's'} of yours removed from the index "
            f"(their text now, what was computed from them within "
            f"{self.cfg.index.compaction_interval_seconds:g} seconds), and nothing you say "
            f"from now on will be indexed. `!sources index me` undoes the second part."
        )

    async def _status(self, room_id: str, user: str):
        if not await may_see_status(room_id, user, self.cfg.search.admins, self._power_level):
            return status_refusal()
        ingest = self.index.ingest
        rooms = [(r, ingest.label(RoomID(r))) for r in sorted(self.index.gate.allowlist)]
        return await asyncio.to_thread(
            lambda: render_status(
                rooms,
                self.index.eventlog,
                self.index.journal,
                ingest.sent_away.rooms,
                load_followed(self.cfg.data_dir),  # spaces and upgrade chains
            )
        )

    async def _report(self, room_id: str, user: str) -> Reply:
        """`!sources report`: the room's report, for its moderators (as `status`)."""
        if not await may_see_status(room_id, user, self.cfg.search.admins, self._power_level):
            return report_refusal()
        if self.feedback is None or RoomID(room_id) not in self.index.gate.allowlist:
            return render_notice(
                "Nothing is counted in this room: the report covers the rooms the index reads."
            )
        label = self.index.ingest.label(RoomID(room_id))
        days = min(REPORT_DAYS, self.cfg.moderation.keep_days)
        report = await asyncio.to_thread(self.report, [(RoomID(room_id), label)], days)
        return render_report(report, self.cfg.homeserver.domain)

    def report(self, rooms: Sequence[tuple[RoomID, str]], days: float) -> Report:
        """The report over `rooms` for the last `days` (blocking: the model groups the
        unanswered questions)."""
        assert self.feedback is not None
        now = self._clock.now_ms()
        model = self.cfg.index.embedder.model
        return build_report(
            self.feedback,
            rooms,
            now - int(days * DAY_MS),
            now,
            self.index.embedder,
            same_question(model),
        )

    async def _power_level(self, room_id: str, user: str) -> int:
        # The whole state: room version 12 creators are not in power_levels.
        state = await self.matrix.room_state(room_id)
        return power_from_state(state if isinstance(state, list) else [], user)

    def _spawn(self, coro: Awaitable, name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _chore(self, coro: Awaitable, name: str) -> None:
        """A task that runs until the bot stops: not waited for by idle()."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._chores.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._chores.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task_failed", extra={"task": task.get_name()}, exc_info=task.exception())


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
