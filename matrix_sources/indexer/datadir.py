"""`matrix-sources init`: a data dir with config, allowlist and a real registration.

The registration gets fresh random tokens and an exclusive user namespace holding the
bot user only: the service needs no other users and must not claim anyone else's.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ruamel.yaml import YAML

if TYPE_CHECKING:
    from .config import Config


def _template(name: str) -> str:
    """A template from config/: the installed package (wheel or editable), else the
    source tree. Read through importlib.resources: str() of its Traversable is no path."""
    from importlib.resources import files

    try:
        return files("matrix_sources_templates").joinpath(name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        here = Path(__file__).resolve().parent.parent / "config" / name
        return here.read_text(encoding="utf-8")


FILES = ("config.yaml", "allowlist.yaml", "registration.yaml")
TOKEN_KEYS = ("as_token", "hs_token")


class InitError(RuntimeError):
    pass


@dataclass(frozen=True)
class Registration:
    id: str
    url: str
    as_token: str
    hs_token: str
    sender_localpart: str


def registration_yaml(reg: Registration, domain: str) -> str:
    return (
        "# Appservice registration for matrix-sources, written by `matrix-sources init`.\n"
        "# Give this file to Synapse (app_service_config_files in homeserver.yaml) and\n"
        "# keep it secret: the tokens let anyone act as the bot.\n"
        f"id: {reg.id}\n"
        f"url: {reg.url}\n"
        f"as_token: {reg.as_token}\n"
        f"hs_token: {reg.hs_token}\n"
        f"sender_localpart: {reg.sender_localpart}\n"
        "rate_limited: false\n"
        "namespaces:\n"
        "  users:\n"
        "    - exclusive: true\n"
        # Anchored: Synapse tests namespaces with re.match, so an open end would also
        # claim remote users like @bot:domain.evil.org and have their events pushed here.
        f"      regex: '^@{re.escape(reg.sender_localpart)}:{re.escape(domain)}$'\n"
        "  aliases: []\n"
        "  rooms: []\n"
    )


def _write_registration(path: Path, text: str, synapse_group: str | None) -> None:
    """Mode 0600 for whoever runs `init`; with a group (Synapse's), 0640 and that group,
    so that Synapse running as its own user reads it and nobody else does."""
    import os
    import shutil

    gid = None
    if synapse_group is not None:
        import grp

        try:
            gid = grp.getgrnam(synapse_group).gr_gid
        except KeyError:
            raise InitError(
                f"--synapse-group {synapse_group}: no such group (the group "
                "Synapse runs as, e.g. matrix-synapse)"
            ) from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    if gid is not None:
        try:
            shutil.chown(path, group=gid)
        except PermissionError:
            raise InitError(
                f"{path}: cannot give it to group {synapse_group} (run init "
                f"as a member of {synapse_group}, or as root)"
            ) from None
        path.chmod(0o640)


def init_data_dir(
    data_dir: Path,
    homeserver_url: str = "http://127.0.0.1:8008",
    domain: str = "localhost",
    force: bool = False,
    as_port: int | None = None,
    synapse_group: str | None = None,
    credentials_dir: Path | None = None,
) -> list[Path]:
    data_dir = Path(data_dir)
    existing = [data_dir / f for f in FILES if (data_dir / f).exists()]
    if credentials_dir is not None:
        existing += [
            Path(credentials_dir) / k for k in TOKEN_KEYS if (Path(credentials_dir) / k).exists()
        ]
    if existing and not force:
        names = ", ".join(str(p) for p in existing)
        raise InitError(
            f"{names} already exist; pass --force to overwrite "
            "(the new registration gets new tokens: update Synapse too)"
        )
    data_dir.mkdir(parents=True, exist_ok=True)

    y = YAML()
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    config = y.load(_template("config.example.yaml"))
    config["homeserver"]["url"] = homeserver_url
    config["homeserver"]["domain"] = domain
    if as_port is not None:
        config["appservice"]["port"] = as_port
    buf = io.StringIO()
    y.dump(config, buf)
    (data_dir / "config.yaml").write_text(buf.getvalue(), encoding="utf-8")
    (data_dir / "allowlist.yaml").write_text(_template("allowlist.example.yaml"), encoding="utf-8")

    asc = config["appservice"]
    reg = Registration(
        id="matrix-sources",
        url=f"http://{asc['host']}:{asc['port']}",
        as_token=new_token(),
        hs_token=new_token(),
        sender_localpart=str(asc["bot_localpart"]),
    )
    path = data_dir / "registration.yaml"
    _write_registration(path, registration_yaml(reg, domain), synapse_group)
    written = [data_dir / f for f in FILES]
    api = data_dir / str(config["api"]["token_file"])
    write_token_file(api, new_token())
    written.append(api)
    if credentials_dir is not None:
        credentials_dir = Path(credentials_dir)
        credentials_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for key in TOKEN_KEYS:
            write_token_file(credentials_dir / key, getattr(reg, key))
            written.append(credentials_dir / key)
    return written


def load_registration(path: Path, optional_tokens: tuple[str, ...] = ()) -> Registration:
    """Read a registration and refuse placeholder tokens, saying how to make real ones.
    The tokens named in `optional_tokens` come from elsewhere (service_registration, below): they
    may be missing here (read as ""), and are not checked."""
    from .config import ConfigError, load_yaml

    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, "", "must be a YAML mapping")
    for key in optional_tokens:
        if not isinstance(data.get(key), str):
            data[key] = ""
    for key in ("id", "url", "as_token", "hs_token", "sender_localpart"):
        if key in optional_tokens:
            continue
        if not isinstance(data.get(key), str) or not data[key]:
            raise ConfigError(path, key, "is missing")
    for key in TOKEN_KEYS:
        if key in optional_tokens:
            continue
        if "CHANGE_ME" in data[key] or len(data[key]) < 16:
            raise ConfigError(
                path,
                key,
                "is a placeholder; generate a real registration with "
                "`matrix-sources init --data-dir DIR` and give Synapse that file",
            )
    return Registration(
        data["id"], data["url"], data["as_token"], data["hs_token"], data["sender_localpart"]
    )


# -- the service's tokens: from files of their own, else the registration ----------------
#
# Where each token comes from, first match wins:
#
# 1. `appservice.as_token_file` / `appservice.hs_token_file` in config.yaml: that file
#    must exist and hold the token (a missing or empty file stops the service, naming
#    the key and the file);
# 2. `$CREDENTIALS_DIRECTORY/as_token` / `hs_token`, when systemd set the variable
#    (`LoadCredential=as_token:/etc/credstore/matrix-sources/as_token` in the unit) and
#    the file is there;
# 3. the registration's `as_token` / `hs_token`.
#
# The registration stays what Synapse reads; with both tokens from files, the service's
# copy of it may leave the token keys out. Token files the service writes itself
# (`init --credentials-dir`) are mode 0600.

ENV = "CREDENTIALS_DIRECTORY"


def _config_error(*args):
    from .config import ConfigError

    return ConfigError(*args)


@dataclass(frozen=True)
class TokenSource:
    key: str  # as_token or hs_token
    file: Path  # where it was read
    via: str  # "appservice.as_token_file", "$CREDENTIALS_DIRECTORY", "registration"


def _read_token(file: Path, where: Path, key: str) -> str:
    """The token in `file` (surrounding whitespace dropped); errors read
    `<where>: <key>: <file>: why`."""
    try:
        text = file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise _config_error(where, key, f"{file}: no such file") from None
    except IsADirectoryError:
        raise _config_error(where, key, f"{file}: is a folder, not a token file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise _config_error(where, key, f"{file}: cannot read it ({e})") from None
    if not text:
        raise _config_error(where, key, f"{file}: is empty")
    if "CHANGE_ME" in text or len(text) < 16 or any(c.isspace() for c in text):
        raise _config_error(
            where,
            key,
            f"{file}: does not hold a token (one line, the "
            "registration's value, at least 16 characters)",
        )
    return text


def token_files(cfg: Config, environ: Mapping[str, str] | None = None) -> dict[str, TokenSource]:
    """For each token given outside the registration, where it is."""
    environ = os.environ if environ is None else environ
    out: dict[str, TokenSource] = {}
    creds = environ.get(ENV) or None
    for key in TOKEN_KEYS:
        configured = getattr(cfg.appservice, f"{key}_file")
        if configured is not None:  # relative: to the config's folder
            out[key] = TokenSource(key, cfg.data_dir / configured, f"appservice.{key}_file")
        elif creds is not None and (Path(creds) / key).exists():
            out[key] = TokenSource(key, Path(creds) / key, f"${ENV}")
    return out


def admin_token(cfg: Config) -> str:
    """homeserver.admin_token_file's token (erasures; appservice/homeserver/erasure.py)."""
    assert cfg.homeserver.admin_token_file is not None
    return _read_token(
        cfg.data_dir / cfg.homeserver.admin_token_file, cfg.file, "homeserver.admin_token_file"
    )


def read_tokens(cfg: Config, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    tokens = {}
    for key, src in token_files(cfg, environ).items():
        if src.via.startswith("$"):
            tokens[key] = _read_token(src.file, Path(f"${ENV}"), key)
        else:
            tokens[key] = _read_token(src.file, cfg.file, src.via)
    return tokens


def service_registration(cfg: Config, environ: Mapping[str, str] | None = None) -> Registration:
    """The registration the service runs with: its tokens from their files when given."""
    tokens = read_tokens(cfg, environ)
    reg = load_registration(cfg.registration_path, optional_tokens=tuple(tokens))
    return replace(reg, **tokens)


def new_token() -> str:
    return secrets.token_urlsafe(32)


# -- the search API's read token (appservice/homeserver/search_api.py) -------------------
#
# Its own, in `api.token_file` (DATA_DIR/api_token by default): read by the service and
# by the commands that ask it (`search`, `mcp`), so not a systemd credential, which
# only the service's unit sees. Never one of the appservice tokens: a program that may
# search must not be able to push transactions or act as the bot.


def api_token(cfg: Config, create: bool = False) -> str:
    """The search API's read token. `create` (the service at start): write a fresh one
    (0600) when its file is missing, as `init` does."""
    path = cfg.api_token_path
    if create and not path.exists():
        if not path.parent.is_dir():
            raise _config_error(cfg.file, "api.token_file", f"{path}: its folder does not exist")
        write_token_file(path, new_token())
    return _read_token(path, cfg.file, "api.token_file")


def check_api_token(cfg: Config, token: str, reg: Registration) -> None:
    """Refuse a read token that is an appservice token: whoever holds it could push
    transactions or act as the bot."""
    import hmac

    for key in TOKEN_KEYS:
        if hmac.compare_digest(token.encode(), getattr(reg, key).encode()):
            raise _config_error(
                cfg.file,
                "api.token_file",
                f"{cfg.api_token_path} holds the "
                f"appservice's {key}; the search API needs a token of its own "
                f"(delete the file: `run` writes a fresh one)",
            )


def write_token_file(path: Path, token: str) -> None:
    """Mode 0600 from its creation: never readable by others, not even for a moment."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)


def readable_by_others(path: Path, group_ok: bool = False) -> str | None:
    """'others' or 'its group' when the file's mode lets them read it, else None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & stat.S_IROTH:
        return "everyone"
    if not group_ok and mode & stat.S_IRGRP:
        return "its group"
    return None
