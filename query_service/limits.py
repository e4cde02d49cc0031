"""Per-caller rate limiting: a token bucket per verified identity, in process memory."""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field

from query_service.errors import RateLimitedError

__all__ = ["RateLimiter"]


@dataclass
class RateLimiter:
    """`per_minute` requests a minute per caller, with bursts up to `burst`; 0 turns it off."""

    per_minute: int = 120
    burst: int = 20
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_env(cls) -> RateLimiter:
        return cls(per_minute=int(os.environ.get("KB_RATE_LIMIT_PER_MINUTE", 120)),
                   burst=int(os.environ.get("KB_RATE_LIMIT_BURST", 20)))

    def check(self, caller: str) -> None:
        """Take one token for `caller`, or raise RateLimitedError."""
        if self.per_minute <= 0:
            return
        rate = self.per_minute / 60.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(caller, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * rate)
            if tokens < 1.0:
                self._buckets[caller] = (tokens, now)
                raise RateLimitedError(math.ceil((1.0 - tokens) / rate))
            self._buckets[caller] = (tokens - 1.0, now)
