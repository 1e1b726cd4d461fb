"""The service's configuration, read and validated once into typed records.

Every error names the key and the file, and says how to fix it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .chunker import ChunkPolicy
from .embedder import BACKENDS, DEFAULT_BACKEND
from .gate import DEFAULT_PUPPET_PATTERNS

PLACEHOLDERS = ("example.com", "CHANGE_ME")


def is_placeholder(value: str) -> bool:
    """CHANGE_ME anywhere, or the host example.com or a subdomain of it (not any name
    that merely contains the letters, like myexample.community)."""
    if "CHANGE_ME" in value:
        return True
    host = urlsplit(value).hostname if "://" in value else value.rsplit(":", 1)[0]
    host = (host or "").lower().rstrip(".")
    return host == "example.com" or host.endswith(".example.com")


class ConfigError(ValueError):
    def __init__(self, file: Path, key: str, message: str) -> None:
        super().__init__(f"{file}: {key}: {message}" if key else f"{file}: {message}")
        self.file, self.key = file, key


@dataclass(frozen=True)
class ChromaConfig:
    mode: str = "embedded"
    path: Path = Path("chroma")
    host: str | None = None
    port: int = 8000


@dataclass(frozen=True)
class DerivedConfig:
    """The derived filter (DESIGN.md "Derived filter"): per-kind thresholds of the
    containment score, the length below which nothing matches, the shingle size."""

    answer_threshold: float = 0.8
    reference_threshold: float = 0.5
    min_words: int = 8
    shingle_size: int = 5


@dataclass(frozen=True)
class Config:
    file: Path
    data_dir: Path
    homeserver_url: str
    domain: str
    as_host: str
    as_port: int
    registration: Path
    bot_localpart: str
    bot_displayname: str
    allowlist: Path
    embedder: str
    policy: ChunkPolicy
    debounce_seconds: float
    chroma: ChromaConfig
    default_top_k: int
    rrf_k: int
    rate_limit_per_minute: int
    # gate.puppet_patterns plus the user namespaces of gate.bridge_registrations
    puppet_patterns: tuple[str, ...] = DEFAULT_PUPPET_PATTERNS
    bridge_registrations: tuple[Path, ...] = ()
    log_level: str = "INFO"
    # Least seconds between two scrubs of Chroma's files after edits and redactions.
    scrub_interval_seconds: float = 60.0
    log_format: str = "text"
    backfill_days: float | None = None  # None: a room's whole history
    lexical_max_terms: int = 5  # texts this short also get the BM25 leg; 0: never
    admins: tuple[str, ...] = ()
    # How the model runs (embedder.py BACKENDS); issue 14 moves this into its pydantic model.
    embedder_backend: str = DEFAULT_BACKEND
    raw: dict = field(default_factory=dict, repr=False)
    derived: DerivedConfig = field(default_factory=DerivedConfig)

    @property
    def bot_user(self) -> str:
        return f"@{self.bot_localpart}:{self.domain}"

    @property
    def eventlog_path(self) -> Path:
        return self.data_dir / "eventlog.sqlite3"

    @property
    def journal_path(self) -> Path:
        return self.data_dir / "journal.jsonl"


class _Reader:
    def __init__(self, file: Path, data: dict) -> None:
        self.file, self.data = file, data

    def get(self, dotted: str, kind: type | tuple, default: Any = ...) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node or node[part] is None:
                if default is ...:
                    raise ConfigError(self.file, dotted, "is missing")
                return default
            node = node[part]
        if isinstance(node, bool) and kind in (int, float):
            raise ConfigError(self.file, dotted, f"must be a number, not {node!r}")
        if kind is float and isinstance(node, int):
            node = float(node)
        if not isinstance(node, kind):
            name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise ConfigError(self.file, dotted, f"must be a {name}, not {node!r}")
        return node

    def positive(self, dotted: str, kind: type, default: Any) -> Any:
        v = self.get(dotted, kind, default)
        if v <= 0:
            raise ConfigError(self.file, dotted, f"must be greater than 0, not {v}")
        return v


def load_yaml(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return YAML(typ="safe").load(f)
    except FileNotFoundError:
        raise ConfigError(path, "", "no such file; create it with `matrix-sources init "
                          "--data-dir DIR`") from None
    except YAMLError as e:
        raise ConfigError(path, "", f"not valid YAML: {e}") from None


def load_config(path: Path) -> Config:
    path = Path(path).resolve()
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, "", "must be a YAML mapping")
    r = _Reader(path, data)
    base = path.parent

    url = r.get("homeserver.url", str)
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(path, "homeserver.url", f"must be an http(s) URL, not {url!r}")
    domain = r.get("homeserver.domain", str)
    for key, value in (("homeserver.url", url), ("homeserver.domain", domain)):
        if is_placeholder(value):
            raise ConfigError(path, key, f"{value!r} is a placeholder: set your homeserver's")
    mode = r.get("index.chroma.mode", str, "embedded")
    if mode not in ("embedded", "server"):
        raise ConfigError(path, "index.chroma.mode", f"must be embedded or server, not {mode!r}")
    chroma = ChromaConfig(
        mode=mode,
        path=base / r.get("index.chroma.path", str, "chroma"),
        host=r.get("index.chroma.host", str, "127.0.0.1" if mode == "server" else None),
        port=r.positive("index.chroma.port", int, 8000),
    )
    patterns = r.get("gate.puppet_patterns", list, list(DEFAULT_PUPPET_PATTERNS))
    for i, p in enumerate(patterns):
        try:
            re.compile(p)
        except (re.error, TypeError) as e:
            raise ConfigError(path, f"gate.puppet_patterns[{i}]", f"not a regex: {e}") from None
    top_k = r.get("search.default_top_k", int, 5)
    if not 1 <= top_k <= 20:
        raise ConfigError(path, "search.default_top_k", f"must be 1 to 20, not {top_k}")
    level = r.get("logging.level", str, "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(path, "logging.level", "must be DEBUG, INFO, WARNING or ERROR")
    localpart = r.get("appservice.bot_localpart", str, "sourcesbot")
    if not re.fullmatch(r"[a-z0-9._=/-]+", localpart):
        raise ConfigError(path, "appservice.bot_localpart", f"{localpart!r} is not a valid localpart")
    bridges, bridge_patterns = _bridge_namespaces(r, base, f"@{localpart}:{domain}")
    return Config(
        file=path,
        data_dir=base,
        homeserver_url=url.rstrip("/"),
        domain=domain,
        as_host=r.get("appservice.host", str, "127.0.0.1"),
        as_port=r.positive("appservice.port", int, 29316),
        registration=base / r.get("appservice.registration", str, "registration.yaml"),
        bot_localpart=localpart,
        bot_displayname=r.get("appservice.bot_displayname", str, "Sources"),
        allowlist=base / r.get("allowlist", str, "allowlist.yaml"),
        embedder=r.get("index.embedder", str, "all-MiniLM-L6-v2"),
        policy=ChunkPolicy(max_bytes=r.positive("index.window_max_bytes", int, 500),
                           gap_ms=int(r.positive("index.window_gap_seconds", float, 1800.0) * 1000)),
        debounce_seconds=r.get("index.debounce_seconds", float, 1.0),
        scrub_interval_seconds=r.positive("index.scrub_interval_seconds", float, 60.0),
        chroma=chroma,
        default_top_k=top_k,
        rrf_k=r.positive("search.rrf_k", int, 60),
        rate_limit_per_minute=r.get("search.rate_limit_per_minute", int, 6),
        puppet_patterns=tuple(patterns) + bridge_patterns,
        bridge_registrations=bridges,
        log_level=level,
        log_format=_log_format(r),
        backfill_days=r.get("index.backfill_days", float, None),
        lexical_max_terms=r.get("search.lexical_max_terms", int, 5),
        admins=_admins(r),
        embedder_backend=_backend(r),
        raw=data,
        derived=_derived(r),
    )


def _backend(r: _Reader) -> str:
    backend = r.get("embedder.backend", str, DEFAULT_BACKEND)
    if backend not in BACKENDS:
        raise ConfigError(r.file, "embedder.backend",
                          f"must be one of {', '.join(BACKENDS)}, not {backend!r}")
    return backend


def _log_format(r: _Reader) -> str:
    fmt = r.get("logging.format", str, "text")
    if fmt not in ("text", "json"):
        raise ConfigError(r.file, "logging.format", f"must be text or json, not {fmt!r}")
    return fmt


def _admins(r: _Reader) -> tuple[str, ...]:
    admins = r.get("search.admins", list, [])
    for i, a in enumerate(admins):
        if not isinstance(a, str) or not re.fullmatch(r"@[^:\s]+:\S+", a):
            raise ConfigError(r.file, f"search.admins[{i}]", f"{a!r} is not a user id like "
                              "'@alice:example.org'")
    return tuple(admins)


def _bridge_namespaces(r: _Reader, base: Path,
                       bot_user: str) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """Other appservices' registration files (bridges): the regexes of their user
    namespaces are puppet patterns. Synapse matches them with re.match, as the gate does."""
    key = "gate.bridge_registrations"
    files = r.get(key, list, [])
    paths: list[Path] = []
    patterns: list[str] = []
    for i, entry in enumerate(files):
        k = f"{key}[{i}]"
        if not isinstance(entry, str) or not entry:
            raise ConfigError(r.file, k, f"must be the path of a registration file, not {entry!r}")
        reg = base / entry
        try:
            data = YAML(typ="safe").load(reg.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(r.file, k, f"{reg}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(r.file, k, f"{reg}: cannot read it ({e})") from None
        except YAMLError as e:
            raise ConfigError(r.file, k, f"{reg}: not valid YAML: {e}") from None
        users = (data.get("namespaces") or {}).get("users") if isinstance(data, dict) else None
        if not isinstance(users, list) or not users:
            raise ConfigError(r.file, k, f"{reg}: no namespaces.users list; is it a bridge's "
                              "appservice registration?")
        for j, ns in enumerate(users):
            where = f"{reg}: namespaces.users[{j}].regex"
            regex = ns.get("regex") if isinstance(ns, dict) else None
            if not isinstance(regex, str) or not regex:
                raise ConfigError(r.file, k, f"{where} is missing")
            try:
                compiled = re.compile(regex)
            except re.error as e:
                raise ConfigError(r.file, k, f"{where}: not a regex: {e}") from None
            if compiled.match(bot_user):
                raise ConfigError(r.file, k, f"{where} {regex!r} matches the bot {bot_user}: "
                                  "list bridges' registrations here, not this service's own")
            patterns.append(regex)
        paths.append(reg)
    return tuple(paths), tuple(patterns)


def _derived(r: _Reader) -> DerivedConfig:
    d = DerivedConfig()
    values = {}
    for key in ("answer_threshold", "reference_threshold"):
        v = r.get(f"derived.{key}", float, getattr(d, key))
        if not 0 < v <= 1:
            raise ConfigError(r.file, f"derived.{key}", f"must be above 0 and at most 1, not {v}")
        values[key] = v
    k = r.get("derived.shingle_size", int, d.shingle_size)
    if not 1 <= k <= 16:
        raise ConfigError(r.file, "derived.shingle_size", f"must be 1 to 16 words, not {k}")
    n = r.get("derived.min_words", int, d.min_words)
    if n < k:
        raise ConfigError(r.file, "derived.min_words",
                          f"must be at least derived.shingle_size ({k}), not {n}")
    return DerivedConfig(shingle_size=k, min_words=n, **values)
