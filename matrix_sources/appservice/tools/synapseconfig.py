"""The files a throwaway Synapse (localsynapse.py) starts from, written afresh at each
start: homeserver.yaml (SQLite, no outside federation, every rate limit relaxed; with a
federation listener, the other loopback servers trusted as they are) and its log config.
JSON is valid YAML, so the stdlib writes both."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CONFIG_FILE = "homeserver.yaml"
LOG_CONFIG_FILE = "log.config.yaml"
LOG_FILE = "homeserver.log"
SIGNING_KEY_FILE = "signing.key"
TLS_CERT_FILE, TLS_KEY_FILE = "federation.crt", "federation.key"

# Generous enough that tests and history replays never see M_LIMIT_EXCEEDED.
# per_second must stay > 0: Synapse divides by it when pruning its buckets.
_RELAXED = {"per_second": 1000, "burst_count": 100000}

# Every rc_* key that synapse/config/ratelimiting.py reads in Synapse 1.163
# (unknown keys are ignored by older versions, so listing extras is harmless).
_RATE_LIMITS: dict[str, Any] = {
    "rc_message": _RELAXED,
    "rc_registration": _RELAXED,
    "rc_registration_token_validity": _RELAXED,
    "rc_login": {"address": _RELAXED, "account": _RELAXED, "failed_attempts": _RELAXED},
    "rc_admin_redaction": _RELAXED,
    "rc_joins": {"local": _RELAXED, "remote": _RELAXED},
    "rc_joins_per_room": _RELAXED,
    "rc_key_requests": _RELAXED,
    "rc_3pid_validation": _RELAXED,
    "rc_invites": {"per_room": _RELAXED, "per_user": _RELAXED, "per_issuer": _RELAXED},
    "rc_third_party_invite": _RELAXED,
    "rc_media_create": _RELAXED,
    "rc_presence": {"per_user": _RELAXED},
    "rc_delayed_event_mgmt": _RELAXED,
    "rc_room_creation": _RELAXED,
    "rc_reports": _RELAXED,
    "rc_user_directory": _RELAXED,
    "rc_profile": _RELAXED,
}


def write_config(
    d: Path,
    *,
    server_name: str,
    port: int,
    secret: str,
    open_registration: bool,
    registrations: Iterable[Path],
    log_level: str,
    federation: tuple[int, str] | None = None,
) -> None:
    """homeserver.yaml and its log config in `d`, rewritten at each start.
    `federation`: the TLS listener's (port, host), for a server that federates."""
    config = {
        "server_name": server_name,
        "pid_file": str(d / "homeserver.pid"),
        "listeners": _client_listeners(port),
        "database": {"name": "sqlite3", "args": {"database": str(d / "homeserver.db")}},
        "media_store_path": str(d / "media_store"),
        "log_config": str(d / LOG_CONFIG_FILE),
        "registration_shared_secret": secret,
        "enable_registration": open_registration,
        # Synapse refuses open registration without a captcha or email unless told
        # so; the server listens on 127.0.0.1 and federates with nobody.
        "enable_registration_without_verification": open_registration,
        "report_stats": False,
        "signing_key_path": str(d / SIGNING_KEY_FILE),
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "federation_domain_whitelist": [],  # empty list: federate with nobody
        "url_preview_enabled": False,
        "enable_metrics": False,
        "presence": {"enabled": False},
        "app_service_config_files": [str(Path(p).absolute()) for p in registrations],
        **_RATE_LIMITS,
        **_federation_config(d, port, federation),
    }
    log_config = {
        "version": 1,
        "formatters": {
            "precise": {
                "format": "%(asctime)s - %(name)s - %(lineno)d - %(levelname)s"
                " - %(request)s - %(message)s"
            }
        },
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "formatter": "precise",
                "filename": LOG_FILE,
                "encoding": "utf8",
            }
        },  # relative to cwd=base_dir
        # WARNING keeps the file small; the SQL logger at DEBUG would leak tokens.
        "loggers": {"synapse.storage.SQL": {"level": "WARNING"}},
        "root": {"level": log_level, "handlers": ["file"]},
        "disable_existing_loggers": False,
    }
    (d / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    (d / LOG_CONFIG_FILE).write_text(json.dumps(log_config, indent=2) + "\n")


def _federation_config(d: Path, port: int, federation: tuple[int, str] | None) -> dict[str, Any]:
    """With a federation port: a TLS listener for federation and keys, and every
    other server on 127.0.0.1 trusted as it is (a self-signed certificate, an IP
    literal that Synapse would otherwise block, keys fetched from the server itself)."""
    if federation is None:
        return {}
    federation_port, federation_host = federation
    return {
        "listeners": [
            *_client_listeners(port),
            {
                "port": federation_port,
                "bind_addresses": [federation_host],
                "type": "http",
                "tls": True,
                "x_forwarded": False,
                "resources": [{"names": ["federation", "keys"], "compress": False}],
            },
        ],
        "tls_certificate_path": str(d / TLS_CERT_FILE),
        "tls_private_key_path": str(d / TLS_KEY_FILE),
        "federation_verify_certificates": False,
        "federation_domain_whitelist": None,  # anyone
        # Synapse 1.163 checks an IP-literal server name against this list only.
        "ip_range_blacklist": [],
        "rc_federation": {
            "window_size": 1000,
            "sleep_limit": 10000,
            "sleep_delay": 0,
            "reject_limit": 10000,
            "concurrent": 100,
        },
    }


def _client_listeners(port: int) -> list[dict[str, Any]]:
    return [
        {
            "port": port,
            "bind_addresses": ["127.0.0.1"],
            "type": "http",
            "tls": False,
            "x_forwarded": False,
            "resources": [{"names": ["client"], "compress": False}],
        }
    ]
