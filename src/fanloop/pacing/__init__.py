"""Pacing: one budget of requests, tokens and concurrent calls for every run on a provider.

::

    from fanloop.pacing import Pacing, RedisPacing, paced

    pacing = Pacing(requests_per_minute=500, tokens_per_minute=400_000, max_concurrency=64)
    pacing = RedisPacing("redis://127.0.0.1:6379/0", key="anthropic-prod",
                         requests_per_minute=500, tokens_per_minute=400_000)
    provider = AnthropicProvider("claude-sonnet-4-5", pacing=pacing)
    provider = paced(my_provider, pacing)                  # any other provider

Every run and sub-agent on a paced provider shares the budget (with :class:`RedisPacing`, every
process using the same key does). A call waits for capacity instead of failing, and the wait
counts against the run's deadline. A 429 with ``Retry-After`` seen by any call puts the whole
group into one cooldown; the waiting calls then resume spread over a short jitter, so a rate
limit never turns into a stampede of retries. Waits reach the run's event stream as
:class:`~fanloop.events.PacingWait` events. See ``docs/pacing.md``.

``redis`` is imported only when a :class:`RedisPacing` first paces a call.
"""

from __future__ import annotations

from ._gate import Pacer, PacingUnreachable
from ._local import Pacing
from ._provider import PacedProvider, paced
from ._redis import RedisPacing

__all__ = ["PacedProvider", "Pacer", "Pacing", "PacingUnreachable", "RedisPacing", "paced"]
