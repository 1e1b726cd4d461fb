"""Run a real, throwaway Synapse homeserver on 127.0.0.1 for tests and the demo.

The end-to-end tests and the README demo need a homeserver that behaves exactly like
production Synapse (appservice transactions, room versions, ``/messages``), not a mock.
:class:`LocalSynapse` runs Synapse as a subprocess from the interpreter that has
``matrix-synapse`` installed, with SQLite and every file it writes kept in one folder::

    with LocalSynapse(tmp_path / "hs", appservice_registrations=[reg]) as hs:
        user_id, token = hs.register_user("alice", "secret")
        ...  # talk to hs.url

Only the stdlib is used here (Synapse runs in its own process), so importing this
module costs nothing and pulls in neither Synapse nor mautrix.

The folder is reusable: the port, server name and secrets are kept in
``localsynapse.json``, so starting the same ``base_dir`` again brings back the same
server, users and rooms on the same URL (the demo relies on that).
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import secrets
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matrix_sources.indexer.clock import REAL

from ..httpclient import HttpClient, Unreachable
from .synapseconfig import (
    CONFIG_FILE,
    LOG_FILE,
    SIGNING_KEY_FILE,
    TLS_CERT_FILE,
    TLS_KEY_FILE,
    write_config,
)

STATE_FILE = "localsynapse.json"  # what must survive restarts: port, server name, secret
STDIO_FILE = "stdio.log"  # errors printed before Synapse's logging is set up land here


class SynapseError(RuntimeError):
    """Synapse failed to start, or an API call to it failed."""


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no file)"


@dataclass(eq=False)  # identity equality: atexit.unregister must only match this server
class LocalSynapse:
    """One Synapse process whose config, keys, SQLite db, media and log live in base_dir.

    ``port=None`` picks a free port at the first start and keeps it in base_dir.
    ``appservice_registrations`` become ``app_service_config_files`` (rewritten each start).
    ``open_registration`` lets anyone register from a client (the demo's server only).
    """

    base_dir: Path
    server_name: str = "localhost"
    port: int | None = None
    appservice_registrations: list[Path] = field(default_factory=list)
    python: str = sys.executable
    log_level: str = "WARNING"
    # Anyone who can reach 127.0.0.1 may create an account: for the local demo only
    # (a person tries the bot as a second user from any client), never for tests.
    open_registration: bool = False
    # Federate with other LocalSynapses over loopback (tests/federation.py): a TLS
    # listener on this port and host, and the server named `HOST:PORT` (no .well-known
    # or SRV lookup). See `federating()`.
    federation_port: int | None = None
    federation_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir).absolute()
        self._proc: subprocess.Popen[bytes] | None = None
        self._secret: str | None = None

    @classmethod
    def federating(cls, base_dir: Path, host: str = "127.0.0.1", **kw: Any) -> LocalSynapse:
        """A server that federates over loopback with the others made so, named
        `HOST:PORT` after its federation listener (kept in base_dir like the rest).
        Another loopback address as `host` (127.0.0.2) gives a server a host of its
        own: a server ACL matches hosts without their ports, so one that denies
        127.0.0.1 would deny every server named `127.0.0.1:PORT`."""
        path = Path(base_dir).absolute() / STATE_FILE
        state = json.loads(path.read_text()) if path.exists() else {}
        port = state.get("federation_port") or _free_port(host)
        return cls(
            base_dir, server_name=f"{host}:{port}", federation_port=port, federation_host=host, **kw
        )

    @property
    def url(self) -> str:
        if self.port is None:
            raise SynapseError("port not known yet: call start() first")
        return f"http://127.0.0.1:{self.port}"

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 90) -> None:
        """Write config, make keys if needed, run Synapse, wait for /health to answer 200."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._load_state()
        assert self.port is not None and self._secret is not None  # _load_state set them
        write_config(
            self.base_dir,
            server_name=self.server_name,
            port=self.port,
            secret=self._secret,
            open_registration=self.open_registration,
            registrations=self.appservice_registrations,
            log_level=self.log_level,
            federation=None
            if self.federation_port is None
            else (self.federation_port, self.federation_host),
        )
        if not (self.base_dir / SIGNING_KEY_FILE).exists():
            self._run_synapse(["--generate-keys"], timeout)
        if self.federation_port is not None and not (self.base_dir / TLS_CERT_FILE).exists():
            self._self_signed(timeout)
        if _port_answers(self.port):
            # Otherwise /health would report the *other* server as ours.
            raise SynapseError(f"127.0.0.1:{self.port} is already in use")

        stdio = open(self.base_dir / STDIO_FILE, "wb")  # this run only, for the error tail
        with stdio:  # the child keeps its own copy of the descriptor
            self._proc = subprocess.Popen(
                [self.python, "-m", "synapse.app.homeserver", "-c", CONFIG_FILE],
                cwd=self.base_dir,  # the log config and relative paths resolve here
                stdin=subprocess.DEVNULL,
                stdout=stdio,
                stderr=subprocess.STDOUT,
            )
        atexit.register(self.stop)  # never leave an orphan Synapse behind

        deadline = REAL.now() + timeout
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.stop()
                raise SynapseError(f"Synapse exited with code {code}\n{self._logs()}")
            if self._health_ok():
                return
            if REAL.now() > deadline:
                self.stop()
                raise SynapseError(f"Synapse not healthy after {timeout}s\n{self._logs()}")
            REAL.sleep_blocking(0.1)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM, then SIGKILL after timeout seconds. Safe to call at any time."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # SIGTERM: Synapse shuts down cleanly and flushes SQLite
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> LocalSynapse:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ users

    def register_user(self, localpart: str, password: str, admin: bool = False) -> tuple[str, str]:
        """Create a user with the shared-secret admin API; returns (user_id, access_token)."""
        if self._secret is None:
            self._load_state()
        assert self._secret is not None  # _load_state set it
        path = "/_synapse/admin/v1/register"
        nonce = self._request("GET", path)["nonce"]
        # HMAC-SHA1 over nonce, user, password and admin flag, NUL-separated (Synapse docs).
        parts = (nonce, localpart, password, "admin" if admin else "notadmin")
        mac = hmac.new(self._secret.encode(), b"\x00".join(p.encode() for p in parts), hashlib.sha1)
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        resp = self._request("POST", path, body)
        return resp["user_id"], resp["access_token"]

    @property
    def config_file(self) -> Path:
        """homeserver.yaml, for Synapse's own tools (register_new_matrix_user -c)."""
        return self.base_dir / CONFIG_FILE

    def login(self, localpart: str, password: str) -> tuple[str, str]:
        """Log in with m.login.password; returns (user_id, access_token)."""
        resp = self._request(
            "POST",
            "/_matrix/client/v3/login",
            {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": localpart},
                "password": password,
            },
        )
        return resp["user_id"], resp["access_token"]

    # ---------------------------------------------------------------- internals

    def _load_state(self) -> None:
        """Read (or create) the persisted port and secret, so restarts keep the server."""
        path = self.base_dir / STATE_FILE
        state = json.loads(path.read_text()) if path.exists() else {}
        if state.get("server_name", self.server_name) != self.server_name:
            # Synapse refuses a database created under another server_name.
            raise SynapseError(
                f"{self.base_dir} belongs to server {state['server_name']!r}, "
                f"not {self.server_name!r}"
            )
        self.port = self.port or state.get("port") or _free_port()
        self._secret = state.get("registration_shared_secret") or secrets.token_urlsafe(32)
        new = {
            "server_name": self.server_name,
            "port": self.port,
            "registration_shared_secret": self._secret,
        }
        if self.federation_port is not None:
            new["federation_port"] = self.federation_port
        if new != state:
            path.write_text(json.dumps(new, indent=2) + "\n")

    def _self_signed(self, timeout: float) -> None:
        d = self.base_dir
        res = subprocess.run(
            [self.python, "-c", _SELF_SIGNED, str(d / TLS_CERT_FILE), str(d / TLS_KEY_FILE)]
            + [str(REAL.wall())],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if res.returncode != 0:
            raise SynapseError(f"no federation certificate:\n{res.stderr[-3000:]}")

    def _run_synapse(self, args: list[str], timeout: float) -> None:
        res = subprocess.run(
            [self.python, "-m", "synapse.app.homeserver", "-c", CONFIG_FILE, *args],
            cwd=self.base_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if res.returncode != 0:
            raise SynapseError(
                f"synapse {' '.join(args)} failed ({res.returncode}):\n"
                f"{res.stdout[-3000:]}{res.stderr[-3000:]}"
            )

    def _health_ok(self) -> bool:
        try:
            return HttpClient(self.url, timeout=2).call("GET", "/health").status == 200
        except Unreachable:
            return False

    def _logs(self) -> str:
        return (
            f"--- {STDIO_FILE} ---\n{_tail(self.base_dir / STDIO_FILE)}\n"
            f"--- {LOG_FILE} ---\n{_tail(self.base_dir / LOG_FILE)}"
        )

    def _request(
        self, method: str, path: str, body: dict | None = None, token: str | None = None
    ) -> dict[str, Any]:
        resp = HttpClient(self.url, token or None, timeout=30).call(method, path, body)
        if not resp.ok:
            raise SynapseError(
                f"{method} {path} -> {resp.status}: {resp.body.decode(errors='replace')}"
            )
        return resp.data if resp.body else {}


# A self-signed certificate for 127.0.0.1 (federation_verify_certificates is off on every
# LocalSynapse that federates), made by `cryptography`, a dependency of Synapse's: run in
# Synapse's interpreter, so neither this module nor the package depends on it.
_SELF_SIGNED = """
import datetime, ipaddress, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

cert, key, now = sys.argv[1], sys.argv[2], float(sys.argv[3])
pk = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
start = datetime.datetime.fromtimestamp(now, datetime.timezone.utc) - datetime.timedelta(days=1)
crt = (
    x509.CertificateBuilder().subject_name(name).issuer_name(name)
    .public_key(pk.public_key()).serial_number(x509.random_serial_number())
    .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=3650))
    .add_extension(
        x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        critical=False,
    )
    .sign(pk, hashes.SHA256())
)
open(key, "wb").write(pk.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
    serialization.NoEncryption(),
))
open(cert, "wb").write(crt.public_bytes(serialization.Encoding.PEM))
"""
