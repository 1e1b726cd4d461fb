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
      body not a JSON object with an `events` list -> 400 M_BAD_JSON / M_NOT_JSON
      txn seen -> 200 {}
      room state unknown -> fetch it (homeserver unreachable -> 503, Synapse retries)
      gate + append (one SQLite transaction with the txn id) -> 200 {} / 500
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from typing import Awaitable, Callable

from aiohttp import web

from indexer.ingest import AdmitResult, Ingest

log = logging.getLogger("matrix_sources.transactions")

OnAdmitted = Callable[[list[dict], AdmitResult], None]
FetchState = Callable[[str], Awaitable[None]]


def _error(status: int, errcode: str, error: str) -> web.Response:
    return web.json_response({"errcode": errcode, "error": error}, status=status)


def fingerprint(events: list) -> str:
    ids = [ev.get("event_id") if isinstance(ev, dict) else None for ev in events]
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def request_token(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization")
    if auth is not None:
        return auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
    return request.rel_url.query.get("access_token")


class TransactionHandler:
    def __init__(self, hs_token: str, registration_id: str, ingest: Ingest,
                 fetch_state: FetchState, on_admitted: OnAdmitted) -> None:
        self._hs_token = hs_token.encode()
        self._registration_id = registration_id
        self._ingest = ingest
        self._fetch_state = fetch_state
        self._on_admitted = on_admitted
        # Synapse sends one transaction at a time; a lock keeps it so for anyone else.
        self._lock = asyncio.Lock()
        self.received = 0
        self.replayed = 0

    def check_token(self, request: web.Request) -> web.Response | None:
        token = request_token(request)
        if token is None:
            return _error(401, "M_UNAUTHORIZED", "missing hs_token")
        if not hmac.compare_digest(token.encode(), self._hs_token):
            return _error(403, "M_FORBIDDEN", "wrong hs_token")
        return None

    async def handle(self, request: web.Request) -> web.Response:
        denied = self.check_token(request)
        if denied is not None:
            return denied
        txn_id = request.match_info.get("transaction_id", "")
        try:
            body = await request.json(loads=json.loads)
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            return _error(400, "M_NOT_JSON", "body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "M_BAD_JSON", "body must be a JSON object")
        events = body.get("events", [])
        if not isinstance(events, list):
            return _error(400, "M_BAD_JSON", "events must be a list")
        txn_key = f"{self._registration_id}:{txn_id}:{fingerprint(events)}"
        async with self._lock:
            self.received += 1
            if self._ingest.eventlog.has_txn(txn_key):
                self.replayed += 1
                return web.json_response({})
            try:
                for room_id in sorted(self._ingest.unknown_rooms(events)):
                    await self._fetch_state(room_id)
            except Exception as e:
                log.warning("room_state_unavailable", extra={"txn": txn_id,
                                                             "error": type(e).__name__})
                return _error(503, "M_UNKNOWN", "room state unavailable; retry later")
            try:
                result = await asyncio.to_thread(self._ingest.admit, events, txn_key)
            except Exception:
                log.exception("append_failed", extra={"txn": txn_id})
                return _error(500, "M_UNKNOWN", "could not store the transaction; retry")
        log.info("transaction", extra={"txn": txn_id, "events": len(events),
                                       "appended": result.appended,
                                       "refused": sum(result.refused.values())})
        self._on_admitted(events, result)
        return web.json_response({})
