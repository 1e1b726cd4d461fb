"""Reading config.yaml: the file, its validation (every error as `<file>: <dotted.key>:
<message>`), and the bridges' registrations it names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import ConfigError, problem
from .sections import Config


def load_yaml(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return YAML(typ="safe").load(f)
    except FileNotFoundError:
        raise ConfigError(
            path, "", "no such file; create it with `matrix-sources init --data-dir DIR`"
        ) from None
    except IsADirectoryError:
        raise ConfigError(path, "", "is a folder, not a file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(path, "", f"cannot read it ({e})") from None
    except YAMLError as e:
        raise ConfigError(path, "", f"not valid YAML: {e}") from None


def load_config(path: Path) -> Config:
    path = Path(path).resolve()
    if path.is_dir():
        raise ConfigError(
            path, "", f"is a folder; give the config file in it ({path / 'config.yaml'})"
        )
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, "", "must be a YAML mapping")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        problems = [problem(err, Config) for err in e.errors()]
        raise ConfigError(path, *problems[0], more=tuple(problems[1:])) from None
    cfg._file = path
    cfg._bridges, cfg._bridge_patterns = _bridge_namespaces(
        path, cfg.gate.bridge_registrations, cfg.bot_user
    )
    return cfg


def _bridge_namespaces(
    file: Path, entries: tuple[str, ...], bot_user: str
) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """Other appservices' registration files (bridges): the regexes of their user
    namespaces are puppet patterns, of the homeserver's users only (an appservice owns
    no user of another server). Synapse matches them with re.match, as the gate does."""
    paths: list[Path] = []
    patterns: list[str] = []
    for i, entry in enumerate(entries):
        k = f"gate.bridge_registrations[{i}]"
        reg = file.parent / entry
        try:
            data = YAML(typ="safe").load(reg.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(file, k, f"{reg}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(file, k, f"{reg}: cannot read it ({e})") from None
        except YAMLError as e:
            raise ConfigError(file, k, f"{reg}: not valid YAML: {e}") from None
        users = (data.get("namespaces") or {}).get("users") if isinstance(data, dict) else None
        if not isinstance(users, list) or not users:
            raise ConfigError(
                file,
                k,
                f"{reg}: no namespaces.users list; is it a bridge's appservice registration?",
            )
        for j, ns in enumerate(users):
            where = f"{reg}: namespaces.users[{j}].regex"
            regex = ns.get("regex") if isinstance(ns, dict) else None
            if not isinstance(regex, str) or not regex:
                raise ConfigError(file, k, f"{where} is missing")
            try:
                compiled = re.compile(regex)
            except re.error as e:
                raise ConfigError(file, k, f"{where}: not a regex: {e}") from None
            if compiled.match(bot_user):
                raise ConfigError(
                    file,
                    k,
                    f"{where} {regex!r} matches the bot {bot_user}: "
                    "list bridges' registrations here, not this service's own",
                )
            patterns.append(regex)
        paths.append(reg)
    return tuple(paths), tuple(patterns)
