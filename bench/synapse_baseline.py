"""The baseline users have today: Synapse's own /search over the same chat.

    .venv/bin/python bench/synapse_baseline.py [--eval-dir ../shared/eval/ubuntu-irc]
                                               [--out bench/out/synapse_baseline.json]

1. Replay (once; cached under bench/out/synapse-<split>/, re-runs reuse it): a real local
   Synapse (appservice/tools/localsynapse.py) with an extra appservice registration whose
   exclusive user namespace covers the eval senders (@irc_...:eval.local becomes
   @irc_...:localhost). Its bot creates one public room per eval room, each sender is
   registered and joined, and every message is sent as its sender (`user_id=`
   masquerading) with its original time (the `ts` query parameter). Rooms go through
   a small thread pool, each room's messages in timeline order. The eval event id of
   every sent event is kept, so results map back.
2. Search: POST /_matrix/client/v3/search (room_events, the replayed rooms, 10 results,
   Synapse's default order) with the user's keywords and with the natural-language query,
   each as typed (Synapse ANDs the words) and with the words joined by ` OR `.
3. A returned event is a hit when a gold answer event lies within 3 messages of it in its
   room's timeline. Same metrics as bench/retrieval.py, printed beside ours (read from
   bench/out/retrieval.json when it is there).
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import secrets
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import evalkit  # noqa: E402

from matrix_sources.appservice.tools.localsynapse import LocalSynapse  # noqa: E402

EVAL_DOMAIN = "eval.local"
HS_DOMAIN = "localhost"
BOT = "eval-replay"
NEAR = 3  # messages either side of a returned event that a user sees
POOL = 4  # rooms replayed at once; Synapse on SQLite is the bottleneck past that
VARIANTS = ("keywords AND", "keywords OR", "query AND", "query OR")
REPLAY_FILE = "replay.json"


def registration(as_token: str, hs_token: str) -> str:
    # url: null -> Synapse pushes nothing; it only honours our token and namespace.
    return (
        f"id: eval-replay\nurl: null\nas_token: {as_token}\nhs_token: {hs_token}\n"
        f"sender_localpart: {BOT}\nrate_limited: false\nnamespaces:\n  users:\n"
        f"    - exclusive: true\n      regex: '^@irc_.*:{re.escape(HS_DOMAIN)}$'\n"
        "  aliases: []\n  rooms: []\n"
    )


def hs_user(eval_user: str) -> str:
    return eval_user.rsplit(":", 1)[0] + ":" + HS_DOMAIN


class Client:
    """The appservice's client-server calls, one keep-alive connection per thread."""

    def __init__(self, url: str, as_token: str) -> None:
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.token = u.hostname, u.port, as_token
        self._local = threading.local()

    def call(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        query: dict | None = None,
        ok_errors: tuple[str, ...] = (),
        retry: bool = True,
    ) -> dict:
        if query:
            path += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body if body is not None else {}).encode()
        for attempt in range(5):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=120
                )
            try:
                conn.request(
                    method,
                    path,
                    body=data,
                    headers={
                        "Authorization": f"Bearer {self.token}",
                        "Content-Type": "application/json",
                    },
                )
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                time.sleep(0.5 * (attempt + 1))
                continue
            out = json.loads(raw or b"{}")
            if resp.status == 200:
                return out
            if out.get("errcode") in ok_errors:
                return out
            if retry and (resp.status == 429 or resp.status >= 500):
                time.sleep(float(out.get("retry_after_ms", 500)) / 1000 * (attempt + 1))
                continue
            raise RuntimeError(f"{method} {path.split('?')[0]} -> {resp.status}: {out}")
        raise RuntimeError(f"{method} {path.split('?')[0]}: gave up after retries")


# -- replay ----------------------------------------------------------------------------


def replay(split_dir: Path, work: Path, client: Client, done: dict) -> None:
    """Send every room not yet in `done` (eval room -> {room_id, events}); each finished
    room is saved at once, so an interrupted replay resumes room by room (a half-sent
    room is abandoned and replayed into a fresh one)."""
    rooms: dict[str, dict] = {}
    for ev in evalkit.load_events(split_dir):
        r = rooms.setdefault(ev["room_id"], {"name": ev["room_id"], "messages": []})
        if ev["type"] == "m.room.name":
            r["name"] = ev["content"].get("name", r["name"])
        elif ev["type"] == "m.room.message":
            r["messages"].append(ev)
    todo = [rid for rid in rooms if rid not in done]
    if not todo:
        return
    users = sorted({hs_user(m["sender"]) for rid in todo for m in rooms[rid]["messages"]})
    total = sum(len(rooms[rid]["messages"]) for rid in todo)
    print(
        f"replaying {len(todo)} rooms, {total} messages, {len(users)} senders "
        f"into {client.host}:{client.port} (cached in {work})",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    with ThreadPoolExecutor(POOL) as pool:
        list(
            pool.map(
                lambda u: client.call(
                    "POST",
                    "/_matrix/client/v3/register",
                    {
                        "type": "m.login.application_service",
                        "username": u[1:].split(":")[0],
                        "inhibit_login": True,
                    },
                    ok_errors=("M_USER_IN_USE",),
                ),
                users,
            )
        )
    sent = [0]
    lock = threading.Lock()

    def one_room(eval_room: str) -> None:
        r = rooms[eval_room]
        room = client.call(
            "POST",
            "/_matrix/client/v3/createRoom",
            {"preset": "public_chat", "name": r["name"], "creation_content": {"m.federate": False}},
        )["room_id"]
        q = urllib.parse.quote
        for user in dict.fromkeys(hs_user(m["sender"]) for m in r["messages"]):
            client.call("POST", f"/_matrix/client/v3/join/{q(room)}", query={"user_id": user})
        events = {}
        for m in r["messages"]:
            txn = "r" + m["event_id"].lstrip("$")
            path = f"/_matrix/client/v3/rooms/{q(room)}/send/m.room.message/{q(txn, safe='')}"
            out = client.call(
                "PUT",
                path,
                m["content"],
                query={"user_id": hs_user(m["sender"]), "ts": m["origin_server_ts"]},
            )
            events[out["event_id"]] = m["event_id"]
            with lock:
                sent[0] += 1
                if sent[0] % 1000 == 0:
                    rate = sent[0] / (time.perf_counter() - t0)
                    print(f"  {sent[0]}/{total} messages, {rate:.0f} msg/s", file=sys.stderr)
        with lock:
            done[eval_room] = {"room_id": room, "events": events}
            save_replay(work, done)

    with ThreadPoolExecutor(POOL) as pool:
        list(pool.map(one_room, todo))
    print(f"replayed {total} messages in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def save_replay(work: Path, done: dict) -> None:
    tmp = work / (REPLAY_FILE + ".tmp")
    tmp.write_text(json.dumps({"rooms": done}), encoding="utf-8")
    tmp.replace(work / REPLAY_FILE)


def load_or_make_tokens(work: Path) -> tuple[str, str]:
    path = work / "tokens.json"
    if path.exists():
        t = json.loads(path.read_text())
        return t["as_token"], t["hs_token"]
    t = {"as_token": secrets.token_urlsafe(32), "hs_token": secrets.token_urlsafe(32)}
    path.write_text(json.dumps(t))
    return t["as_token"], t["hs_token"]


# -- search and scoring ----------------------------------------------------------------


# Words Synapse 1.163 drops as stop words; `x OR me OR y` becomes the malformed SQLite
# MATCH `x OR  OR y` (an error 500), so the OR variant leaves them out, as a user would.
SYNAPSE_STOP_WORDS = {"the", "a", "you", "me", "and", "but"}


def words(text: str) -> list[str]:
    """Words as a user would type them between ORs: punctuation dropped (a leading '-'
    or a quote means something else to Synapse's query parser), stop words and the
    operators themselves left out."""
    return [
        w
        for w in re.findall(r"\w+", text)
        if w.lower() not in SYNAPSE_STOP_WORDS | {"or", "and", "not"}
    ]


def search_term(item: evalkit.Item, variant: str) -> str:
    source, how = variant.split()
    text = " ".join(item.keywords) if source == "keywords" else item.query
    return text if how == "AND" else " OR ".join(words(text))


def timelines(split_dir: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ev in evalkit.load_events(split_dir):
        if ev["type"] == "m.room.message":
            out.setdefault(ev["room_id"], []).append(ev["event_id"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--eval-dir",
        default=None,
        help=f"default: ${evalkit.ENV_EVAL_DIR} or {evalkit.DEFAULT_EVAL_DIR}",
    )
    p.add_argument("--split", default="dev")
    p.add_argument("--out", default=str(evalkit.OUT_DIR / "synapse_baseline.json"))
    p.add_argument(
        "--ours",
        default=str(evalkit.OUT_DIR / "retrieval.json"),
        help="bench/retrieval.py's JSON, shown beside Synapse's figures",
    )
    p.add_argument("--order-by", default="rank", choices=("rank", "recent"))
    args = p.parse_args(argv)

    root = evalkit.eval_dir(args.eval_dir)
    split_dir = root / args.split
    items = evalkit.load_items(split_dir)
    work = evalkit.OUT_DIR / f"synapse-{args.split}"
    work.mkdir(parents=True, exist_ok=True)
    as_token, hs_token = load_or_make_tokens(work)
    reg = work / "registration.yaml"
    reg.write_text(registration(as_token, hs_token))
    done = (
        json.loads((work / REPLAY_FILE).read_text())["rooms"]
        if (work / REPLAY_FILE).exists()
        else {}
    )
    cached = len(done)

    t0 = time.perf_counter()
    hs = LocalSynapse(work / "hs", server_name=HS_DOMAIN, appservice_registrations=[reg])
    with hs:
        client = Client(hs.url, as_token)
        replay(split_dir, work, client, done)
        replay_seconds = time.perf_counter() - t0
        back = {hs_ev: ev for r in done.values() for hs_ev, ev in r["events"].items()}
        rooms = [r["room_id"] for r in done.values()]
        t1 = time.perf_counter()
        returned: dict[tuple[str, str], list[str]] = {}
        errors: dict[str, list[str]] = {v: [] for v in VARIANTS}
        for item in items:
            for v in VARIANTS:
                try:
                    res = client.call(
                        "POST",
                        "/_matrix/client/v3/search",
                        {
                            "search_categories": {
                                "room_events": {
                                    "search_term": search_term(item, v),
                                    "keys": ["content.body"],
                                    "order_by": args.order_by,
                                    "filter": {"rooms": rooms, "limit": evalkit.DEPTH},
                                }
                            }
                        },
                        retry=False,
                    )
                except RuntimeError:  # what the user sees too: an error, no results
                    errors[v].append(item.id)
                    res = {"search_categories": {"room_events": {}}}
                results = res["search_categories"]["room_events"].get("results", [])
                returned[(item.id, v)] = [back.get(r["result"]["event_id"], "") for r in results][
                    : evalkit.DEPTH
                ]
        search_seconds = time.perf_counter() - t1

    lines = timelines(split_dir)
    position = {e: (room, i) for room, evs in lines.items() for i, e in enumerate(evs)}
    results = {}
    for v in VARIANTS:
        per_item = []
        for item in items:
            near = {
                (position[g][0], position[g][1] + d)
                for g in item.gold
                for d in range(-NEAR, NEAR + 1)
            }
            n_rel = sum(1 for room, i in near if 0 <= i < len(lines[room]))
            rel = [position.get(e) in near for e in returned[(item.id, v)]]
            per_item.append({"id": item.id, **evalkit.item_scores(rel, n_rel)})
        results[v] = {
            "metrics": evalkit.aggregate(per_item),
            "first_hit": {s["id"]: s["first_hit"] for s in per_item},
            "errors": errors[v],
        }  # no query text: the eval data stays in ../shared
    report = {
        "benchmark": "synapse_baseline",
        "split": args.split,
        "items": len(items),
        "eval_dir": str(root),
        "order_by": args.order_by,
        "near": NEAR,
        "replay_cached_rooms": cached,
        "replay_seconds": round(replay_seconds, 1),
        "search_seconds": round(search_seconds, 1),
        "machine": evalkit.machine(),
        "variants": results,
    }
    evalkit.write_json(Path(args.out), report)

    rows = [(f"synapse {v}", results[v]["metrics"]) for v in VARIANTS]
    ours = Path(args.ours)
    if ours.is_file():
        mine = json.loads(ours.read_text())
        rows += [(f"matrix-sources {v}", r["metrics"]) for v, r in mine["variants"].items()]
    print(
        evalkit.table(
            rows,
            f"Synapse /search vs matrix-sources on {args.split} "
            f"({len(items)} items; Synapse hit = gold within {NEAR} messages)",
        )
    )
    for v in VARIANTS:
        if errors[v]:
            print(
                f"synapse {v}: {len(errors[v])} searches answered with an error "
                f"(counted as no results): {', '.join(errors[v])}"
            )
    print(
        f"\nreplay {replay_seconds:.0f} s ({cached} of {len(done)} rooms from the cache), "
        f"{len(items) * len(VARIANTS)} searches {search_seconds:.1f} s; wrote {args.out}\n"
    )
    print(evalkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
