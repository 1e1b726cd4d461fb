"""The service's tokens (as_token, hs_token): from a file of their own when one is given,
else from the registration.

Where each token comes from, first match wins:

1. `appservice.as_token_file` / `appservice.hs_token_file` in config.yaml: that file
   must exist and hold the token (a missing or empty file stops the service, naming
   the key and the file);
2. `$CREDENTIALS_DIRECTORY/as_token` / `hs_token`, when systemd set the variable
   (`LoadCredential=as_token:/etc/credstore/matrix-sources.as_token` in the unit) and
   the file is there;
3. the registration's `as_token` / `hs_token`.

The registration stays what Synapse reads; with both tokens from files, the service's
copy of it may leave the token keys out. Token files the service writes itself
(`init --credentials-dir`) are mode 0600.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from .config import Config, ConfigError
from .datadir import TOKEN_KEYS, Registration, load_registration

ENV = "CREDENTIALS_DIRECTORY"


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
        raise ConfigError(where, key, f"{file}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(where, key, f"{file}: is a folder, not a token file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(where, key, f"{file}: cannot read it ({e})") from None
    if not text:
        raise ConfigError(where, key, f"{file}: is empty")
    if "CHANGE_ME" in text or len(text) < 16 or any(c.isspace() for c in text):
        raise ConfigError(where, key, f"{file}: does not hold a token (one line, the "
                          "registration's value, at least 16 characters)")
    return text


def token_files(cfg: Config, environ: Mapping[str, str] | None = None
                ) -> dict[str, TokenSource]:
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


def read_tokens(cfg: Config, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    tokens = {}
    for key, src in token_files(cfg, environ).items():
        if src.via.startswith("$"):
            tokens[key] = _read_token(src.file, Path(f"${ENV}"), key)
        else:
            tokens[key] = _read_token(src.file, cfg.file, src.via)
    return tokens


def service_registration(cfg: Config, environ: Mapping[str, str] | None = None
                         ) -> Registration:
    """The registration the service runs with: its tokens from their files when given."""
    tokens = read_tokens(cfg, environ)
    reg = load_registration(cfg.registration_path, optional_tokens=tuple(tokens))
    return replace(reg, **tokens)


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
