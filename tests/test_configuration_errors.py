"""Values that cannot work are a :class:`~fanloop.errors.ConfigurationError` (also a
``ValueError``, so older ``except ValueError`` code still catches them): docs/errors.md."""

from __future__ import annotations

from typing import Any

import pytest

from fanloop import Agent, Limits, RetryPolicy
from fanloop.errors import ConfigurationError, FanloopError
from fanloop.providers._http import resolve_transport
from fanloop.testing import ScriptedProvider
from fanloop.ui import VercelAIApp


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_turns": -1}, "Limits.max_turns must be >= 0"),
        ({"timeout": -0.5}, "Limits.timeout must be >= 0"),
        ({"max_cost_usd": -1.0}, "Limits.max_cost_usd must be >= 0"),
        ({"warn_at": 0}, r"Limits.warn_at must be in \(0, 1\]"),
        ({"warn_at": 1.5}, r"Limits.warn_at must be in \(0, 1\]"),
        ({"stall_threshold": 1}, "Limits.stall_threshold must be >= 2"),
    ],
)
def test_limits_that_cannot_work_are_a_configuration_error(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        Limits(**options)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, FanloopError)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retries": -1}, "max_retries must be >= 0"),
        ({"base_delay": -1.0}, "retry delays must be >= 0"),
        ({"max_delay": -1.0}, "retry delays must be >= 0"),
        ({"max_retry_after": -1.0}, "retry delays must be >= 0"),
        ({"stream_idle_timeout": 0}, "stream_idle_timeout must be > 0 or None"),
    ],
)
def test_a_retry_policy_that_cannot_work_is_a_configuration_error(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        RetryPolicy(**options)
    assert isinstance(info.value, ValueError)


def test_an_unknown_transport_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="transport must be 'auto', 'aiohttp' or 'httpx'"):
        resolve_transport("curl")  # type: ignore[arg-type]
    assert resolve_transport("httpx") == "httpx"


def test_an_unknown_ui_stream_version_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="version must be 5 or 6"):
        VercelAIApp(Agent(ScriptedProvider()), version=4)  # type: ignore[arg-type]


def test_valid_values_are_still_accepted() -> None:
    assert Limits(max_turns=0, warn_at=1.0, stall_threshold=2).max_turns == 0
    assert RetryPolicy(max_retries=0, stream_idle_timeout=None).max_retries == 0
