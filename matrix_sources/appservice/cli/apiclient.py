"""The running service's search API as the commands ask it (`search`, `mcp`; docs/api.md).

Whether a service runs is the data dir's writer lock's to say (indexer/store/lock.py);
where it listens, the config's: its appservice port, on 127.0.0.1 when it listens on
every address or loopback. The read token is api.token_file's, which the service wrote.

Light on purpose: the blocking side of appservice/httpclient.py and json only. This is
the path of a command that loads no model and opens no store, and its start is most of
what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from matrix_sources.indexer.config import Config
from matrix_sources.indexer.datadir import api_token
from matrix_sources.indexer.search.query import SourceQuery
from matrix_sources.indexer.store.lock import holder

from .. import httpclient

PATH = "/_matrix_sources/v1/search"  # appservice/homeserver/search_api.py ROUTE
LOOPBACK = "127.0.0.1"
ANY_OR_LOOPBACK = ("", "0.0.0.0", "::", "localhost", LOOPBACK, "::1")
TEMPORARY = (429, 503)  # try again later: EX_TEMPFAIL for the commands


class ServiceError(Exception):
    """The service answered a search with an error; its JSON said why (docs/api.md)."""

    def __init__(
        self,
        status: int,
        errcode: str,
        message: str,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.errcode, self.message = status, errcode, message
        self.field, self.retry_after = field, retry_after


class Unreachable(Exception):
    """Nothing answers on the service's port (still starting, or a command other than
    `run` holds the data dir)."""


@dataclass(frozen=True)
class ServiceClient:
    host: str
    port: int
    token: str
    holder: str = ""  # the writer lock's holder, for messages
    timeout: float = 120.0

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        return self.base_url + PATH

    def search(self, query: SourceQuery) -> tuple[list[dict], str]:
        """The hits as the service's JSON has them (`Hit.to_json`), and with none, what
        the service adds to "nothing matches" ("" for nothing: search_api.py's "note")."""
        client = httpclient.HttpClient(self.base_url, self.token, self.timeout)
        try:
            resp = client.call("POST", PATH, query.to_json())
        except httpclient.Unreachable as e:
            if e.refused:
                raise Unreachable(f"nothing answers on {self.url}") from None
            # it listens, but did not answer
            raise ServiceError(
                0,
                "",
                f"no answer from {self.url} ({type(e.reason).__name__}: "
                f"{e.reason}); is the service overloaded or stuck? its log "
                "says",
            ) from None
        data = resp.data
        if resp.status == 200 and isinstance(data, dict) and isinstance(data.get("hits"), list):
            note = data.get("note")
            return data["hits"], note if isinstance(note, str) else ""
        if not isinstance(data, dict):
            raise ServiceError(
                resp.status,
                "",
                f"HTTP {resp.status} without a JSON answer "
                f"from {self.url}: is another program on that port?",
            )
        retry = resp.header("Retry-After")
        raise ServiceError(
            resp.status,
            resp.errcode,
            resp.error,
            data.get("field"),
            float(retry) if retry and retry.isdigit() else None,
        )


def service_address(cfg: Config) -> tuple[str, int]:
    host = cfg.appservice.host
    return (LOOPBACK if host in ANY_OR_LOOPBACK else host), cfg.appservice.port


def find_service(cfg: Config) -> ServiceClient | None:
    """The running service's API, or None when no process holds the data dir. Raises
    ConfigError when one does but its token cannot be read."""
    who = holder(cfg.data_dir)
    if who is None:
        return None
    host, port = service_address(cfg)
    return ServiceClient(host, port, api_token(cfg), holder=who)


def describe(e: ServiceError, client: ServiceClient, cfg: Config) -> str:
    """What a command prints for the service's refusal, with what to do about it."""
    if e.status in (401, 403):
        return (
            f"the service refused the API token of {cfg.api_token_path} ({e.message}); "
            "it reads the file when it starts: restart it after changing the file"
        )
    if e.status in TEMPORARY:
        later = f"; try again in {e.retry_after:.0f} s" if e.retry_after else ""
        return f"{e.message}{later}"
    return e.message or f"HTTP {e.status} from {client.url}"
