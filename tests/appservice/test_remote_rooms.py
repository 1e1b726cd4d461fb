"""Rooms on other homeservers (issue 50), the fast checks beside the two-Synapse tests
(tests/e2e/test_federation_e2e.py): the allowlist's via servers (kept, merged, old files
still read), what an admin may paste as a room (ids, aliases, matrix.to links with
`?via=`), the servers a join asks, and a bot whose server name has a port, wherever a
server name appears."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.bot.replies import permalink, via_servers
from matrix_sources.appservice.cli.main import main
from matrix_sources.appservice.homeserver.joining import join, join_servers, no_way_in
from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.ingest.allowlist import (
    ListedRoom,
    RoomRefError,
    add_room,
    load_allowlist,
    load_listed,
    parse_room_ref,
    remove_room,
)
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.records import EventID, Hit, RoomID, UserID, WindowID

OLD_FILE = """\
# the rooms
rooms:
  - '!abc:example.org'  # #community:example.org
  # a note about the next one
  - '!def:example.org'
"""


@pytest.fixture
def allowlist(tmp_path):
    path = tmp_path / "allowlist.yaml"
    path.write_text(OLD_FILE)
    return path


# -- the allowlist keeps via servers ------------------------------------------------------


def test_a_file_written_before_via_still_loads(allowlist):
    assert load_listed(allowlist) == [
        ListedRoom(RoomID("!abc:example.org")),
        ListedRoom(RoomID("!def:example.org")),
    ]


def test_a_room_added_with_via_keeps_them_and_its_comment(allowlist):
    assert add_room(allowlist, "!v12room", "#proj:other.org", ("other.org", "m.org:8448"))
    assert load_listed(allowlist)[-1] == ListedRoom(RoomID("!v12room"), ("other.org", "m.org:8448"))
    assert "#proj:other.org" in allowlist.read_text()
    assert load_allowlist(allowlist) == ["!abc:example.org", "!def:example.org", "!v12room"]
    assert not add_room(allowlist, "!v12room", None, ("other.org",))  # nothing new


def test_via_added_to_a_listed_room_keeps_every_comment_in_place(allowlist):
    assert add_room(allowlist, "!abc:example.org", None, ("example.org:8448",))
    text = allowlist.read_text()
    assert "- id: '!abc:example.org'  # #community:example.org" in text
    assert text.index("via: [example.org:8448]") < text.index("# a note about the next one")
    assert text.index("# a note about the next one") < text.index("'!def:example.org'")
    assert load_listed(allowlist)[0].via == ("example.org:8448",)
    # More servers go after the ones it had: the admin's first choice stays first.
    assert add_room(allowlist, "!abc:example.org", None, ("b.org", "example.org:8448"))
    assert load_listed(allowlist)[0].via == ("example.org:8448", "b.org")


def test_a_room_with_via_is_removed_with_its_comments_only(allowlist):
    add_room(allowlist, "!abc:example.org", None, ("example.org",))
    assert remove_room(allowlist, "!abc:example.org")
    text = allowlist.read_text()
    assert "!abc" not in text and "#community" not in text
    assert "# a note about the next one" in text and "# the rooms" in text
    assert load_allowlist(allowlist) == ["!def:example.org"]


@pytest.mark.parametrize(
    ("entry", "key", "words"),
    [
        ("{id: '!a:b.org', via: 'not a server'}", "rooms[0].via", "server names"),
        ("{id: 'nope', via: [b.org]}", "rooms[0].id", "not a room id"),
        ("{id: '!a:b.org', servers: [b.org]}", "rooms[0]", "unknown key 'servers'"),
    ],
)
def test_a_bad_entry_names_its_key(tmp_path, entry, key, words):
    path = tmp_path / "allowlist.yaml"
    path.write_text(f"rooms:\n  - {entry}\n")
    with pytest.raises(ConfigError) as e:
        load_listed(path)
    assert key in str(e.value) and words in str(e.value)


def test_a_via_written_as_one_string_reads_as_a_list(tmp_path):
    path = tmp_path / "allowlist.yaml"
    path.write_text("rooms:\n  - id: '!a'\n    via: other.org:8448\n")
    assert load_listed(path) == [ListedRoom(RoomID("!a"), ("other.org:8448",))]


# -- what an admin may paste ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pasted", "room", "via"),
    [
        ("!abc:example.org", "!abc:example.org", ()),
        ("!v12?via=other.org&via=m.org:8448", "!v12", ("other.org", "m.org:8448")),
        ("https://matrix.to/#/!v12?via=other.org", "!v12", ("other.org",)),
        (
            "https://matrix.to/#/%21v12%3Aex.org/%24ev?via=ex.org%3A8448",
            "!v12:ex.org",
            ("ex.org:8448",),
        ),
        ("https://matrix.to/#/#room:other.org", "#room:other.org", ()),
        ("https://matrix.to/#/%23room%3Aother.org?via=a.org", "#room:other.org", ("a.org",)),
        (
            "!a?via=[::1]:8448&via=127.0.0.1:8448&via=a.org",
            "!a",
            ("[::1]:8448", "127.0.0.1:8448", "a.org"),
        ),
        ("!a?via=a.org&via=a.org", "!a", ("a.org",)),
    ],
)
def test_room_references_with_their_via(pasted, room, via):
    assert parse_room_ref(pasted) == (room, via)


@pytest.mark.parametrize("bad", ["!a?via=not a server", "!a?via=", "https://matrix.to/#/"])
def test_a_bad_reference_says_what_is_wrong(bad):
    with pytest.raises(RoomRefError) as e:
        parse_room_ref(bad)
    assert repr(bad) in str(e.value)


# -- the servers a join asks -------------------------------------------------------------


def test_join_asks_the_via_then_the_room_ids_server_then_servers_seen():
    assert join_servers("!a:origin.org", ("via.org",), ["seen.org", "via.org"]) == [
        "via.org",
        "origin.org",
        "seen.org",
    ]
    assert join_servers("!v12", (), ()) == []  # nobody to ask: a local room, or no way in
    assert join_servers("!a:ex.org:8448", (), ()) == ["ex.org:8448"]
    # Never the bot's own server: a local room is joined as before, asking nobody.
    assert join_servers("!a:home.org:8448", ("home.org:8448",), (), own="home.org:8448") == []
    assert join_servers("!a:home.org", ("b.org",), ("home.org",), own="home.org") == ["b.org"]


async def test_join_asks_the_homeserver_with_each_server():
    """Through mautrix's real client, to a stand-in homeserver that records the request."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer
    from mautrix.api import HTTPAPI
    from mautrix.client.api import ClientAPI

    seen: list[tuple[str, list[tuple[str, str]]]] = []

    async def joined(request: web.Request) -> web.Response:
        seen.append((request.match_info["room"], list(request.query.items())))
        return web.json_response({"room_id": request.match_info["room"]})

    app = web.Application()
    app.router.add_post("/_matrix/client/v3/join/{room}", joined)
    async with TestServer(app) as server:
        api = HTTPAPI(base_url=str(server.make_url("")), token="t")
        try:
            await join(ClientAPI(api=api), "!v12", ["other.org", "m.org:8448"])
            await join(ClientAPI(api=api), "!local:home.org", [])
        finally:
            await api.session.close()
    assert seen == [
        ("!v12", [("server_name", "other.org"), ("server_name", "m.org:8448")]),
        ("!local:home.org", []),
    ]


def test_the_fix_for_a_room_nobody_can_let_the_bot_into():
    bot = "@sourcesbot:example.org:8448"
    fix = no_way_in("!v12", bot, [])
    assert "matrix-sources allowlist add '!v12?via=SERVER'" in fix and f"invite {bot}" in fix
    assert "none of a.org, b.org" in no_way_in("!v12", bot, ["a.org", "b.org"])


# -- a server name with a port -----------------------------------------------------------


@pytest.mark.parametrize("domain", ["example.org:8448", "127.0.0.1:8448"])
def test_init_with_a_port_in_the_domain(tmp_path, domain):
    d = tmp_path / "d"
    assert main(["init", "--data-dir", str(d), "--domain", domain]) == 0
    cfg = load_config(d / "config.yaml")
    assert cfg.homeserver.domain == domain
    assert cfg.bot_user == f"@sourcesbot:{domain}"
    reg = YAML(typ="safe").load((d / "registration.yaml").read_text())
    [ns] = reg["namespaces"]["users"]
    assert re.fullmatch(ns["regex"], f"@sourcesbot:{domain}")
    host = domain.partition(":")[0]
    for other in (f"@sourcesbot:{host}", f"@sourcesbot:{domain}0", f"@sourcesbot:{host}:9448"):
        assert not re.fullmatch(ns["regex"], other)


def test_puppet_patterns_match_users_of_a_server_with_a_port():
    gate = Gate(
        frozenset(),
        UserID("@sourcesbot:example.org:8448"),
        ("^@_discord_.*",),
        bridge_servers=(),  # the bot's own server, port and all
    )
    assert gate.is_puppet("@_discord_1:example.org:8448")
    assert not gate.is_puppet("@_discord_1:example.org")  # another server
    assert not gate.is_puppet("@_discord_1:example.org:9448")
    remote = Gate(
        frozenset(), UserID("@b:home.org"), ("^@tg_.*",), bridge_servers=("127.0.0.1:8448",)
    )
    assert remote.is_puppet("@tg_1:127.0.0.1:8448") and not remote.is_puppet("@tg_1:127.0.0.1")


def test_matrix_to_links_carry_a_server_with_a_port():
    h = Hit(
        window_id=WindowID("w"),
        room_id=RoomID("!v12room"),
        room_label="",
        corpus="chat",
        event_ids=(EventID("$e"),),
        senders=(UserID("@a:ex.org:8448"),),
        ts_first=0,
        ts_last=0,
        score=1.0,
        text="x",
    )
    via = via_servers(h, "home.org:8448")
    assert via == ["ex.org:8448", "home.org:8448"]
    link = permalink(h.room_id, "$e", via)
    query = parse_qsl(link.split("?", 1)[1])
    assert query == [("via", "ex.org:8448"), ("via", "home.org:8448")]
    # What the bot links, the allowlist takes back whole.
    assert parse_room_ref(link) == ("!v12room", ("ex.org:8448", "home.org:8448"))


def test_doctor_does_not_judge_a_room_whose_state_is_still_arriving(monkeypatch, tmp_path):
    """Synapse answers /state only with the full state: a remote room just joined may
    not answer in time. Doctor warns and says why, without calling the room refused."""
    from matrix_sources.appservice.cli import doctor
    from matrix_sources.appservice.httpclient import Unreachable
    from matrix_sources.indexer.datadir import init_data_dir, service_registration

    init_data_dir(tmp_path / "d", "http://127.0.0.1:9", "home.org:8448")
    cfg = load_config(tmp_path / "d" / "config.yaml")

    def slow(cfg, path, token):
        raise Unreachable("http://127.0.0.1:9" + path, TimeoutError("timed out"))

    monkeypatch.setattr(doctor, "_get", slow)
    gate = Gate(frozenset({RoomID("!v12")}), UserID(cfg.bot_user))
    check = doctor.check_room(cfg, service_registration(cfg), gate, "!v12", ("other.org",))
    assert check.ok and check.warning
    assert "member list is still arriving" in check.fix
