"""Server ACLs (`m.room.server_acl`): the servers a room's moderators shut out.

The spec's order (client-server API, `m.room.server_acl`), as Synapse applies it:

    no ACL in the room's state                      -> allowed
    the host is an IP literal, allow_ip_literals false -> denied
    the host matches a `deny` glob                  -> denied
    the host matches an `allow` glob                -> allowed
    otherwise                                       -> denied (no `allow`: every server)

The host is the server name without its port (`evil.example:8448` is `evil.example`).
A glob knows `*` (any run of characters, none too) and `?` (exactly one) and nothing
else (`[` is a plain character); it matches the whole host, ASCII case ignored, so
`evil.example` never matches `notevil.example`. Checked against Synapse's own evaluator
by tests/indexer/ingest/test_serveracl.py. Each glob becomes a regex whose segments
between stars are found leftmost and never revisited (atomic groups): the leftmost place
of a segment is always as good as any later one, so a hostile glob (`*a*a*a*a*b`) cannot
make it backtrack, and a 64 KiB ACL costs milliseconds per server, once.

Malformed content is read as Synapse reads it (a list that is not a list is empty, an
entry that is not a string is dropped, an `allow_ip_literals` that is not a boolean is
true), so the index obeys the ACL the homeserver enforces; each such thing, and a pattern
that can match no server name (a port, a space), is named in `problems` for the journal.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

SERVER_DENIED = "server_denied"
MAX_PROBLEMS = 5  # named in the journal; more are counted
_NOT_IN_HOSTS = frozenset(" \t\r\n/@#")  # no server name holds these


def host_of(server: str) -> str:
    """A server name without its port, as Synapse's parse_server_name cuts it:
    `[::1]:8448` -> `[::1]`, `ex.org:8448` -> `ex.org`, `ex.org` -> `ex.org`."""
    if server.endswith("]"):
        return server
    host, sep, _ = server.rpartition(":")
    return host if sep else server


def is_ip_literal(host: str) -> bool:
    """An IPv6 literal (`[...]`) or a dotted-quad IPv4 address."""
    if host.startswith("["):
        return True
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _literal(part: str) -> str:
    return "".join("." if c == "?" else re.escape(c) for c in part)


def compile_glob(glob: str) -> re.Pattern[str]:
    """`glob` (`*`, `?`) as a regex matched with `.match` against the whole text."""
    parts = glob.split("*")
    if len(parts) == 1:
        return re.compile(_literal(glob) + r"\Z", re.S)
    middle = "".join(f"(?>.*?{_literal(p)})" for p in parts[1:-1])
    return re.compile(_literal(parts[0]) + middle + ".*" + _literal(parts[-1]) + r"\Z", re.S)


def glob_matches(glob: str, text: str) -> bool:
    return compile_glob(glob).match(text) is not None


def _pattern_problem(pattern: str) -> str | None:
    if not pattern:
        return "is empty and matches no server"
    if any(c in _NOT_IN_HOSTS or not c.isprintable() for c in pattern):
        return "holds a character no server name has"
    if "]:" in pattern or (":" in pattern and not pattern.startswith("[")):
        return "names a port: the ACL matches hosts only (write the host alone)"
    return None


@dataclass(frozen=True, slots=True)
class ServerAcl:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    allow_ip_literals: bool = True
    # What was malformed, each naming its field and the fix (journalled by admit.py).
    problems: tuple[str, ...] = ()
    # The globs compiled, and the verdicts by server: few servers speak in a room, an
    # ACL may hold thousands of globs.
    _allow: tuple[re.Pattern[str], ...] = field(init=False, compare=False, repr=False)
    _deny: tuple[re.Pattern[str], ...] = field(init=False, compare=False, repr=False)
    _verdicts: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", tuple(map(compile_glob, self.allow)))
        object.__setattr__(self, "_deny", tuple(map(compile_glob, self.deny)))

    def allows(self, server: str) -> bool:
        """Whether the server (name, with or without a port) may take part in the room."""
        verdict = self._verdicts.get(server)
        if verdict is None:
            verdict = self._judge(host_of(server).lower())
            if len(self._verdicts) < 100_000:
                self._verdicts[server] = verdict
        return verdict

    def allows_user(self, user_id: str) -> bool:
        return self.allows(user_id.partition(":")[2])

    def _judge(self, host: str) -> bool:
        if not self.allow_ip_literals and is_ip_literal(host):
            return False
        if any(p.match(host) for p in self._deny):
            return False
        return any(p.match(host) for p in self._allow)


def _patterns(content: dict, key: str, problems: list[str]) -> tuple[str, ...]:
    raw = content.get(key, [])
    if not isinstance(raw, list):
        problems.append(f"{key} is not a list: read as empty, as Synapse does")
        return ()
    out = []
    for i, p in enumerate(raw):
        if not isinstance(p, str):
            problems.append(f"{key}[{i}] is not a string: ignored, as Synapse does")
            continue
        problem = _pattern_problem(p)
        if problem is not None:
            problems.append(f"{key}[{i}] {problem}")
        out.append(p.lower())
    return tuple(out)


def parse_acl(content: Any) -> ServerAcl:
    """The ACL an `m.room.server_acl` content sets (an empty content denies everyone,
    as the spec says)."""
    content = content if isinstance(content, dict) else {}
    problems: list[str] = []
    allow = _patterns(content, "allow", problems)
    deny = _patterns(content, "deny", problems)
    literals = content.get("allow_ip_literals", True)
    if not isinstance(literals, bool):
        problems.append("allow_ip_literals is not a boolean: read as true, as Synapse does")
        literals = True
    if not allow:
        problems.append("allow is empty: the spec denies every server (add allow: ['*'])")
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS:] = [f"and {len(problems) - MAX_PROBLEMS} more"]
    return ServerAcl(allow, deny, literals, tuple(problems))
