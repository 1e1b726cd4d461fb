"""What start-up asks of the system and of the homeserver: open files up to the hard
limit, the homeserver accepting our token (retried while it is unreachable: Synapse may
start after us), and the ping that has it retry at once what it could not deliver while
we were down. A failure that needs a person is a StartupError saying the fix."""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable

from mautrix.appservice import AppService
from mautrix.errors import MatrixRequestError

from matrix_sources.indexer.clock import Clock, retrying
from matrix_sources.indexer.config import Config

log = logging.getLogger(__name__)
HOMESERVER_RETRY_MAX = 30.0  # seconds between whoami attempts while Synapse is down


class StartupError(RuntimeError):
    """A start-up failure whose message says how to fix it."""


def raise_fd_limit() -> tuple[int, int]:
    """The soft limit on open files up to the hard one (systemd's default soft limit,
    1,024, is about 1,000 idle connections; contrib/matrix-sources.service raises the
    hard limit, docs/deployment.md). Returns (soft, hard) as they are now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            log.warning("fd_limit_not_raised", exc_info=True, extra={"soft": soft, "hard": hard})
    return soft, hard


async def wait_for_homeserver(
    az: AppService, cfg: Config, on_unreachable: Callable[[str], None], clock: Clock
) -> None:
    """Until the homeserver accepts our token. Unreachable: keep trying, each time told
    to `on_unreachable` (what health says); token refused or wrong user: a configuration
    error, stop."""

    def unreachable(e: Exception, delay: float) -> None:
        on_unreachable(
            f"homeserver {cfg.homeserver.url} unreachable ({type(e).__name__}); retrying"
        )
        # The traceback too: a bug here looks like an outage otherwise.
        log.warning(
            "homeserver_unreachable",
            exc_info=e,
            extra={"url": cfg.homeserver.url, "retry_in": delay},
        )

    try:
        whoami = await retrying(
            az.intent.whoami,
            initial=1.0,
            maximum=HOMESERVER_RETRY_MAX,
            on_retry=unreachable,
            retry_if=lambda e: not isinstance(e, MatrixRequestError),
            clock=clock,
        )
    except MatrixRequestError as e:
        raise StartupError(
            f"the homeserver at {cfg.homeserver.url} rejected as_token "
            f"({e.errcode}): is {cfg.registration_path} listed in "
            "app_service_config_files of homeserver.yaml, and was Synapse restarted "
            "since?"
        ) from None
    if whoami.user_id != cfg.bot_user:
        raise StartupError(
            f"the homeserver says the bot is {whoami.user_id}, the config "
            f"says {cfg.bot_user}: check homeserver.domain and "
            "appservice.bot_localpart"
        )


async def ping_homeserver(az: AppService, clock: Clock) -> None:
    """Ask the homeserver to ping us now that transactions are taken (MSC2659). What it
    could not deliver while we were down it retries with a growing backoff, up to
    8.5 minutes in Synapse; a ping that reaches us makes it retry at once."""
    try:
        ms = await az.ping_self(f"matrix-sources-start-{clock.now_ms()}")
        log.info("homeserver_pinged", extra={"ms": ms})
    except MatrixRequestError as e:  # a homeserver without the endpoint: its own retry
        log.info("homeserver_ping_refused", extra={"errcode": e.errcode})
    except Exception:
        log.warning("homeserver_ping_failed", exc_info=True)
