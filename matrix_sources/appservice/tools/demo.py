"""`matrix-sources demo`: everything on one machine, in one folder, in one command.

A local Synapse on 127.0.0.1 with the registration wired in, the service on its embedded
default (SQLite event log, embedded Chroma, the packaged model), a public demo room on
the allowlist seeded with a short conversation written for the demo (three speakers), a
first `!sources` asked and answered through a real Matrix client, how to log in and try
it yourself, and how to register another account (registration is open on this local
server only).
Run it again with the same --data-dir to pick up where it left off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from pathlib import Path

from matrix_sources.indexer.clock import REAL
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.ingest.allowlist import add_room

from ..logs import setup_logging
from .chatclient import ChatClient
from .localsynapse import LocalSynapse, SynapseError

DEMO_USER, DEMO_PASSWORD = "demo", "demo-password"
DEMO_QUESTION = "!sources the server keeps running out of disk space, what can we clean up?"
# The people of the seeded conversation; you log in as DEMO_USER, someone else.
SPEAKERS = ("alice", "bob", "carol")

# A conversation written for this demo (a community running its own homeserver), sent
# the way Matrix clients send it: an answer is a reply to the line it answers (the
# index of that line; the reply mentions its sender), so conversations can be followed.
CONVERSATION: list[tuple[str, str, int | None]] = [
    ("alice", "The homeserver ran out of disk again last night, media uploads failed.", None),
    (
        "bob",
        "Most of it is the remote media cache. Setting media_retention with "
        "remote_media_lifetime: 30d in homeserver.yaml makes Synapse purge old copies.",
        0,
    ),
    ("carol", "Also worth running the purge_history admin API on the big bridged rooms.", 0),
    ("alice", "Separate topic: who is organising the meetup in March?", None),
    ("carol", "I can host it, the library has a room with a projector for 20 people.", 3),
    ("alice", "Great. Let's do the second Saturday, 2pm, and I'll post the address.", 4),
    ("bob", "Back to ops: the signing key backup is in the vault, rotate it yearly.", None),
    ("bob", "To rotate it, generate a new key and move the old one to old_signing_keys.", None),
    ("alice", "Does anyone know why federation with the other server is slow today?", None),
    ("bob", "Their DNS changed; the .well-known delegation points at the old host.", 8),
    (
        "alice",
        "Right, once they fix /.well-known/matrix/server it should recover within the hour.",
        9,
    ),
    ("carol", "Meanwhile, new members keep asking how to join from their phones.", None),
    ("bob", "Element X works; they sign in with our server name, not matrix.org.", 11),
    ("carol", "We should pin a short onboarding note in the lobby room.", 12),
    ("alice", "Speaking of disk: the database grew to 40 GB. Is state compression worth it?", None),
    ("bob", "Yes, run synapse_auto_compressor nightly; it shrank ours by half.", 14),
    ("alice", "And vacuum the database after the first compression run.", 15),
]


def _password(user: str) -> str:
    return f"{user}-password"


def _account(synapse: LocalSynapse, state: dict, user: str, password: str) -> tuple[str, str]:
    """(user id, token): registered once, logged in on later runs."""
    registered = state.setdefault("registered", [])
    if user in registered or (user == DEMO_USER and "user" in state):
        return synapse.login(user, password)
    user_id, token = synapse.register_user(user, password)
    registered.append(user)
    return user_id, token


def register_hint(synapse: LocalSynapse) -> list[str]:
    """How a person makes a second account on the demo's server to try the bot."""
    tool = Path(sys.executable).parent / "register_new_matrix_user"
    return [
        "Try it as someone else: registration is open on this local demo server only,",
        'so any client\'s "Create account" on the homeserver above works, or:',
        f"  {tool if tool.exists() else 'register_new_matrix_user'} -c {synapse.config_file} "
        f"-u NAME -p PASSWORD --no-admin {synapse.url}",
    ]


async def _seed(synapse: LocalSynapse, state: dict, room: str) -> list[str]:
    """The conversation, each line sent by its own speaker, in order."""
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name in SPEAKERS:
            user_id, token = _account(synapse, state, name, _password(name))
            clients[name] = await stack.enter_async_context(ChatClient(synapse.url, user_id, token))
            await clients[name].join(room)
        sent: list[str] = []
        for who, body, reply_to in CONVERSATION:
            content: dict = {"msgtype": "m.text", "body": body}
            if reply_to is not None:
                content["m.relates_to"] = {"m.in_reply_to": {"event_id": sent[reply_to]}}
                content["m.mentions"] = {"user_ids": [clients[CONVERSATION[reply_to][0]].user_id]}
            sent.append(await clients[who].send(room, body, content))
        return sent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _say(text: str) -> None:
    print(text, flush=True)


async def _demo(root: Path, serve: bool) -> int:
    from ..app import serve_with_bot
    from ..homeserver.startup import StartupError

    root = root.resolve()
    state_file = root / "demo.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    data_dir = root / "service"
    if not (data_dir / "config.yaml").exists():
        hs_port, as_port = _free_port(), _free_port()
        init_data_dir(data_dir, f"http://127.0.0.1:{hs_port}", "localhost", as_port=as_port)
        state.update(hs_port=hs_port)
    cfg = load_config(data_dir / "config.yaml")
    synapse = LocalSynapse(
        root / "synapse",
        port=state["hs_port"],
        appservice_registrations=[cfg.registration_path],
        open_registration=True,
        log_level=os.environ.get("MATRIX_SOURCES_SYNAPSE_LOG_LEVEL", "WARNING"),
    )
    _say(f"[1/5] starting Synapse on {synapse.url} (files in {root / 'synapse'})")
    try:
        synapse.start()
    except SynapseError as e:
        _say(f"error: {e}")
        return 1
    service = None
    try:
        _say("[2/5] starting matrix-sources (loading the model)")
        service = serve_with_bot(cfg)
        try:
            await service.start()
        except StartupError as e:
            _say(f"error: {e}")
            return 1
        user, token = _account(synapse, state, DEMO_USER, DEMO_PASSWORD)
        state["user"] = user
        async with ChatClient(synapse.url, user, token) as client:
            if "room" not in state:
                _say(
                    "[3/5] creating the public room #demo:localhost and adding it to the allowlist"
                )
                room = await client.create_room("matrix-sources demo", public=True, alias="demo")
                add_room(cfg.allowlist_path, room, "#demo:localhost (demo room)")
                await service.allowlist.reload()
                await client.wait_for_member(room, cfg.bot_user)
                state["room"] = room
                state_file.write_text(json.dumps(state))
                _say(
                    f"[4/5] seeding a sample conversation ({len(CONVERSATION)} messages "
                    f"from {', '.join(SPEAKERS)})"
                )
                ids = await _seed(synapse, state, room)
                state_file.write_text(json.dumps(state))
                await _wait_indexed(service, ids)
            else:
                room = state["room"]
                _say("[3/5] demo room exists, [4/5] already seeded")
            state_file.write_text(json.dumps(state))
            _say(f"[5/5] asking in the room: {DEMO_QUESTION}")
            reply = await client.ask(room, DEMO_QUESTION, cfg.bot_user, timeout=120)
        _say("\n--- the bot answered ---")
        _say(reply["content"]["body"])
        _say("------------------------\n")
        _say("Try it with any Matrix client (e.g. Element, or `pip install matrix-commander`):")
        _say(f"  homeserver   {synapse.url}")
        _say(f"  user         {DEMO_USER}   password {DEMO_PASSWORD}")
        _say("  room         #demo:localhost")
        _say("  then type    !sources <your question>      or  !sources help")
        _say("")
        for line in register_hint(synapse):
            _say(line)
        if not serve:
            return 0
        _say("\nServing; Ctrl-C to stop.")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    finally:
        if service is not None:
            await service.stop()
        synapse.stop()


async def _wait_indexed(service, event_ids: list[str], timeout: float = 120) -> None:
    deadline = REAL.now() + timeout
    while REAL.now() < deadline:
        if all((service.eventlog.status_of(e) or ("",))[0] == "indexed" for e in event_ids):
            return
        await REAL.sleep(0.2)
    raise RuntimeError("the demo messages were not indexed in time; see the log above")


def run_demo(root: Path, serve: bool = True) -> int:
    setup_logging(os.environ.get("MATRIX_SOURCES_LOG_LEVEL", "WARNING"))
    try:
        return asyncio.run(_demo(root, serve))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # the demo reports, it does not dump a traceback at newcomers
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
