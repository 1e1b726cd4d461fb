"""The transaction endpoint, taken over from mautrix (DESIGN.md, Data flow).

mautrix answers 200 even when a handler raised and remembers transaction ids only in
memory. Here a 200 means the events that passed the gate are durably in the event log,
together with the transaction id, so a replay (also after a restart) is answered 200
and not processed again, and a failed append answers 500 so Synapse retries.

A transaction is known by its id *and* the ids of its events. Synapse on SQLite numbers
transactions from max(txn_id) of its pending-transactions table, which is empty once
all were delivered, so after a Synapse restart the ids start again at 1 (checked on
1.163). A true retry resends the same events under the same id; a reused id carries
new events and must be processed, or those messages would be silently dropped.

    PUT /_matrix/app/v1/transactions/{txnId}
      no token -> 401 M_UNAUTHORIZED; wrong token -> 403 M_FORBIDDEN
      body over what Synapse may send -> 413; not JSON, too deep -> 400 M_NOT_JSON
      body not a JSON object with an `events` list -> 400 M_BAD_JSON
      txn seen -> 200 {}
      room's join rule unknown -> fetch its state:
          homeserver unreachable -> 503 (Synapse retries the whole transaction)
          the homeserver does not show it to the bot (a push racing the join) -> its
              messages held as below, its state events (the bot's membership) admitted
          this room's state fails, or takes over STATE_FETCH_SECONDS -> its events
              refused for now (journal: state_unavailable, ids only), fetched again
              later (roomstate.StateRetry; meanwhile not fetched per transaction), the
              rest goes on: one room never holds back the others
      each event parsed once: `!sources` commands and the bot's invites routed to
          the bot, the rest to ingest; commands kept in the event log until answered
          (indexer/store/commands.py), so a crash loses none, and handed to the bot
          at once, before the transaction waits for the one ahead of it; one seen
          before is not routed again; reactions go to the bot only (votes on its
          answers, once the transaction is stored), redactions to both
      the backlog at index.max_pending (backlog.py) and the transaction adds to it
          (a message, edit or redaction not the bot's) -> 503 M_LIMIT_EXCEEDED: Synapse
          keeps the events and retries; the commands are taken all the same
      gate + append (one SQLite transaction with the txn id) -> 200 {} / 500

Every SQLite call runs in a worker thread: the loop only moves bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from aiohttp import web

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.ingest.admit import AdmitResult, Ingest
from matrix_sources.indexer.ingest.events import (
    EditEvent,
    MessageEvent,
    ReactionEvent,
    RedactionEvent,
    StateEvent,
    parse_event,
)
from matrix_sources.indexer.ingest.gate import STATE_UNAVAILABLE
from matrix_sources.indexer.records import EventID, Refusal, RoomID
from matrix_sources.indexer.store.commands import CommandLog

from .backlog import BacklogBound
from .httpauth import same_token
from .httpbody import (
    MAX_PING_BYTES,
    MAX_TRANSACTION_BYTES,
    BodyError,
    bearer,
    error,
    read_json_object,
)
from .roomstate import is_outage
from .txngaps import TransactionGaps

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Routed:
    """What of a transaction is for the bot, parsed: its commands, the rooms the bot was
    invited to, the reactions (votes on its answers, maybe) and what was redacted (a
    vote or a question withdrawn)."""

    commands: tuple[MessageEvent, ...] = ()
    invites: tuple[str, ...] = ()
    reactions: tuple[ReactionEvent, ...] = ()
    redacted: tuple[EventID, ...] = ()


OnAdmitted = Callable[[list[dict], AdmitResult, Routed], None]
FetchState = Callable[[str], Awaitable[None]]
STATE_FETCH_SECONDS = 15.0  # Synapse gives a transaction 60 s


class Retry(Protocol):
    """Rooms whose state is to be fetched again later (roomstate.StateRetry)."""

    @property
    def waiting(self) -> set[str]: ...

    def add(self, room_id: str) -> None: ...


def fingerprint(events: list) -> str:
    ids = [ev.get("event_id") if isinstance(ev, dict) else None for ev in events]
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def _room_of(raw: object) -> str | None:
    rid = raw.get("room_id") if isinstance(raw, dict) else None
    return rid if isinstance(rid, str) else None


def route(events: list, bot_user: str) -> tuple[list[tuple[object, object]], Routed]:
    """Each event parsed once: (raw, parsed) pairs for ingest, and what the bot takes."""
    rest: list[tuple[object, object]] = []
    commands: list[MessageEvent] = []
    invites: list[str] = []
    reactions: list[ReactionEvent] = []
    redacted: list[EventID] = []
    for raw in events:
        ev = parse_event(raw)
        if isinstance(ev, MessageEvent) and ev.is_command:
            commands.append(ev)  # answered wherever it comes from, never stored
            continue
        if isinstance(ev, ReactionEvent):
            if ev.sender != bot_user:
                reactions.append(ev)  # never stored as an event: a vote, or nothing
            continue
        if isinstance(ev, RedactionEvent):
            redacted.append(ev.target)  # and to ingest: the message's own redaction
        if (
            isinstance(ev, StateEvent)
            and ev.type == "m.room.member"
            and ev.state_key == bot_user
            and ev.content.get("membership") == "invite"
        ):
            invites.append(ev.room_id)  # a state event too: ingest still folds it
        rest.append((raw, ev))
    return rest, Routed(tuple(commands), tuple(invites), tuple(reactions), tuple(redacted))


def adds_work(rest: list[tuple[object, object]], bot_user: str) -> bool:
    """Whether admitting these events could add to the indexing backlog: a message, an
    edit or a redaction from anyone but the bot. The rest (the bot's own replies, state,
    commands) is taken even when the backlog is full: refused, it would hold back in
    Synapse's queue the transactions behind it, and with them the next `!sources`."""
    for _, ev in rest:
        if isinstance(ev, MessageEvent) and ev.message.sender != bot_user:
            return True
        if isinstance(ev, (EditEvent, RedactionEvent)) and ev.sender != bot_user:
            return True
    return False


class TransactionHandler:
    def __init__(
        self,
        hs_token: str,
        registration_id: str,
        ingest: Ingest,
        fetch_state: FetchState,
        on_admitted: OnAdmitted,
        retry: Retry | None = None,
        gaps: TransactionGaps | None = None,
        commands: CommandLog | None = None,
        backlog: BacklogBound | None = None,
        clock: Clock = REAL,
    ) -> None:
        """`commands`: where commands are kept until answered (None: in memory only);
        `backlog`: the bound on pending events (None: none); `clock`: its wall clock
        stamps kept commands."""
        self._hs_token = hs_token.encode()
        self._registration_id = registration_id
        self._ingest = ingest
        self._fetch_state = fetch_state
        self._on_admitted = on_admitted
        self._retry = retry
        self._gaps = gaps  # a numbered transaction that never comes (txngaps.py)
        self._commands, self._backlog, self._clock = commands, backlog, clock
        # Synapse sends one transaction at a time; a lock keeps it so for anyone else.
        self._lock = asyncio.Lock()
        self.received = 0
        self.replayed = 0
        # Appends failed in a row (0 after one that worked): /health says so.
        self.append_failures = 0

    def check_token(self, request: web.Request) -> web.Response | None:
        token = bearer(request, query=True)
        if token is None:
            return error(401, "M_UNAUTHORIZED", "missing hs_token")
        if not same_token(token, self._hs_token):
            return error(403, "M_FORBIDDEN", "wrong hs_token")
        return None

    async def ping(self, request: web.Request) -> web.Response:
        """POST /_matrix/app/v1/ping: the homeserver checking it can reach us."""
        denied = self.check_token(request)
        if denied is not None:
            return denied
        try:
            body = await read_json_object(request, MAX_PING_BYTES)
        except BodyError as e:
            return e.response
        txn = body.get("transaction_id")
        log.info("ping", extra={"txn": txn if isinstance(txn, str) else None})
        return web.json_response({})

    async def handle(self, request: web.Request) -> web.Response:
        denied = self.check_token(request)
        if denied is not None:
            return denied
        txn_id = request.match_info.get("transaction_id", "")
        try:
            body = await read_json_object(request, MAX_TRANSACTION_BYTES)
        except BodyError as e:
            log.warning("transaction_refused", extra={"txn": txn_id, "status": e.response.status})
            return e.response
        events = body.get("events", [])
        if not isinstance(events, list):
            return error(400, "M_BAD_JSON", "events must be a list")
        txn_key = f"{self._registration_id}:{txn_id}:{fingerprint(events)}"
        rest, routed = route(events, self._ingest.gate.bot_user)
        if routed.commands and self._commands is not None:
            # Kept (once: a transaction sent again keeps none) and answered at once,
            # before the lock: a `!sources` does not wait for other transactions' ingest
            # (issue 26: people before the indexer), and a crash after keeping loses none.
            try:
                routed = await asyncio.to_thread(self._keep_commands, routed)
            except Exception:
                self.append_failures += 1
                log.exception("commands_keep_failed", extra={"txn": txn_id})
                return error(500, "M_UNKNOWN", "could not store the transaction; retry")
            self._route_commands(routed)
            routed = replace(routed, commands=())
        async with self._lock:
            self.received += 1
            if await asyncio.to_thread(self._ingest.eventlog.has_txn, txn_key):
                self.replayed += 1
                if self._gaps is not None:
                    self._gaps.answered(txn_id)
                return web.json_response({})
            try:
                unavailable, hidden = await self._learn_rooms(events, txn_id)
            except _Outage:
                return error(503, "M_UNKNOWN", "homeserver unreachable; retry later")
            if (
                self._backlog is not None
                and self._backlog.full
                and adds_work(rest, self._ingest.gate.bot_user)
            ):
                self._backlog.refuse()
                return error(
                    503,
                    "M_LIMIT_EXCEEDED",
                    f"indexing is {self._backlog.latest.pending} messages behind; retry later",
                    retry_after_ms=5000,
                )
            admitted, deferred = _partition(rest, unavailable, hidden)
            try:
                result = await asyncio.to_thread(self._admit, admitted, deferred, txn_key)
            except Exception:
                self.append_failures += 1
                log.exception("append_failed", extra={"txn": txn_id, "events": len(events)})
                return error(500, "M_UNKNOWN", "could not store the transaction; retry")
            self.append_failures = 0
            if self._backlog is not None:
                self._backlog.appended(result.appended)
            if self._gaps is not None:
                self._gaps.answered(txn_id)
        log.info(
            "transaction",
            extra={
                "txn": txn_id,
                "events": len(events),
                "appended": result.appended,
                "refused": sum(result.refused.values()),
                "deferred": len(deferred),
            },
        )
        late = {id(raw) for raw, _ in deferred}
        self._on_admitted([raw for raw in events if id(raw) not in late], result, routed)
        if self._retry is not None:
            for room_id in sorted(unavailable | hidden):
                self._retry.add(room_id)
        return web.json_response({})

    async def _learn_rooms(self, events: list, txn_id: str) -> tuple[set[str], set[str]]:
        """Fetch the state of every allowlisted room whose join rule is not known yet;
        (the rooms whose state could not be had, the homeserver answering otherwise;
        those whose state it does not show the bot yet). Raises _Outage when the
        homeserver is unreachable."""
        unavailable: set[str] = set()
        hidden: set[str] = set()
        waiting = self._retry.waiting if self._retry is not None else set()
        for room_id in sorted(self._ingest.unknown_rooms(events)):
            if room_id in waiting:  # failed before, fetched again on its own schedule
                unavailable.add(room_id)
                continue
            try:
                async with self._clock.timeout(STATE_FETCH_SECONDS) as deadline:
                    await self._fetch_state(room_id)
                if not self._ingest.settled(room_id) and not self._ingest.sent_away.get(room_id):
                    # The homeserver does not show the bot the room (yet: a push racing
                    # its join). Its messages are held, not judged private on facts we
                    # lack; its state events (the bot's own membership) still count.
                    log.warning("room_state_hidden", extra={"txn": txn_id, "room_id": room_id})
                    hidden.add(room_id)
            except Exception as e:
                if is_outage(e) and not deadline.expired():
                    log.warning(
                        "homeserver_unreachable",
                        exc_info=True,
                        extra={"txn": txn_id, "room_id": room_id},
                    )
                    raise _Outage() from e
                log.error(
                    "room_state_unavailable",
                    exc_info=True,
                    extra={"txn": txn_id, "room_id": room_id},
                )
                unavailable.add(room_id)
        return unavailable, hidden

    def _route_commands(self, routed: Routed) -> None:
        """Kept commands go to the bot now, once, whatever becomes of the transaction."""
        if routed.commands and self._commands is not None:
            self._on_admitted([], AdmitResult(), Routed(commands=routed.commands))

    def _keep_commands(self, routed: Routed) -> Routed:
        """In a worker thread: the commands kept before the answer; those kept before
        (the transaction sent again) are not routed again."""
        assert self._commands is not None
        new = self._commands.keep(
            [(c.message, c.thread_root) for c in routed.commands], self._clock.now_ms()
        )
        return replace(
            routed, commands=tuple(c for c in routed.commands if c.message.event_id in new)
        )

    def _admit(self, events: list, deferred: list, txn_key: str) -> AdmitResult:
        """In a worker thread: gate and append with the transaction id, then journal the
        deferred events (ids only; once, as a replay is not processed again)."""
        result = self._ingest.admit_parsed([ev for _, ev in events], txn_key)
        for ev, _ in deferred:
            eid = ev.get("event_id")
            self._ingest.journal.refusal(
                Refusal(
                    STATE_UNAVAILABLE,
                    RoomID(_room_of(ev) or ""),
                    EventID(eid) if isinstance(eid, str) else None,
                )
            )
        return result


def _partition(events: list, unavailable: set[str], hidden: set[str]) -> tuple[list, list]:
    """(events to admit now, events of rooms whose state is unavailable, and all but
    the state events of rooms whose state is hidden), as (raw, parsed) pairs."""
    if not unavailable and not hidden:
        return events, []
    admitted: list = []
    deferred: list = []
    for pair in events:
        room = _room_of(pair[0])
        held = room in unavailable or (room in hidden and not isinstance(pair[1], StateEvent))
        (deferred if held else admitted).append(pair)
    return admitted, deferred


class _Outage(Exception):
    """The homeserver did not answer: the whole transaction is to be retried."""
