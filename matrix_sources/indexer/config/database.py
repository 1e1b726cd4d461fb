"""`store.database`: where the event log lives, an SQLite file or a PostgreSQL database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator

from .values import Str


@dataclass(frozen=True)
class Database:
    """Where the event log lives (`store.database`): an SQLite file, or a PostgreSQL
    database given as libpq reads it. A password never sits in the DSN, so never in
    config.yaml nor in a log line: libpq reads it from ~/.pgpass, from the file named
    by PGPASSFILE or by `passfile=` in the DSN, or from PGPASSWORD."""

    kind: Literal["sqlite", "postgresql"]
    path: Path | None = None  # sqlite
    dsn: str | None = None  # postgresql

    def __str__(self) -> str:
        return f"sqlite:{self.path}" if self.kind == "sqlite" else str(self.dsn)


def parse_database(value: str, base: Path) -> Database:
    """`sqlite:PATH` (relative: to `base`, the config's folder) or a `postgresql://`
    URL. Raises ValueError saying what is accepted."""
    if value.startswith("sqlite:"):
        path = Path(value[len("sqlite:") :])
        if not str(path) or str(path) == ".":
            raise ValueError("sqlite: needs a file, as in sqlite:eventlog.sqlite3")
        return Database("sqlite", path=path if path.is_absolute() else base / path)
    if value.startswith(("postgresql://", "postgres://")):
        from psycopg.conninfo import conninfo_to_dict

        try:
            parts = conninfo_to_dict(value)
        except Exception as e:  # libpq's own parse: its message names what is wrong
            raise ValueError(
                f"not a PostgreSQL URL libpq accepts: {str(e).splitlines()[0][:200]}"
            ) from None
        if parts.get("password"):
            raise ValueError(
                "holds a password: leave it out of the URL and give it in "
                "~/.pgpass, a file named by passfile= in the URL or by "
                "PGPASSFILE, or PGPASSWORD (docs/deployment.md)"
            )
        return Database("postgresql", dsn=value)
    raise ValueError(f"{value!r} is neither sqlite:PATH nor a postgresql:// URL")


def _checked(value: str) -> str:
    parse_database(value, Path("."))  # checked here, resolved against the file by Config
    return value


DatabaseUrl = Annotated[Str, AfterValidator(_checked)]
