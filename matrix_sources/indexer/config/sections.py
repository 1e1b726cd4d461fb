"""config.yaml's sections, one pydantic model each, and `Config`, which holds them all
with every default and what follows from where the file is (paths, bridges)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as checked_dataclass

from ..records import ChunkPolicy
from .database import Database, DatabaseUrl, parse_database
from .errors import Refused
from .per_model import (
    DEFAULT_BACKEND,
    EMBEDDER_BACKENDS,
    MODEL_FLOORS,
    MODEL_SCRIPT_MARGINS,
    ONE_BACKEND,
    EmbedderBackend,
)
from .values import (
    Duration,
    Fraction,
    HomeserverUrl,
    Int,
    NonNegativeFloat,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
    Regex,
    RelativePath,
    RoomRef,
    Script,
    ServerName,
    Str,
    UserId,
    duration_seconds,
    empty_is_unset,
)

# Where the ONNX exports of the packaged model are, instead of the data dir's models/: the
# container image sets it to the exports it made at build time (Containerfile), so the
# first start exports nothing and the image needs no torch.
MODELS_DIR_ENV = "MATRIX_SOURCES_MODELS_DIR"

# Discord bridges' puppets: mautrix-discord (@discord_123...) and matrix-appservice-discord
# (@_discord_123...). On unless the config says otherwise.
DEFAULT_PUPPET_PATTERNS = (r"^@_?discord_[^:]*:.*$",)

log = logging.getLogger(__name__)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    _unset = model_validator(mode="before")(empty_is_unset)


_CHECKED = ConfigDict(extra="forbid")  # the sections that are also public dataclasses


class HomeserverSettings(_Section):
    url: HomeserverUrl
    domain: ServerName
    # A Synapse admin's access token in a file (0600): erasures reach the index
    # (appservice/homeserver/erasure.py). Unset: only `matrix-sources forget` does.
    admin_token_file: RelativePath | None = None


class AppserviceSettings(_Section):
    host: Str = "127.0.0.1"
    port: Port = 29316
    registration: RelativePath = "registration.yaml"
    bot_localpart: Str = "sourcesbot"
    bot_displayname: Str = "Sources"
    # Files holding one token each (a systemd credential, a secrets mount): when set, the service
    # reads that token there instead of from the registration (datadir.py, "the service's tokens").
    as_token_file: RelativePath | None = None
    hs_token_file: RelativePath | None = None

    @field_validator("bot_localpart")
    @classmethod
    def _localpart(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9._=/-]+", v):
            raise ValueError(f"{v!r} is not a valid localpart")
        return v


class SegmentSettings(_Section):
    """The collection's segments (store/vectors/segments.py): a compaction copies only those
    holding a deleted or overwritten point."""

    # Defaults just under powers of two: an HNSW index holds the next one (segments.py).
    hot_windows: Annotated[int, Strict(), Field(ge=1)] = 2_000
    merge_fanout: Annotated[int, Strict(), Field(ge=2)] = 4
    max_windows: Annotated[int, Strict(), Field(ge=1)] = 32_000

    @model_validator(mode="after")
    def _hot_fits(self) -> SegmentSettings:
        if self.max_windows < self.hot_windows:
            raise ValueError(
                f"max_windows ({self.max_windows}) is below hot_windows "
                f"({self.hot_windows}): a sealed segment could not be merged"
            )
        return self


@checked_dataclass(frozen=True, config=_CHECKED)
class ChromaConfig:
    mode: Literal["embedded", "server"] = "embedded"
    path: Annotated[Path, Strict(False)] = Path("chroma")  # relative: to the config's folder
    host: Str | None = None  # server mode: 127.0.0.1 unless set
    port: Port = 8000
    # Server mode: the server's --path, if this host reaches it: what the server keeps
    # of dropped collections is removed after each compaction (store/vectors/server_files.py).
    persist_dir: Annotated[Path, Strict(False)] | None = None
    segments: SegmentSettings = SegmentSettings()
    _unset = model_validator(mode="before")(empty_is_unset)

    @model_validator(mode="after")
    def _persist_dir_is_a_servers(self) -> ChromaConfig:
        if self.persist_dir is not None and self.mode != "server":
            raise ValueError(
                "persist_dir is for mode: server (the folder of `chroma run "
                "--path`); the embedded store's folder is path"
            )
        return self


class EmbedderSettings(_Section):
    model: Annotated[Str, Field(min_length=1)] = "all-MiniLM-L6-v2"
    backend: EmbedderBackend = DEFAULT_BACKEND

    @model_validator(mode="before")
    @classmethod
    def _the_models_backend(cls, data: Any) -> Any:
        """Unset, or one the model does not run on, the backend is the model's own: the
        README's one-line change of model works on the config `init` wrote (its
        `backend: onnx-int8`), with a log line saying which backend runs instead."""
        if not isinstance(data, dict) or not isinstance(data.get("model"), str):
            return data
        model, written = data["model"], data.get("backend")
        only = ONE_BACKEND.get(model)
        if written is None:
            return {**data, "backend": only} if only else data
        if written not in EMBEDDER_BACKENDS:
            return data  # refused by the field's own check, naming the choices
        if only and written != only:
            backend = only
        elif not only and written in ONE_BACKEND.values():
            backend = DEFAULT_BACKEND
        else:
            return data
        log.warning(
            "embedder_backend_fallback",
            extra={"model": model, "written": written, "backend": backend},
        )
        return {**data, "backend": backend}

    @model_validator(mode="after")
    def _backend_runs_the_model(self) -> EmbedderSettings:
        if self.backend.startswith("torch") and find_spec("torch") is None:
            # The container image leaves torch out (the ONNX backends need none). An old
            # `embedder: NAME` reads as torch: say how to move on.
            raise Refused(
                "backend",
                f"{self.backend} runs on PyTorch, which is not "
                "installed here (the container image leaves it out): write "
                "`backend: onnx-int8` (the collection is rebuilt from the event "
                "log at the next start), or install torch==2.13.0",
            )
        return self


_CHUNKS = ChunkPolicy()  # the window settings' defaults are the chunker's own


class IndexSettings(_Section):
    embedder: EmbedderSettings = EmbedderSettings()
    window_max_bytes: PositiveInt = _CHUNKS.max_bytes
    window_gap_seconds: PositiveFloat = _CHUNKS.gap_ms / 1000
    debounce_seconds: NonNegativeFloat = 1.0  # 0: no wait
    compaction_interval_seconds: PositiveFloat = 60.0
    # Pending messages at most: past it, transactions are answered 503 and Synapse
    # keeps them and retries (appservice/homeserver/backlog.py).
    max_pending: PositiveInt = 10_000
    require_world_readable: bool = False  # only what the public archive would show
    backfill_days: PositiveFloat | None = None  # None: a room's whole history
    answer_horizon_hours: PositiveFloat = 24.0
    answer_horizon_messages: Annotated[int, Strict(), Field(ge=1)] = 150
    chroma: ChromaConfig = ChromaConfig()
    # internal: the service embeds; external: `matrix-sources worker` processes do
    # (docs/deployment.md, "Embedding workers").
    pipeline: Literal["internal", "external"] = "internal"
    # A worker's claim on a room lasts this long unless renewed (it renews while it
    # works): a worker killed holds its rooms this long before another takes them.
    claim_lease_seconds: Annotated[float, Strict(), Field(ge=1)] = 60.0
    # A listed space: sub-spaces followed this deep (0: its own rooms only), at most
    # this many rooms read from its hierarchy, read again this often (a child added or
    # removed is pushed too: appservice/homeserver/spaces.py).
    space_depth: Annotated[int, Strict(), Field(ge=0, le=10)] = 2
    space_max_rooms: Annotated[int, Strict(), Field(ge=1, le=100_000)] = 2_000
    space_reread_seconds: Annotated[float, Strict(), Field(ge=5)] = 60.0

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "scrub_interval_seconds" in data:
            raise Refused(
                "scrub_interval_seconds", "renamed: write it as index.compaction_interval_seconds"
            )
        return data

    @property
    def chunk_policy(self) -> ChunkPolicy:
        return ChunkPolicy(
            max_bytes=self.window_max_bytes, gap_ms=int(self.window_gap_seconds * 1000)
        )

    @field_validator("embedder", mode="before")
    @classmethod
    def _model_name_alone(cls, v: Any) -> Any:
        """`embedder: NAME`, the form before backends, is the model on torch, what
        it ran on then: its collection is kept, not rebuilt for the new default."""
        return {"model": v, "backend": "torch"} if isinstance(v, str) else v


class SearchSettings(_Section):
    default_top_k: Annotated[int, Strict(), Field(ge=1, le=20)] = 5
    rrf_k: PositiveInt = 60
    lexical_max_terms: NonNegativeInt = 5  # 0: no keyword leg
    rate_limit_per_minute: NonNegativeInt = 6  # 0: no limit
    admins: tuple[UserId, ...] = ()
    # Unset, both are the floor calibrated for index.embedder.model (MODEL_FLOORS; these
    # defaults are all-MiniLM-L6-v2's): each model has its own scale of similarity.
    min_similarity: Annotated[float, Strict(), Field(ge=-1, le=1)] = 0.34  # cosine
    # What a hit sharing no word with the question needs above it (indexer/search/abstain.py).
    no_shared_word_margin: Annotated[float, Strict(), Field(ge=0, le=1)] = 0.11
    # That margin for a question written mostly in one script (`cyrillic: 0.0`), instead.
    # Unset: the model's (MODEL_SCRIPT_MARGINS).
    no_shared_word_margin_by_script: dict[
        Script, Annotated[float, Strict(), Field(ge=0, le=1)]
    ] = {}


class ApiSettings(_Section):
    """The search API (appservice/homeserver/search_api.py, docs/api.md): served on the
    appservice port, for `matrix-sources search`, `matrix-sources mcp` and programs."""

    # The read token's file (relative: to the config's folder; mode 0600). `init` writes
    # it, and so does `run` when it is missing. It must not be an appservice token.
    token_file: RelativePath = "api_token"
    # Searches per token: this many a minute on average, up to `burst` at once. 0: no limit.
    requests_per_minute: NonNegativeInt = 120
    burst: PositiveInt = 20


class GateSettings(_Section):
    puppet_patterns: tuple[Regex, ...] = DEFAULT_PUPPET_PATTERNS
    bridge_registrations: tuple[RelativePath, ...] = ()
    # The servers whose users puppet_patterns match; empty: the homeserver's own domain.
    bridge_servers: tuple[Str, ...] = ()


class StoreSettings(_Section):
    # The event log (every message's text, the pipeline's state): an SQLite file in the
    # data dir, or PostgreSQL (docs/deployment.md, "PostgreSQL").
    database: DatabaseUrl = "sqlite:eventlog.sqlite3"


class ModerationSettings(_Section):
    """What the moderators see (docs/deployment.md, "Moderation"): `matrix-sources report`,
    `!sources report` and the digest (appservice/bot/digest.py)."""

    # A room the bot is in, never an allowlisted one (refused at start): the report for
    # every room is posted there each digest_interval. Unset: no digest.
    digest_room: RoomRef | None = None
    digest_interval: Duration = "weekly"
    # Days a question that got "nothing matches" keeps its text, and every question
    # and vote its row, for the report.
    keep_days: PositiveInt = 30

    @property
    def digest_seconds(self) -> float:
        return duration_seconds(self.digest_interval)


class MetricsSettings(_Section):
    # The questions and votes at /metrics labelled by room (room ids then reach the
    # monitoring); unset: totals only.
    per_room: bool = False


class LoggingSettings(_Section):
    level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR"],
        BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v),
    ] = "INFO"
    format: Literal["text", "json"] = "text"


@checked_dataclass(frozen=True, config=_CHECKED)
class DerivedConfig:
    """The derived filter (DESIGN.md "Derived filter"): per-kind thresholds of the
    containment score, the length below which nothing matches, the shingle size."""

    answer_threshold: Fraction = 0.8
    reference_threshold: Fraction = 0.5
    min_words: Int = 8
    shingle_size: Annotated[int, Strict(), Field(ge=1, le=16)] = 5
    _unset = model_validator(mode="before")(empty_is_unset)

    @model_validator(mode="after")
    def _long_enough(self) -> DerivedConfig:
        if self.min_words < self.shingle_size:
            raise Refused(
                "min_words",
                "must be at least derived.shingle_size "
                f"({self.shingle_size}), not {self.min_words}",
            )
        return self


class Config(_Section):
    """config.yaml: its sections with every default, and what follows from where the
    file is (`load_config` sets that)."""

    homeserver: HomeserverSettings = Field(default_factory=dict, validate_default=True)
    appservice: AppserviceSettings = AppserviceSettings()
    allowlist: RelativePath = "allowlist.yaml"
    index: IndexSettings = IndexSettings()
    search: SearchSettings = SearchSettings()
    api: ApiSettings = ApiSettings()
    gate: GateSettings = GateSettings()
    logging: LoggingSettings = LoggingSettings()
    derived: DerivedConfig = DerivedConfig()
    store: StoreSettings = StoreSettings()
    moderation: ModerationSettings = ModerationSettings()
    metrics: MetricsSettings = MetricsSettings()
    _file: Path = PrivateAttr(Path("config.yaml"))
    _bridges: tuple[Path, ...] = PrivateAttr(())
    _bridge_patterns: tuple[str, ...] = PrivateAttr(())

    @model_validator(mode="before")
    @classmethod
    def _the_models_floor(cls, data: Any) -> Any:
        """An unset search.min_similarity, no_shared_word_margin or
        no_shared_word_margin_by_script is the embedder model's calibrated one
        (MODEL_FLOORS, MODEL_SCRIPT_MARGINS); an unknown model is refused elsewhere."""
        if not isinstance(data, dict):
            return data
        index, search = data.get("index") or {}, data.get("search") or {}
        embedder = index.get("embedder") if isinstance(index, dict) else None
        model = embedder.get("model") if isinstance(embedder, dict) else embedder
        floor = MODEL_FLOORS.get(
            model if isinstance(model, str) else "", MODEL_FLOORS["all-MiniLM-L6-v2"]
        )
        if not isinstance(search, dict):
            return data
        unset: dict[str, float | dict[str, float]] = {
            k: v
            for k, v in zip(("min_similarity", "no_shared_word_margin"), floor)
            if search.get(k) is None
        }
        if search.get("no_shared_word_margin_by_script") is None:
            unset["no_shared_word_margin_by_script"] = dict(
                MODEL_SCRIPT_MARGINS.get(model if isinstance(model, str) else "", {})
            )
        return {**data, "search": {**search, **unset}} if unset else data

    @property
    def file(self) -> Path:
        return self._file

    @property
    def data_dir(self) -> Path:
        """The config's folder: every relative path of the config is relative to it."""
        return self._file.parent

    @property
    def registration_path(self) -> Path:
        return self.data_dir / self.appservice.registration

    @property
    def allowlist_path(self) -> Path:
        return self.data_dir / self.allowlist

    @property
    def chroma(self) -> ChromaConfig:
        """index.chroma with its paths resolved and the server's host defaulted."""
        c = self.index.chroma
        return replace(
            c,
            path=self.data_dir / c.path,
            host=c.host or ("127.0.0.1" if c.mode == "server" else None),
            persist_dir=self.data_dir / c.persist_dir if c.persist_dir else None,
        )

    @property
    def puppet_patterns(self) -> tuple[str, ...]:
        """gate.puppet_patterns: they match users of `bridge_servers` only."""
        return self.gate.puppet_patterns

    @property
    def bridge_servers(self) -> tuple[str, ...]:
        return self.gate.bridge_servers or (self.homeserver.domain,)

    @property
    def bridge_puppets(self) -> tuple[tuple[str, str], ...]:
        """The bridges' user namespaces, each with the server it owns users of: this
        homeserver's (an appservice owns no other server's users)."""
        return tuple((p, self.homeserver.domain) for p in self._bridge_patterns)

    @property
    def bridge_registration_paths(self) -> tuple[Path, ...]:
        return self._bridges

    @property
    def bot_user(self) -> str:
        return f"@{self.appservice.bot_localpart}:{self.homeserver.domain}"

    @property
    def api_token_path(self) -> Path:
        return self.data_dir / self.api.token_file

    @property
    def database(self) -> Database:
        """store.database, a relative SQLite path resolved against the data dir."""
        return parse_database(self.store.database, self.data_dir)

    @property
    def default_eventlog_path(self) -> Path:
        """The data dir's SQLite event log where store.database is unset: what
        `eventlog migrate` moves to PostgreSQL."""
        return self.data_dir / "eventlog.sqlite3"

    @property
    def journal_path(self) -> Path:
        return self.data_dir / "journal.jsonl"

    @property
    def models_dir(self) -> Path:
        """Where an ONNX backend's export of the packaged model is made, once: the data
        dir's models/, or $MATRIX_SOURCES_MODELS_DIR (MODELS_DIR_ENV) where it is set."""
        return Path(os.environ.get(MODELS_DIR_ENV) or self.data_dir / "models")
