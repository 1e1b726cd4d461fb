"""pydantic's validation errors said in config.yaml's terms: the dotted key at fault and
what it accepts ("index.chroma.port: must be from 1 to 65535, not 0"; an unknown key
with the nearest known one), raised as `ConfigError`s."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config file that cannot be used: each line `<file>: <dotted.key>: <message>`."""

    def __init__(
        self, file: Path, key: str, message: str, more: tuple[tuple[str, str], ...] = ()
    ) -> None:
        lines = [f"{file}: {k}: {m}" if k else f"{file}: {m}" for k, m in ((key, message), *more)]
        super().__init__("\n".join(lines))
        self.file, self.key = file, key


class Refused(ValueError):
    """Raised by a section's cross-field check to name the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


_KINDS = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "path_type": "a path",
    "list_type": "a list",
    "tuple_type": "a list",
    "model_type": "a mapping of keys",
    "dataclass_type": "a mapping of keys",
    "dict_type": "a mapping of keys",
}


def problem(err: Mapping[str, Any], root: type) -> tuple[str, str]:
    """(dotted key, message) for one pydantic error of the model `root`:
    `index.chroma.port`, `gate.puppet_patterns[1]`."""
    loc = [p for p in err["loc"] if p not in ("function-after", "function-before")]
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "value_error" and isinstance(ctx.get("error"), Refused):
        loc.append(ctx["error"].field)
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    if kind == "missing":
        return key, "is missing"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return key, _unknown(root, loc)
    if kind == "value_error":
        return key, str(ctx.get("error", err["msg"]))
    if kind == "literal_error":
        return key, f"must be {ctx['expected'].replace(chr(39), '')}, not {value!r}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return key, f"must be {_bounds(root, loc, ctx)}, not {value!r}"
    if kind == "string_too_short":
        return key, "must not be empty"
    if kind in _KINDS:
        return key, f"must be {_KINDS[kind]}, not {value!r}"
    return key, err["msg"]


def _fields(cls: Any) -> dict[str, Any]:
    return getattr(cls, "model_fields", None) or getattr(cls, "__pydantic_fields__", {})


def _walk(root: type, loc: list[int | str]) -> tuple[Any, Any]:
    """The section that holds the key at `loc`, and the key's FieldInfo (None if no such
    key). List indices are stepped over."""
    section, info = root, None
    for part in (p for p in loc if not isinstance(p, int)):
        if info is not None:
            section = info.annotation
        info = _fields(section).get(part)
        if info is None:
            return section, None
    return section, info


def _unknown(root: type, loc: list[int | str]) -> str:
    section, _ = _walk(root, loc)
    known = sorted(_fields(section))
    near = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    return f"unknown key; {hint}the keys here are {', '.join(known)}"


def _bounds(root: type, loc: list[int | str], ctx: dict[str, Any]) -> str:
    """The key's whole range, from its field's constraints: 'from 1 to 20'."""
    _, info = _walk(root, loc)
    b = dict(ctx)
    for m in getattr(info, "metadata", ()):
        b.update(
            {n: getattr(m, n) for n in ("gt", "ge", "lt", "le") if getattr(m, n, None) is not None}
        )
    if "ge" in b and "le" in b:
        return f"from {b['ge']} to {b['le']}"
    low = f"above {b['gt']}" if "gt" in b else f"at least {b['ge']}" if "ge" in b else None
    high = f"below {b['lt']}" if "lt" in b else f"at most {b['le']}" if "le" in b else None
    if "gt" in b and not high:
        return f"greater than {b['gt']}"
    return " and ".join(x for x in (low, high) if x)
