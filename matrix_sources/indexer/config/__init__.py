"""The service's configuration: one pydantic model per section of config.yaml, read and
validated once into `Config`, which the code reads directly (`cfg.search.min_similarity`).

Each setting has its one definition and default on its section's field (sections.py);
adding a key is adding a field. config.example.yaml shows the same values (a test holds
them equal). What is derived (paths resolved against the config's folder, the bridges'
puppet namespaces read in) is a property of `Config`, not another copy. An unknown key
is refused (a misspelled key would otherwise start silently on the default), and so is
a value out of range. Every error reads `<file>: <dotted.key>: <message>` and says what
would be accepted (errors.py).

    values.py     the kinds of value, strict (no "8000" for 8000)
    per_model.py  the embedder model's backends and calibrated floors
    database.py   store.database: SQLite or PostgreSQL
    sections.py   the sections and Config
    load.py       config.yaml read, validated, its bridges' registrations read in
"""

from .database import Database, parse_database
from .errors import ConfigError, Refused, problem
from .load import load_config, load_yaml
from .per_model import (
    EMBEDDER_BACKENDS,
    MODEL_FLOORS,
    MODEL_SCRIPT_MARGINS,
    ONE_BACKEND,
    EmbedderBackend,
)
from .sections import (
    DEFAULT_PUPPET_PATTERNS,
    ApiSettings,
    AppserviceSettings,
    ChromaConfig,
    Config,
    DerivedConfig,
    EmbedderSettings,
    GateSettings,
    HomeserverSettings,
    IndexSettings,
    LoggingSettings,
    MetricsSettings,
    ModerationSettings,
    SearchSettings,
    SegmentSettings,
    StoreSettings,
)
from .values import is_placeholder

__all__ = [
    "ApiSettings",
    "AppserviceSettings",
    "ChromaConfig",
    "Config",
    "ConfigError",
    "Database",
    "DEFAULT_PUPPET_PATTERNS",
    "DerivedConfig",
    "EMBEDDER_BACKENDS",
    "EmbedderBackend",
    "EmbedderSettings",
    "GateSettings",
    "HomeserverSettings",
    "IndexSettings",
    "LoggingSettings",
    "MetricsSettings",
    "ModerationSettings",
    "MODEL_FLOORS",
    "MODEL_SCRIPT_MARGINS",
    "ONE_BACKEND",
    "Refused",
    "SearchSettings",
    "SegmentSettings",
    "StoreSettings",
    "is_placeholder",
    "load_config",
    "load_yaml",
    "parse_database",
    "problem",
]
