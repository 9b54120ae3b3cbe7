"""Retries of transient provider failures: :class:`RetryPolicy` and its backoff."""

from __future__ import annotations

import random

from ._record import record
from .errors import ConfigurationError, ProviderError

__all__ = ["RetryPolicy"]


@record(frozen=True)
class RetryPolicy:
    """How transient model-call failures are retried.

    A failure is transient when its error says so (``error.transient``): HTTP 408, 409, 429,
    5xx and 529, timeouts, dropped connections, an error inside a stream, a stream that ended
    early, an empty response. Each retry waits ``base_delay * 2**(attempt - 1)`` seconds,
    capped at ``max_delay``, with "equal jitter" (between half and all of that) when ``jitter``
    is on. A ``Retry-After`` the provider sent replaces the backoff, capped at
    ``max_retry_after``.

    Attributes:
        max_retries: retries after the first attempt (0 disables retrying).
        base_delay: the first backoff, in seconds.
        max_delay: the largest backoff, in seconds.
        jitter: randomise each backoff so that many clients do not retry in step.
        max_retry_after: the longest server-requested wait honoured, in seconds.
        stream_idle_timeout: seconds a streamed answer may go without content (from the
            request to its first event, or between two events; keep-alives do not count)
            before the attempt fails with a transient ``ProviderTimeout``. ``None`` waits
            forever.
    """

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: bool = True
    max_retry_after: float = 60.0
    stream_idle_timeout: float | None = 300.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigurationError("max_retries must be >= 0")
        if self.base_delay < 0 or self.max_delay < 0 or self.max_retry_after < 0:
            raise ConfigurationError("retry delays must be >= 0")
        if self.stream_idle_timeout is not None and not self.stream_idle_timeout > 0:
            raise ConfigurationError("stream_idle_timeout must be > 0 or None")

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether to retry after ``attempt`` (counted from 1) failed with ``error``."""
        return attempt <= self.max_retries and isinstance(error, ProviderError) and error.transient

    def delay(self, attempt: int, error: BaseException | None = None) -> float:
        """Seconds to wait before the retry that follows failed ``attempt`` (from 1)."""
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after >= 0:
            return min(float(retry_after), self.max_retry_after)
        backoff = min(self.base_delay * 2.0 ** (attempt - 1), self.max_delay)
        if self.jitter:
            backoff = backoff / 2 + random.random() * backoff / 2
        return backoff
