"""Puppet namespaces read from bridges' registration files, and `allowlist add` with a
room alias resolved through the homeserver (a fake one here, answering like Synapse)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.cli.main import main
from matrix_sources.appservice.homeserver.aliases import AliasError, resolve_alias
from matrix_sources.indexer.config import DEFAULT_PUPPET_PATTERNS, ConfigError, load_config
from matrix_sources.indexer.datadir import init_data_dir, load_registration
from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.allowlist import load_allowlist
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.records import RoomID, UserID
from tests.appservice.homeserver.test_hostile_transactions import ROOM_A, env, msg  # noqa: F401 (env: fixture)
from tests.appservice.homeserver.test_transactions import put

TELEGRAM_REG = """\
id: telegram
url: http://127.0.0.1:29317
as_token: aaaaaaaaaaaaaaaaaaaaaaaa
hs_token: bbbbbbbbbbbbbbbbbbbbbbbb
sender_localpart: telegrambot
namespaces:
  users:
    - exclusive: true
      regex: '@telegram_.*:example\\.org'
    - exclusive: true
      regex: '^@telegrambot:example\\.org$'
"""


def data_dir(tmp_path: Path, gate: dict | None = None, hs_url: str = "http://127.0.0.1:9") -> Path:
    init_data_dir(tmp_path, hs_url, "example.org")
    cfg = tmp_path / "config.yaml"
    if gate is not None:
        y = YAML()
        data = y.load(cfg.read_text())
        data["gate"].update(gate)
        with open(cfg, "w") as f:
            y.dump(data, f)
    return cfg


# -- gate.bridge_registrations ----------------------------------------------------------


def test_bridge_user_namespaces_become_puppet_patterns(tmp_path):
    (tmp_path / "bridges").mkdir()
    (tmp_path / "bridges" / "telegram.yaml").write_text(TELEGRAM_REG)
    cfg = load_config(data_dir(tmp_path, {"bridge_registrations": ["bridges/telegram.yaml"]}))
    assert cfg.bridge_registration_paths == (tmp_path.resolve() / "bridges" / "telegram.yaml",)
    assert cfg.puppet_patterns == DEFAULT_PUPPET_PATTERNS
    assert cfg.bridge_puppets == (
        (r"@telegram_.*:example\.org", "example.org"),
        (r"^@telegrambot:example\.org$", "example.org"),
    )
    gate = Gate(
        frozenset({RoomID("!r:example.org")}),
        UserID(cfg.bot_user),
        cfg.puppet_patterns,
        cfg.bridge_servers,
        cfg.bridge_puppets,
    )
    facts = RoomFacts(join_rule="public", members=frozenset({"@alice:example.org"}))
    for puppet in (
        "@telegram_42:example.org",
        "@telegrambot:example.org",
        "@discord_1:example.org",
    ):
        r = gate.judge_message(RoomID("!r:example.org"), "$e", UserID(puppet), facts)
        assert r is not None and r.rule == rules.PUPPET_SENDER, puppet
    for person in ("@alice:example.org", "@discord_1:x"):
        assert gate.judge_message(RoomID("!r:example.org"), "$e", UserID(person), facts) is None


def test_a_registration_namespace_without_a_server_matches_the_homeservers_users_only(tmp_path):
    (tmp_path / "slack.yaml").write_text(
        TELEGRAM_REG.replace("'@telegram_.*:example\\.org'", "'@slack_.*'")
    )
    cfg = load_config(data_dir(tmp_path, {"bridge_registrations": ["slack.yaml"]}))
    gate = Gate(
        frozenset(),
        UserID(cfg.bot_user),
        cfg.puppet_patterns,
        cfg.bridge_servers,
        cfg.bridge_puppets,
    )
    assert gate.is_puppet("@slack_1:example.org") and not gate.is_puppet("@slack_1:ex.org")


def test_bridge_servers_default_to_the_homeservers_domain(tmp_path):
    assert load_config(data_dir(tmp_path / "a")).bridge_servers == ("example.org",)
    cfg = load_config(data_dir(tmp_path / "b", {"bridge_servers": ["discord.example.org"]}))
    assert cfg.bridge_servers == ("discord.example.org",)


def test_without_bridge_registrations_only_the_configured_patterns(tmp_path):
    cfg = load_config(data_dir(tmp_path))
    assert cfg.bridge_registration_paths == () and cfg.puppet_patterns == DEFAULT_PUPPET_PATTERNS


def _error(tmp_path: Path, registrations: list, files: dict[str, str] | None = None) -> str:
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    cfg = data_dir(tmp_path, {"bridge_registrations": registrations})
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(cfg.resolve()) in str(info.value)
    return str(info.value)


def test_missing_registration_names_the_key_and_file(tmp_path):
    msg = _error(tmp_path, ["telegram.yaml", "nowhere.yaml"], {"telegram.yaml": TELEGRAM_REG})
    assert "gate.bridge_registrations[1]" in msg
    assert str(tmp_path.resolve() / "nowhere.yaml") in msg and "no such file" in msg


def test_unreadable_registration_names_the_key_and_file(tmp_path):
    (tmp_path / "adir.yaml").mkdir()
    msg = _error(tmp_path, ["adir.yaml"])
    assert "gate.bridge_registrations[0]" in msg and "adir.yaml: cannot read it" in msg


@pytest.mark.parametrize(
    "text, words",
    [
        ("id: [unclosed\n", "not valid YAML"),
        ("id: telegram\n", "no namespaces.users list"),
        ("namespaces:\n  users:\n    - exclusive: true\n", "namespaces.users[0].regex is missing"),
        (
            "namespaces:\n  users:\n    - regex: '@tg_(:x'\n",
            "namespaces.users[0].regex: not a regex",
        ),
        ("namespaces:\n  users:\n    - regex: '@.*:example\\.org'\n", "matches the bot"),
    ],
)
def test_bad_registration_contents_are_named(tmp_path, text, words):
    msg = _error(tmp_path, ["bridge.yaml"], {"bridge.yaml": text})
    assert "gate.bridge_registrations[0]" in msg and "bridge.yaml" in msg and words in msg


@pytest.mark.parametrize(
    "value, key",
    [
        ("telegram.yaml", "gate.bridge_registrations: must"),
        ([42], "gate.bridge_registrations[0]: must"),
    ],
)
def test_registrations_must_be_a_list_of_paths(tmp_path, value, key):
    assert key in _error(tmp_path, value)


# -- allowlist add '#alias:server' -------------------------------------------------------


class FakeDirectory(BaseHTTPRequestHandler):
    """GET /_matrix/client/v3/directory/room/{alias}, as Synapse answers it."""

    aliases: dict[str, str] = {}
    token = ""
    seen: list[tuple[str, str | None]] = []

    def do_GET(self):  # noqa: N802
        prefix = "/_matrix/client/v3/directory/room/"
        alias = unquote(self.path[len(prefix) :]) if self.path.startswith(prefix) else None
        auth = self.headers.get("Authorization")
        self.seen.append((self.path, auth))
        if auth != f"Bearer {self.token}":
            return self._json(401, {"errcode": "M_UNKNOWN_TOKEN", "error": "bad token"})
        if alias in self.aliases:
            return self._json(200, {"room_id": self.aliases[alias], "servers": ["example.org"]})
        self._json(404, {"errcode": "M_NOT_FOUND", "error": f"Room alias {alias} not found"})

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def homeserver():
    FakeDirectory.aliases = {
        "#ops:example.org": "!opsroom:example.org",
        "#v12:example.org": "!roomversion12withoutserverpart",
    }
    FakeDirectory.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeDirectory)
    t = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def cfg_path(tmp_path, homeserver) -> Path:
    cfg = data_dir(tmp_path, hs_url=homeserver)
    FakeDirectory.token = load_registration(tmp_path / "registration.yaml").as_token
    return cfg


def test_add_alias_resolves_and_keeps_the_alias_beside_the_id(cfg_path, capsys):
    assert (
        main(
            [
                "allowlist",
                "add",
                "-c",
                str(cfg_path),
                "#ops:example.org",
                "#v12:example.org",
                "!plain:example.org",
            ]
        )
        == 0
    )
    allowlist = cfg_path.parent / "allowlist.yaml"
    assert load_allowlist(allowlist) == [
        "!opsroom:example.org",
        "!roomversion12withoutserverpart",
        "!plain:example.org",
    ]
    text = allowlist.read_text()
    assert re.search(r"- '!opsroom:example\.org' +# #ops:example\.org\n", text)
    assert re.search(r"- '!roomversion12withoutserverpart' +# #v12:example\.org\n", text)
    out = capsys.readouterr().out
    assert "added: !opsroom:example.org (#ops:example.org)" in out
    # Asked with the appservice's as_token, the alias escaped in the path.
    assert FakeDirectory.seen[0] == (
        "/_matrix/client/v3/directory/room/%23ops%3Aexample.org",
        f"Bearer {FakeDirectory.token}",
    )
    assert main(["allowlist", "add", "-c", str(cfg_path), "#ops:example.org"]) == 0
    assert "already listed: !opsroom:example.org" in capsys.readouterr().out


def test_unknown_alias_is_an_error_and_nothing_is_written(cfg_path, capsys):
    allowlist = cfg_path.parent / "allowlist.yaml"
    before = allowlist.read_text()
    assert (
        main(["allowlist", "add", "-c", str(cfg_path), "#ops:example.org", "#nope:example.org"])
        == 1
    )
    err = capsys.readouterr().err
    assert "#nope:example.org: no room has this alias" in err
    assert allowlist.read_text() == before  # all or nothing


def test_unreachable_homeserver_is_a_clear_error(tmp_path, capsys):
    cfg = data_dir(tmp_path, hs_url="http://127.0.0.1:9")  # discard port: nothing listens
    assert main(["allowlist", "add", "-c", str(cfg), "#ops:example.org"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach the homeserver at http://127.0.0.1:9" in err
    assert "homeserver.url" in err


def test_rejected_token_says_what_to_check(cfg_path, homeserver, capsys):
    FakeDirectory.token = "another-token"
    assert main(["allowlist", "add", "-c", str(cfg_path), "#ops:example.org"]) == 1
    assert "rejected the as_token" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["ops", "#ops", "#:example.org", "# ops:example.org"])
def test_not_an_alias(homeserver, bad):
    with pytest.raises(AliasError) as info:
        resolve_alias(homeserver, "t", bad)
    assert "not a room alias" in str(info.value)
    assert FakeDirectory.seen == []  # refused before asking anyone


def test_add_refuses_a_bad_room_id_before_writing(cfg_path, capsys):
    allowlist = cfg_path.parent / "allowlist.yaml"
    before = allowlist.read_text()
    assert main(["allowlist", "add", "-c", str(cfg_path), "#ops:example.org", "ops"]) == 1
    assert "not a room id" in capsys.readouterr().err
    assert allowlist.read_text() == before


# -- through the transaction endpoint (issue 26) ---------------------------------------------


async def test_a_discord_like_user_of_another_server_purges_nothing(env):
    """One message from `@_discord_999:ex.org` purged a public allowlisted room."""
    assert (await put(env.client, "t1", {"events": [msg("$before")]}))[0] == 200
    stranger = msg("$stranger", sender="@_discord_999:ex.org")
    assert (await put(env.client, "t2", {"events": [stranger, msg("$after")]}))[0] == 200
    assert [env.status(e)[0] for e in ("$before", "$stranger", "$after")] == ["pending"] * 3
    assert [e for e in env.journal() if e.get("rule") == rules.PUPPET_SENDER] == []


async def test_a_puppet_of_this_homeserver_still_refuses_the_room(env):
    assert (await put(env.client, "t1", {"events": [msg("$before")]}))[0] == 200
    puppet = msg("$puppet", sender="@_discord_999:example.org")
    assert (await put(env.client, "t2", {"events": [puppet]}))[0] == 200
    assert env.status("$puppet") is None and env.status("$before")[0] == "purged"
    refusals = [e for e in env.journal() if e.get("rule") == rules.PUPPET_SENDER]
    assert refusals and {e["room_id"] for e in refusals} == {ROOM_A}
