"""Tokens as credentials (issue 21, item 6) and "say it at the door" (item 7): tokens
read from $CREDENTIALS_DIRECTORY or *_file keys, file modes, doctor's warning,
`allowlist add` saying why a room will be refused, init's registration mode."""

from __future__ import annotations

import grp
import json
import os
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.cli.doctor import check_token_files, print_checks
from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.datadir import init_data_dir, load_registration, service_registration

AS_TOKEN = "as-from-credential-0123456789abcdef"
HS_TOKEN = "hs-from-credential-0123456789abcdef"


def data_dir(
    tmp_path: Path, appservice: dict | None = None, hs_url: str = "http://127.0.0.1:9"
) -> Path:
    init_data_dir(tmp_path, hs_url, "example.org")
    cfg = tmp_path / "config.yaml"
    if appservice:
        y = YAML()
        data = y.load(cfg.read_text())
        data["appservice"].update(appservice)
        with open(cfg, "w") as f:
            y.dump(data, f)
    return cfg


def creds_dir(tmp_path: Path, **tokens: str) -> Path:
    d = tmp_path / "creds"
    d.mkdir()
    for k, v in tokens.items():
        (d / k).write_text(v + "\n")
    return d


# -- where the tokens come from -------------------------------------------------------


def test_credentials_directory_supplies_both_tokens(tmp_path):
    cfg = load_config(data_dir(tmp_path))
    d = creds_dir(tmp_path, as_token=AS_TOKEN, hs_token=HS_TOKEN)
    reg = service_registration(cfg, {"CREDENTIALS_DIRECTORY": str(d)})
    assert (reg.as_token, reg.hs_token) == (AS_TOKEN, HS_TOKEN)  # newline dropped
    assert reg.sender_localpart == "sourcesbot"  # the rest from the registration


def test_without_credentials_the_registration_tokens_are_used(tmp_path):
    cfg = load_config(data_dir(tmp_path))
    own = load_registration(cfg.registration_path)
    assert service_registration(cfg, {}) == own
    # a credentials dir holding only one token: the other from the registration
    d = creds_dir(tmp_path, hs_token=HS_TOKEN)
    reg = service_registration(cfg, {"CREDENTIALS_DIRECTORY": str(d)})
    assert (reg.as_token, reg.hs_token) == (own.as_token, HS_TOKEN)


def test_file_keys_win_over_the_credentials_directory(tmp_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "as").write_text("as-from-the-file-key-0123456789\n")
    cfg = load_config(data_dir(tmp_path, {"as_token_file": "secret/as"}))
    assert cfg.appservice.as_token_file == "secret/as"
    assert cfg.appservice.hs_token_file is None
    d = creds_dir(tmp_path, as_token=AS_TOKEN, hs_token=HS_TOKEN)
    reg = service_registration(cfg, {"CREDENTIALS_DIRECTORY": str(d)})
    assert (reg.as_token, reg.hs_token) == ("as-from-the-file-key-0123456789", HS_TOKEN)


def test_registration_may_leave_out_tokens_given_as_credentials(tmp_path):
    cfg = load_config(data_dir(tmp_path))
    text = cfg.registration_path.read_text()
    cfg.registration_path.write_text(
        "\n".join(
            line for line in text.splitlines() if not line.startswith(("as_token", "hs_token"))
        )
    )
    with pytest.raises(ConfigError, match="as_token: is missing"):
        service_registration(cfg, {})
    d = creds_dir(tmp_path, as_token=AS_TOKEN, hs_token=HS_TOKEN)
    reg = service_registration(cfg, {"CREDENTIALS_DIRECTORY": str(d)})
    assert (reg.as_token, reg.hs_token) == (AS_TOKEN, HS_TOKEN)


def test_a_missing_token_file_names_the_key_and_the_file(tmp_path):
    cfg = load_config(data_dir(tmp_path, {"hs_token_file": "nope/hs"}))
    with pytest.raises(ConfigError) as e:
        service_registration(cfg, {})
    msg = str(e.value)
    assert "appservice.hs_token_file" in msg and str(tmp_path.resolve() / "nope" / "hs") in msg
    assert "no such file" in msg


@pytest.mark.parametrize(
    "content,why",
    [
        ("", "is empty"),
        ("short", "does not hold a token"),
        ("CHANGE_ME_CHANGE_ME_CHANGE_ME", "does not hold"),
    ],
)
def test_a_bad_token_file_is_refused_naming_it(tmp_path, content, why):
    cfg = load_config(data_dir(tmp_path))
    d = creds_dir(tmp_path, as_token=content)
    with pytest.raises(ConfigError) as e:
        service_registration(cfg, {"CREDENTIALS_DIRECTORY": str(d)})
    assert "$CREDENTIALS_DIRECTORY: as_token" in str(e.value)
    assert str(d / "as_token") in str(e.value) and why in str(e.value)


def test_run_reads_the_credentials(tmp_path, monkeypatch):
    """The Service itself takes its tokens through service_registration."""
    import matrix_sources.appservice.homeserver.service as service

    seen = {}

    class Stop(Exception):
        pass

    def fake(cfg, environ=None):
        seen["cfg"] = cfg
        raise Stop

    monkeypatch.setattr(service, "service_registration", fake)
    with pytest.raises(Stop):
        service.Service(load_config(data_dir(tmp_path)))
    assert seen


# -- file modes --------------------------------------------------------------------------


def test_init_writes_token_files_0600_and_registration_0600(tmp_path, capsys):
    d = tmp_path / "creds"
    assert (
        main(
            [
                "init",
                "--data-dir",
                str(tmp_path / "data"),
                "--domain",
                "example.org",
                "--credentials-dir",
                str(d),
            ]
        )
        == 0
    )
    reg = load_registration(tmp_path / "data" / "registration.yaml")
    for key in ("as_token", "hs_token"):
        assert stat.S_IMODE((d / key).stat().st_mode) == 0o600
        assert (d / key).read_text().strip() == getattr(reg, key)
    assert stat.S_IMODE((tmp_path / "data" / "registration.yaml").stat().st_mode) == 0o600
    assert "chmod 0640" in capsys.readouterr().out  # says how Synapse gets to read it


def test_init_gives_the_registration_to_synapses_group(tmp_path, capsys):
    group = grp.getgrgid(os.getgid()).gr_name  # a group we may give files to
    assert (
        main(
            [
                "init",
                "--data-dir",
                str(tmp_path),
                "--domain",
                "example.org",
                "--synapse-group",
                group,
            ]
        )
        == 0
    )
    st = (tmp_path / "registration.yaml").stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == os.getgid()
    assert (
        main(["init", "--data-dir", str(tmp_path / "x"), "--synapse-group", "no-such-group-here"])
        == 1
    )
    assert "no such group" in capsys.readouterr().err


def test_doctor_warns_about_token_files_others_can_read(tmp_path, capsys):
    secret = tmp_path / "as"
    secret.write_text(AS_TOKEN)
    secret.chmod(0o600)
    cfg = load_config(data_dir(tmp_path, {"as_token_file": "as"}))
    assert list(check_token_files(cfg)) == []
    secret.chmod(0o640)  # a token file of its own: not even its group
    cfg.registration_path.chmod(0o640)  # the registration: Synapse's group may
    warned = list(check_token_files(cfg))
    assert [c.detail for c in warned] == [f"{secret} holds a token and its group can read it"]
    cfg.registration_path.chmod(0o644)
    warned = list(check_token_files(cfg))
    assert len(warned) == 2 and all(c.warning and c.ok for c in warned)
    assert print_checks(warned) == 0  # a warning, not a failure
    out = capsys.readouterr().out
    assert f"WARN token file: {cfg.registration_path} holds a token and everyone can read it" in out
    assert f"fix: chmod 0600 {secret}" in out
    # The search API's read token too (written 0600 by init and run).
    api = cfg.api_token_path
    api.write_text("read-token-" + "r" * 32 + "\n")
    api.chmod(0o600)
    cfg.registration_path.chmod(0o600)
    secret.chmod(0o600)
    assert list(check_token_files(cfg)) == []
    api.chmod(0o640)
    assert [c.detail for c in check_token_files(cfg)] == [
        f"{api} holds a token and its group can read it"
    ]


# -- allowlist add at the door ----------------------------------------------------------

PUBLIC_ROOM = "!public:example.org"


def state(join_rule="public", visibility="shared", encrypted=False, bridged=False):
    evs = [
        {
            "type": "m.room.create",
            "state_key": "",
            "sender": "@a:example.org",
            "content": {},
            "event_id": "$c",
            "room_id": "!r",
            "origin_server_ts": 1,
        },
        {
            "type": "m.room.join_rules",
            "state_key": "",
            "sender": "@a:example.org",
            "content": {"join_rule": join_rule},
            "event_id": "$j",
            "room_id": "!r",
            "origin_server_ts": 1,
        },
        {
            "type": "m.room.history_visibility",
            "state_key": "",
            "sender": "@a:example.org",
            "content": {"history_visibility": visibility},
            "event_id": "$h",
            "room_id": "!r",
            "origin_server_ts": 1,
        },
    ]
    for u in ("@a:example.org", "@b:example.org", "@c:example.org"):
        evs.append(
            {
                "type": "m.room.member",
                "state_key": u,
                "sender": u,
                "content": {"membership": "join"},
                "event_id": f"$m{u}",
                "room_id": "!r",
                "origin_server_ts": 1,
            }
        )
    if encrypted:
        evs.append(
            {
                "type": "m.room.encryption",
                "state_key": "",
                "sender": "@a:example.org",
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                "event_id": "$e",
                "room_id": "!r",
                "origin_server_ts": 1,
            }
        )
    if bridged:
        evs.append(
            {
                "type": "m.bridge",
                "state_key": "x",
                "sender": "@a:example.org",
                "content": {"protocol": {"id": "discord"}},
                "event_id": "$b",
                "room_id": "!r",
                "origin_server_ts": 1,
            }
        )
    return evs


class FakeRooms(BaseHTTPRequestHandler):
    """GET /rooms/{id}/state and POST /join/{id}, as Synapse answers the bot."""

    rooms: dict[str, list] = {}  # readable (the bot joined, or world_readable)
    joinable: dict[str, list] = {}  # public: a join makes them readable
    banned: set[str] = set()
    joins: list[str] = []

    def _room(self, prefix: str, suffix: str = "") -> str | None:
        p = self.path.split("?", 1)[0]  # a join carries its via servers in the query
        if p.startswith(prefix) and p.endswith(suffix):
            return unquote(p[len(prefix) : len(p) - len(suffix)])
        return None

    def do_GET(self):  # noqa: N802
        room = self._room("/_matrix/client/v3/rooms/", "/state")
        if room in self.rooms:
            return self._json(200, self.rooms[room])
        self._json(403, {"errcode": "M_FORBIDDEN", "error": "You aren't a member of the room"})

    def do_POST(self):  # noqa: N802
        room = self._room("/_matrix/client/v3/join/")
        self.joins.append(room)
        if room in self.banned:
            return self._json(
                403, {"errcode": "M_FORBIDDEN", "error": "You are banned from this room"}
            )
        if room in self.joinable:
            self.rooms[room] = self.joinable[room]
            return self._json(200, {"room_id": room})
        self._json(403, {"errcode": "M_FORBIDDEN", "error": "You are not invited to this room."})

    def _json(self, code: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def rooms_cfg(tmp_path):
    FakeRooms.rooms = {
        "!joined-private:example.org": state(join_rule="invite"),
        "!members-only:example.org": state(visibility="joined"),
        "!encrypted:example.org": state(encrypted=True),
        "!bridged:example.org": state(bridged=True),
    }
    FakeRooms.joinable = {PUBLIC_ROOM: state()}
    FakeRooms.banned = {"!banned:example.org"}
    FakeRooms.joins = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeRooms)
    t = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    t.start()
    yield data_dir(tmp_path, hs_url=f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "room,says",
    [
        ("!joined-private:example.org", "not public (join rule invite) (journal rule not_public)"),
        ("!invite-only:example.org", "the room is not public (journal rule not_public)"),
        ("!members-only:example.org", "history is for members only (history visibility joined)"),
        ("!encrypted:example.org", "encrypted (journal rule encrypted_room)"),
        ("!bridged:example.org", "bridged (journal rule bridged_room)"),
        ("!banned:example.org", "the bot is banned from the room (journal rule bot_banned)"),
    ],
)
def test_allowlist_add_says_why_the_room_will_be_refused(rooms_cfg, capsys, room, says):
    assert main(["allowlist", "add", "-c", str(rooms_cfg), room]) == 0
    out = capsys.readouterr().out
    assert f"added, but it will be refused: {room}: " in out and says in out, out
    assert "fix: " in out
    assert f"added: {room}" not in out


def test_allowlist_add_of_a_public_room_joins_it_and_says_added(rooms_cfg, capsys):
    assert main(["allowlist", "add", "-c", str(rooms_cfg), PUBLIC_ROOM]) == 0
    out = capsys.readouterr().out
    assert f"added: {PUBLIC_ROOM}\n" in out and "refused" not in out
    assert FakeRooms.joins == [PUBLIC_ROOM]


def test_a_room_already_listed_is_never_joined_from_the_cli(rooms_cfg, capsys):
    """A bot its moderators kicked waits for their invite: re-adding does not rejoin."""
    assert main(["allowlist", "add", "-c", str(rooms_cfg), "!banned:example.org"]) == 0
    FakeRooms.joins = []
    capsys.readouterr()
    assert main(["allowlist", "add", "-c", str(rooms_cfg), "!banned:example.org"]) == 0
    out = capsys.readouterr().out
    assert "already listed: !banned:example.org" in out and "not in the room" in out
    assert FakeRooms.joins == []


def test_allowlist_add_with_no_homeserver_adds_and_says_it_was_not_checked(tmp_path, capsys):
    cfg = data_dir(tmp_path)  # port 9: nothing listens
    assert main(["allowlist", "add", "-c", str(cfg), PUBLIC_ROOM]) == 0
    out = capsys.readouterr().out
    assert f"added: {PUBLIC_ROOM}" in out and "not checked now" in out
