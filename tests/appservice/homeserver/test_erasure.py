"""Synapse erasures reaching the index (appservice/homeserver/erasure.py), against a
stand-in for Synapse's admin API on a fake clock (issue 44 item 4): erasure does not
depend on when the user last left. A leave asks again whenever it comes; a bounded,
paged look at the deactivated users, at start and then at an interval, finds the
erasures no leave shows."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestServer

from matrix_sources.appservice.homeserver.erasure import (
    PAGE_SIZE,
    PAGES_PER_ROUND,
    POLL_INTERVAL_S,
    RETRY_AFTER_S,
    ErasureWatch,
)
from matrix_sources.indexer.clock import Clock
from tests.fakeclock import FakeClock

TOKEN = "admin-token"


class FakeSynapse:
    """GET /_synapse/admin/v2/users/<id> and /_synapse/admin/v3/users?deactivated=true,
    as Synapse answers them; what was asked, recorded."""

    def __init__(self) -> None:
        self.deactivated: dict[str, bool] = {}  # user -> erased
        self.asked_user: list[str] = []
        self.pages: list[int] = []  # the `from` of each page asked for

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/_synapse/admin/v2/users/{user}", self.user)
        app.router.add_get("/_synapse/admin/v3/users", self.users)
        return app

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {TOKEN}"

    async def user(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"errcode": "M_FORBIDDEN"}, status=403)
        user = request.match_info["user"]
        self.asked_user.append(user)
        return web.json_response(
            {
                "name": user,
                "deactivated": user in self.deactivated,
                "erased": self.deactivated.get(user, False),
            }
        )

    async def users(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"errcode": "M_FORBIDDEN"}, status=403)
        assert request.query["deactivated"] == "true"
        start, limit = int(request.query.get("from", 0)), int(request.query["limit"])
        assert limit <= PAGE_SIZE
        self.pages.append(start)
        names = sorted(self.deactivated)
        body: dict = {
            "users": [
                {"name": n, "deactivated": True, "erased": self.deactivated[n]}
                for n in names[start : start + limit]
            ],
            "total": len(names),
        }
        if start + limit < len(names):
            body["next_token"] = str(start + limit)
        return web.json_response(body)


class World:
    def __init__(self) -> None:
        self.synapse = FakeSynapse()
        self.clock = FakeClock(1000.0)
        self.forgotten: list[str] = []

    async def __aenter__(self) -> World:
        self.server = TestServer(self.synapse.app())
        await self.server.start_server()

        async def on_erased(user: str) -> None:
            self.forgotten.append(user)

        self.watch = ErasureWatch(
            str(self.server.make_url("/")),
            TOKEN,
            on_erased,
            forgotten=lambda u: u in self.forgotten,
            clock=Clock(self.clock, self.clock.sleep),
        )
        return self

    async def __aexit__(self, *exc) -> None:
        await self.watch.stop()
        await self.server.close()

    async def until(self, cond) -> None:
        """Until `cond` holds: the local HTTP server answers in real time, the test
        sleeps none (10 s at most)."""

        async def spin() -> None:
            while not cond():
                await asyncio.sleep(0)

        await asyncio.wait_for(spin(), 10)

    def checks_asleep(self) -> bool:
        running = sum(1 for t in self.watch._tasks if not t.done())
        return self.clock.sleeping == running


async def test_a_deactivation_after_an_earlier_leave_is_still_seen():
    """Issue 44: erin left and rejoined; the check after that leave found her not erased.
    Deactivated 40 s later (erase: true), her parting is asked about again, at once."""
    async with World() as w:
        w.watch.saw_leaves({"@erin:hs"})
        for i, wait in enumerate(RETRY_AFTER_S):  # not erased: asked at 0, 5 and 30 s
            await w.until(lambda n=i + 1: len(w.synapse.asked_user) == n and w.checks_asleep())
            await w.clock.advance(wait)
        await w.until(lambda: not w.watch._tasks)  # then left alone
        assert w.synapse.asked_user == ["@erin:hs"] * 3 and w.forgotten == []
        await w.clock.advance(10.0)  # 40 s after the leave: deactivated with erase
        w.synapse.deactivated["@erin:hs"] = True
        w.watch.saw_leaves({"@erin:hs"})
        await w.until(lambda: not w.watch._tasks)
        assert w.forgotten == ["@erin:hs"]


async def test_the_burst_of_leaves_of_one_deactivation_asks_once():
    async with World() as w:
        w.synapse.deactivated["@erin:hs"] = True
        for _ in range(50):  # one leave per room, in transactions of their own
            w.watch.saw_leaves({"@erin:hs"})
        await w.until(lambda: not w.watch._tasks)
        assert w.synapse.asked_user == ["@erin:hs"] and w.forgotten == ["@erin:hs"]
        w.watch.saw_leaves({"@erin:hs"})  # forgotten already: nothing to ask
        assert not w.watch._tasks


async def test_the_watch_catches_up_at_start_and_looks_again_at_an_interval():
    """Erasures no leave shows (made while the service was down, or of a user who had
    left every room before): found at start, then at every interval."""
    async with World() as w:
        w.synapse.deactivated.update({"@gone:hs": True, "@quiet:hs": False})
        watching = asyncio.create_task(w.watch.watch())
        await w.until(lambda: w.clock.sleeps == [POLL_INTERVAL_S] and w.clock.sleeping)
        assert w.forgotten == ["@gone:hs"] and w.synapse.pages == [0]
        w.synapse.deactivated["@later:hs"] = True
        await w.clock.advance(POLL_INTERVAL_S - 1)
        assert w.forgotten == ["@gone:hs"] and w.synapse.pages == [0]  # not yet
        await w.clock.advance(1)
        await w.until(lambda: len(w.clock.sleeps) == 2 and w.clock.sleeping)
        assert w.forgotten == ["@gone:hs", "@later:hs"]  # the forgotten one not again
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


async def test_each_round_reads_a_bounded_number_of_pages_and_goes_on_from_there():
    async with World() as w:
        n = PAGE_SIZE * PAGES_PER_ROUND + PAGE_SIZE // 2  # a round and a half of pages
        w.synapse.deactivated.update({f"@u{i:05d}:hs": i % 7 == 0 for i in range(n)})
        assert await w.watch.poll_round() == len(
            [i for i in range(n - PAGE_SIZE // 2) if i % 7 == 0]
        )
        assert len(w.synapse.pages) == PAGES_PER_ROUND
        await w.watch.poll_round()  # the rest, then back to the first page
        assert len(w.synapse.pages) == PAGES_PER_ROUND + 1
        assert sorted(w.forgotten) == sorted(u for u, e in w.synapse.deactivated.items() if e)
        await w.watch.poll_round()
        assert w.synapse.pages[-PAGES_PER_ROUND] == 0


async def test_a_refused_token_is_logged_and_forgets_nobody(caplog):
    async with World() as w:
        w.synapse.deactivated["@gone:hs"] = True
        w.watch = ErasureWatch(
            str(w.server.make_url("/")),
            "wrong",
            w.watch._on_erased,
            clock=Clock(w.clock, w.clock.sleep),
        )
        assert await w.watch.poll_round() == 0 and w.forgotten == []
        assert any(r.msg == "erasure_check_refused" and r.status == 403 for r in caplog.records)
