"""End-to-end checks of appservice.tools.localsynapse against a real Synapse process."""

from __future__ import annotations

import json
import secrets
import socket
import urllib.request

import pytest

from matrix_sources.appservice.tools.localsynapse import LocalSynapse, SynapseError

pytestmark = pytest.mark.synapse


def whoami(hs: LocalSynapse, token: str) -> str:
    req = urllib.request.Request(
        hs.url + "/_matrix/client/v3/account/whoami", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["user_id"]


def port_answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_register_whoami_stop_restart(tmp_path):
    hs = LocalSynapse(tmp_path / "hs")
    with hs:
        user_id, token = hs.register_user("alice", "s3cret-pass", admin=True)
        assert user_id == "@alice:localhost"
        assert whoami(hs, token) == "@alice:localhost"
        port = hs.port
        assert hs.url == f"http://127.0.0.1:{port}"
        # the log config writes into base_dir, not into the test's cwd
        assert (tmp_path / "hs" / "homeserver.log").exists()

    assert not port_answers(port)
    hs.stop()  # idempotent

    # A fresh object on the same folder gets the same port and the same database.
    again = LocalSynapse(tmp_path / "hs")
    with again:
        assert again.port == port
        user_id, token = again.login("alice", "s3cret-pass")
        assert user_id == "@alice:localhost"
        assert whoami(again, token) == "@alice:localhost"
        with pytest.raises(SynapseError):
            again.login("alice", "wrong")


def test_appservice_registration_is_loaded(tmp_path):
    as_token = secrets.token_hex(16)
    reg = tmp_path / "registration.yaml"
    reg.write_text(
        "id: matrix-sources-test\n"
        "url: http://127.0.0.1:9\n"  # nothing listens there; whoami doesn't need it
        f"as_token: {as_token}\n"
        f"hs_token: {secrets.token_hex(16)}\n"
        "sender_localpart: sourcesbot\n"
        "namespaces:\n"
        "  users:\n"
        "    - exclusive: true\n"
        "      regex: '@sourcesbot:localhost'\n"
        "rate_limited: false\n"
    )
    with LocalSynapse(tmp_path / "hs", appservice_registrations=[reg]) as hs:
        assert whoami(hs, as_token) == "@sourcesbot:localhost"


def test_broken_config_raises_with_log_tail(tmp_path):
    reg = tmp_path / "missing-registration.yaml"  # does not exist: Synapse must refuse
    hs = LocalSynapse(tmp_path / "hs", appservice_registrations=[reg])
    with pytest.raises(SynapseError) as err:
        hs.start(timeout=60)
    assert "missing-registration.yaml" in str(err.value)
    hs.stop()
