"""What a caller may ask of the service: per-caller rate limiting (a token bucket per verified
identity, in process memory) and the longest question, over HTTP and MCP alike."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

from kb_core.settings import ServiceSettings
from query_service.errors import QuestionTooLongError, RateLimitedError

__all__ = ["QuestionLimit", "RateLimiter"]


@dataclass
class RateLimiter:
    """`per_minute` requests a minute per caller, with bursts up to `burst`; 0 turns it off."""

    per_minute: int = 120
    burst: int = 20
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_settings(cls, settings: ServiceSettings) -> RateLimiter:
        return cls(per_minute=settings.rate_limit_per_minute, burst=settings.rate_limit_burst)

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


@dataclass(frozen=True)
class QuestionLimit:
    """KB_MAX_QUESTION_CHARS: the longest question or search query a door takes (the work of
    planning and keyword search grows with its length)."""

    max_chars: int

    def check(self, text: str, field: str) -> str:
        """`text`, unless it is longer than the limit (QuestionTooLongError)."""
        if len(text) > self.max_chars:
            raise QuestionTooLongError(f"{field} has {len(text)} characters; the limit is "
                                       f"{self.max_chars}")
        return text
