"""A token bucket per key, on the injected clock: `burst` requests at once, then one
every 60 / per_minute seconds.

Hand-written (20 lines) rather than taken from a library: aiolimiter and limits read
the event loop's or the system's time, and the tests here drive the refill with a
fake clock (tests/fakeclock.py), never by waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matrix_sources.indexer.clock import REAL, Clock


@dataclass
class TokenBucket:
    per_minute: int  # refill rate; 0: no limit
    burst: int  # capacity
    clock: Clock = REAL
    # key -> (tokens, when they were counted). Keys are authenticated callers only
    # (the search API's tokens), so the map stays as small as the set of tokens.
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, key: str) -> float:
        """0.0 when `key` may go now (one token taken), else the seconds until it may."""
        if self.per_minute <= 0:
            return 0.0
        now = self.clock.now()
        tokens, then = self._buckets.get(key, (float(self.burst), now))
        rate = self.per_minute / 60.0
        tokens = min(float(self.burst), tokens + (now - then) * rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / rate
