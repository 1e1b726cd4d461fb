"""The search API: `POST /_matrix_sources/v1/search` on the appservice port, for
`matrix-sources search`, `matrix-sources mcp` and programs (docs/api.md).

    Authorization: Bearer <api token>   (api.token_file, never an appservice token)
    {"texts": ["how do I rotate the signing key"], "top_k": 5, "room": "!id", "corpus": "chat"}
    -> 200 {"hits": [...]}, each hit as `matrix-sources search --json` prints it;
       with no hits, "note" too when the question does not read as English and the
       index's model reads English only (indexer/search/language.py)

Checked in this order, each answered in JSON {"errcode", "error"} (+ "field" on 400):

    no token 401 -> wrong token 403 -> not started 503 -> over the rate 429 (Retry-After)
    -> body over MAX_BODY_BYTES 413 -> not JSON, not a query 400 -> search -> 200

The token is compared in constant time and checked before the body is read, so an
unauthenticated caller costs a header's parse. Searches run in an executor of their own,
bounded, as `!sources` answers do in theirs (appservice/bot/commandpool.py): a burst of
API calls never takes the threads that transactions are stored with.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.datadir import Registration, api_token, check_api_token
from matrix_sources.indexer.records import Hit
from matrix_sources.indexer.search.query import MAX_TEXT_BYTES, MAX_TEXTS, QueryError, SourceQuery

from .httpauth import same_token
from .httpbody import BodyError, bearer, error, parse_json, read_body
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

ROUTE = "/_matrix_sources/v1/search"
# The largest valid query: 8 texts of 1,000 bytes, each character \uXXXX-escaped (6 bytes
# for 1 to 3 of UTF-8; a surrogate pair 12 for 4) is 48,000 bytes, plus the other fields.
MAX_BODY_BYTES = 64 * 1024
assert MAX_TEXTS * MAX_TEXT_BYTES * 6 + 4096 <= MAX_BODY_BYTES
NOT_READY_RETRY_SECONDS = 5
SEARCH_WORKERS = 2

Search = Callable[[SourceQuery], list[Hit]]
# What "nothing matches" adds for these texts ("" for nothing): language.english_only_note.
Note = Callable[[Sequence[str]], str]
# None when searches may run; else why not yet (the service is starting: rebuilding the
# collection, waiting for the homeserver).
Readiness = Callable[[], str | None]


def _field_error(field: str, message: str) -> web.Response:
    return web.json_response(
        {"errcode": "M_INVALID_PARAM", "error": f"{field}: {message}", "field": field}, status=400
    )


class SearchAPI:
    def __init__(
        self,
        token: str,
        search: Search,
        ready: Readiness,
        limiter: TokenBucket,
        default_top_k: int,
        clock: Clock = REAL,
        note: Note | None = None,
    ) -> None:
        self._token = token.encode()
        self.note = note
        self.search = search
        self.ready = ready
        self.limiter = limiter
        self.default_top_k = default_top_k
        self.clock = clock
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def for_service(
        cls,
        cfg: Config,
        registration: Registration,
        search: Search,
        ready: Readiness,
        clock: Clock = REAL,
        note: Note | None = None,
    ) -> SearchAPI:
        """The service's: its token from api.token_file (written when missing), refused
        if it is one of the appservice's."""
        token = api_token(cfg, create=True)
        check_api_token(cfg, token, registration)
        return cls(
            token,
            search,
            ready,
            TokenBucket(cfg.api.requests_per_minute, cfg.api.burst, clock),
            cfg.search.default_top_k,
            clock,
            note,
        )

    def attach(self, router: web.UrlDispatcher) -> None:
        router.add_post(ROUTE, self.handle)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def handle(self, request: web.Request) -> web.Response:
        given = bearer(request)
        if given is None:
            return error(
                401,
                "M_MISSING_TOKEN",
                "give the API token: Authorization: Bearer "
                "TOKEN (the file api.token_file of the service's config)",
            )
        # Only the API's token: compare_digest against it alone, never the appservice's.
        if not same_token(given, self._token):
            return error(403, "M_UNKNOWN_TOKEN", "not the API token (api.token_file)")
        waiting_for = self.ready()
        if waiting_for is not None:
            r = error(503, "M_NOT_READY", f"the service is starting: {waiting_for}")
            r.headers["Retry-After"] = str(NOT_READY_RETRY_SECONDS)
            return r
        wait = self.limiter.take("api.token_file")
        if wait > 0:
            r = web.json_response(
                {
                    "errcode": "M_LIMIT_EXCEEDED",
                    "error": f"too many searches; try again in {wait:.1f} s",
                    "retry_after_ms": math.ceil(wait * 1000),
                },
                status=429,
            )
            r.headers["Retry-After"] = str(math.ceil(wait))
            return r
        try:
            raw = await read_body(request, MAX_BODY_BYTES)  # 413 past the limit
            body = parse_json(raw)
        except BodyError as e:
            if e.response.status == 400:
                return _field_error("body", "is not JSON")
            return e.response
        try:
            query = SourceQuery.from_json(body, self.default_top_k)
        except QueryError as e:
            return _field_error(e.field, e.message)
        started = self.clock.now()
        try:
            hits = await asyncio.get_running_loop().run_in_executor(
                self._pool(), self.search, query
            )
        except Exception:
            log.exception("api_search_failed", extra={"texts": len(query.texts)})
            return error(500, "M_UNKNOWN", "the search failed; the error is in the service's log")
        log.info(
            "api_search",
            extra={
                "texts": len(query.texts),
                "top_k": query.top_k,
                "hits": len(hits),
                "ms": round((self.clock.now() - started) * 1000, 1),
            },
        )
        said = self.note(query.texts) if not hits and self.note is not None else ""
        return web.json_response(
            {"hits": [h.to_json() for h in hits], **({"note": said} if said else {})}
        )

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(SEARCH_WORKERS, thread_name_prefix="search-api")
        return self._executor
