"""The kinds of value config.yaml holds, checked as pydantic reads them: YAML gives int,
float, str and bool, and none is coerced into another (`port: "8000"` is refused)."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, Strict

Int = Annotated[int, Strict()]
Str = Annotated[str, Strict()]
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]  # an int is a float too
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0)]
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
RelativePath = Annotated[str, Strict(), Field(min_length=1)]  # to the config's folder
Fraction = Annotated[float, Strict(), Field(gt=0, le=1)]


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"not a regex: {e}") from None
    return value


def _user_id(value: str) -> str:
    if not re.fullmatch(r"@[^:\s]+:\S+", value):
        raise ValueError(f"{value!r} is not a user id like '@alice:example.org'")
    return value


def _not_placeholder(value: str) -> str:
    if is_placeholder(value):
        raise ValueError(f"{value!r} is a placeholder: set your homeserver's")
    return value


def _http_url(value: str) -> str:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"must be an http(s) URL, not {value!r}")
    return value.rstrip("/")


def _script(value: str) -> str:
    """A script as indexer.search.tokens.script names it: the first word of its letters'
    Unicode names, lower case."""
    import unicodedata

    if not re.fullmatch(r"[a-z]+", value) or not any(
        unicodedata.name(chr(c), "").lower().startswith(value + " ")
        for c in range(0x41, 0x3134F)
        if chr(c).isalpha()
    ):
        raise ValueError(
            f"{value!r} is not a script's name as Unicode names its letters, "
            "lower case (latin, cyrillic, greek, arabic, hebrew, cjk, hangul...)"
        )
    return value


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw])")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_NAMED_DURATIONS = {"hourly": 3600, "daily": 86400, "weekly": 7 * 86400}


def duration_seconds(value: str) -> float:
    """`weekly`, `daily`, `hourly`, or a number and a unit: `30m`, `12h`, `7d`, `2w`."""
    if value in _NAMED_DURATIONS:
        return float(_NAMED_DURATIONS[value])
    m = _DURATION.fullmatch(value.strip())
    if m is None:
        raise ValueError(
            f"{value!r} is not a duration: write weekly, daily, hourly, or a "
            "number and m, h, d or w (30m, 12h, 7d, 2w)"
        )
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


def _duration(value: str) -> str:
    if duration_seconds(value) < 60:
        raise ValueError(f"{value!r} is under a minute")
    return value


def _room_ref(value: str) -> str:
    if not re.fullmatch(r"![^\s]+|#[^\s:]+:[^\s]+", value):
        raise ValueError(f"{value!r} is not a room id (!...) or a room alias (#name:server)")
    return value


def empty_is_unset(cls: type, data: Any) -> Any:
    """`key:` with no value (or a section whose keys are all commented out) reads as an
    unset key: its default. Each section runs it first."""
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if v is not None}
    return data


def is_placeholder(value: str) -> bool:
    """CHANGE_ME anywhere, or the host example.com or a subdomain of it (not any name
    that merely contains the letters, like myexample.community)."""
    if "CHANGE_ME" in value:
        return True
    host = urlsplit(value).hostname if "://" in value else value.rsplit(":", 1)[0]
    host = (host or "").lower().rstrip(".")
    return host == "example.com" or host.endswith(".example.com")


Regex = Annotated[Str, AfterValidator(_regex)]
UserId = Annotated[Str, AfterValidator(_user_id)]
HomeserverUrl = Annotated[Str, AfterValidator(_http_url), AfterValidator(_not_placeholder)]
ServerName = Annotated[Str, AfterValidator(_not_placeholder)]
Script = Annotated[Str, AfterValidator(_script)]
Duration = Annotated[Str, AfterValidator(_duration)]
RoomRef = Annotated[Str, AfterValidator(_room_ref)]
