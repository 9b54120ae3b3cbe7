"""The model table: context windows, output ceilings and prices, extendable by the user.

Prices are US dollars per million tokens. Lookups match the longest registered name that the
model name starts with, so dated snapshots (``claude-sonnet-4-5-20250929``) find their family::

    >>> model_info("claude-sonnet-4-5-20250929").context_window
    200000
    >>> register_model("my-llama", ModelInfo(context_window=8192))
    >>> model_info("my-llama-q4").context_window
    8192

The cost budget (``Limits(max_cost_usd=...)``) and the context check use this table.
"""

from __future__ import annotations

from ._model_types import Usage
from ._record import record

__all__ = ["ModelInfo", "cost_of", "model_info", "register_model"]


@record(frozen=True)
class ModelInfo:
    """What fanloop knows of one model.

    Attributes:
        context_window: tokens the model can read in one request.
        max_output_tokens: the ceiling for ``max_tokens``.
        input_price: dollars per million uncached input tokens.
        output_price: dollars per million output tokens.
        cache_read_price: dollars per million tokens read from the prompt cache.
        cache_write_price: dollars per million tokens written to the prompt cache.
    """

    context_window: int
    max_output_tokens: int = 8192
    input_price: float = 0.0
    output_price: float = 0.0
    cache_read_price: float | None = None
    cache_write_price: float | None = None


def _claude(
    window: int,
    out: int,
    inp: float,
    outp: float,
    *,
    read: float | None = None,
    write: float | None = None,
) -> ModelInfo:
    """An Anthropic model: cache reads at 0.1x and (5-minute) cache writes at 1.25x the input
    price, unless the model's own prices say otherwise."""
    return ModelInfo(
        window,
        out,
        inp,
        outp,
        cache_read_price=read if read is not None else round(inp * 0.1, 6),
        cache_write_price=write if write is not None else round(inp * 1.25, 6),
    )


def _gpt(
    window: int, out: int, inp: float, outp: float, cached: float, write: float | None = None
) -> ModelInfo:
    """An OpenAI model: cached input at ``cached``; cache writes at the input price unless the
    model has a cache-write price (the GPT-6 family)."""
    return ModelInfo(
        window,
        out,
        inp,
        outp,
        cache_read_price=cached,
        cache_write_price=write if write is not None else inp,
    )


def _gemini(window: int, out: int, inp: float, outp: float, cached: float) -> ModelInfo:
    """A Gemini model: cached input at ``cached``; no cache-write charge (implicit caching)."""
    return ModelInfo(window, out, inp, outp, cache_read_price=cached, cache_write_price=inp)


_M = 1_000_000
_OPENAI_LONG = 1_050_000

# Prices in dollars per million tokens, standard tier, November 2026 (Anthropic:
# platform.claude.com pricing and model pages; OpenAI: developers.openai.com pricing). Entries
# marked "unconfirmed" could only be checked against third-party trackers: correct them with
# register_model() if your invoice says otherwise. Tiered prices (long prompts) are not
# modelled: the lower tier is given.
_TABLE: dict[str, ModelInfo] = {
    # Anthropic
    "claude-fable-5-1": _claude(_M, 128_000, 10.0, 50.0, read=0.25),
    "claude-fable-5": _claude(_M, 128_000, 10.0, 50.0, read=1.0),
    "claude-opus-5-5": _claude(_M, 128_000, 4.0, 20.0, read=0.20),  # unconfirmed
    "claude-opus-5": _claude(_M, 128_000, 5.0, 25.0),
    "claude-sonnet-5-5": _claude(_M, 128_000, 2.0, 10.0, read=0.10),  # cache read unconfirmed
    "claude-sonnet-5": _claude(_M, 128_000, 2.0, 10.0),
    "claude-haiku-5-5": _claude(_M, 128_000, 0.10, 0.50),  # unconfirmed; prompts up to 100k tokens
    "claude-opus-4-8": _claude(200_000, 64_000, 5.0, 25.0),
    "claude-opus-4-7": _claude(200_000, 64_000, 5.0, 25.0),
    "claude-opus-4-6": _claude(200_000, 64_000, 5.0, 25.0),
    "claude-opus-4-5": _claude(200_000, 64_000, 5.0, 25.0),
    "claude-opus-4-1": _claude(200_000, 32_000, 15.0, 75.0),
    "claude-opus-4": _claude(200_000, 32_000, 15.0, 75.0),
    "claude-sonnet-4-6": _claude(200_000, 64_000, 3.0, 15.0),  # unconfirmed
    "claude-sonnet-4-5": _claude(200_000, 64_000, 3.0, 15.0),
    "claude-sonnet-4": _claude(200_000, 64_000, 3.0, 15.0),
    "claude-haiku-4-5": _claude(200_000, 64_000, 1.0, 5.0),
    "claude-3-7-sonnet": _claude(200_000, 64_000, 3.0, 15.0),
    "claude-3-5-haiku": _claude(200_000, 8_192, 0.8, 4.0),
    # OpenAI
    "gpt-6-astra": _gpt(_OPENAI_LONG, 128_000, 10.0, 50.0, 1.0, write=12.5),  # unconfirmed
    "gpt-6-sol": _gpt(_OPENAI_LONG, 128_000, 2.0, 10.0, 0.20, write=2.5),  # unconfirmed
    "gpt-6-luna": _gpt(_OPENAI_LONG, 128_000, 0.10, 0.50, 0.01, write=0.125),  # unconfirmed
    "gpt-5.6-sol": _gpt(_OPENAI_LONG, 128_000, 4.0, 20.0, 0.40),  # unconfirmed
    "gpt-5.6-terra": _gpt(_OPENAI_LONG, 128_000, 2.0, 12.0, 0.20),  # unconfirmed
    "gpt-5.6-luna": _gpt(_OPENAI_LONG, 128_000, 0.20, 1.20, 0.02),  # unconfirmed
    "gpt-5.5": _gpt(400_000, 128_000, 5.0, 30.0, 0.50),  # unconfirmed
    "gpt-5.4-mini": _gpt(400_000, 128_000, 0.75, 4.5, 0.075),  # unconfirmed
    "gpt-5.4": _gpt(400_000, 128_000, 2.5, 15.0, 0.25),  # unconfirmed
    "gpt-5": _gpt(400_000, 128_000, 1.25, 10.0, 0.125),
    "gpt-5-mini": _gpt(400_000, 128_000, 0.25, 2.0, 0.025),
    "gpt-5-nano": _gpt(400_000, 128_000, 0.05, 0.4, 0.005),
    "gpt-4.1": _gpt(1_047_576, 32_768, 2.0, 8.0, 0.5),
    "gpt-4.1-mini": _gpt(1_047_576, 32_768, 0.4, 1.6, 0.1),
    "gpt-4.1-nano": _gpt(1_047_576, 32_768, 0.1, 0.4, 0.025),
    "gpt-4o": _gpt(128_000, 16_384, 2.5, 10.0, 1.25),
    "gpt-4o-mini": _gpt(128_000, 16_384, 0.15, 0.6, 0.075),
    "o3": _gpt(200_000, 100_000, 2.0, 8.0, 0.5),
    "o4-mini": _gpt(200_000, 100_000, 1.1, 4.4, 0.275),
    # Google Gemini (the "gemini" preset; ai.google.dev pricing, text input, prompts up to
    # 200k tokens; context-cache storage is billed per hour and not modelled)
    "gemini-2.5-pro": _gemini(1_048_576, 65_536, 1.25, 10.0, 0.125),
    "gemini-2.5-flash": _gemini(1_048_576, 65_536, 0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": _gemini(1_048_576, 65_536, 0.10, 0.40, 0.01),
}


_CACHE: dict[str, ModelInfo | None] = {}


def register_model(name: str, info: ModelInfo) -> None:
    """Add or replace a model (or a family prefix) in the table."""
    _TABLE[name] = info
    _CACHE.clear()


def model_info(model: str) -> ModelInfo | None:
    """The entry for ``model``: an exact match, else the longest registered prefix.

    A ``vendor/`` prefix (as OpenRouter names models) is ignored when nothing matches with it.
    """
    try:
        return _CACHE[model]
    except KeyError:
        info = _CACHE[model] = _lookup(model)
        return info


def _lookup(model: str) -> ModelInfo | None:
    """The entry for ``model``: an exact match, else the longest registered prefix.

    A ``vendor/`` prefix (as OpenRouter names models) is ignored when nothing matches with it.
    """
    info = _TABLE.get(model)
    if info is not None:
        return info
    best = ""
    for name in _TABLE:
        if model.startswith(name) and len(name) > len(best):
            best = name
    if best:
        return _TABLE[best]
    if "/" in model:
        return _lookup(model.rsplit("/", 1)[1])
    return None


def cost_of(model: str, usage: Usage) -> float | None:
    """Dollars that ``usage`` costs on ``model``; ``None`` when the model has no price.

    Uncached input, output, cache reads and cache writes each at their own price (a model
    without cache prices charges them as plain input)::

        >>> from fanloop.providers import Usage
        >>> round(cost_of("claude-sonnet-4-5", Usage(input_tokens=1_000_000)), 2)
        3.0
        >>> round(cost_of("claude-sonnet-4-5", Usage(cache_read_tokens=1_000_000)), 2)
        0.3
        >>> round(cost_of("claude-sonnet-4-5", Usage(cache_write_tokens=1_000_000)), 2)
        3.75
    """
    info = model_info(model)
    if info is None:
        return None
    read = info.cache_read_price if info.cache_read_price is not None else info.input_price
    write = info.cache_write_price if info.cache_write_price is not None else info.input_price
    return (
        usage.input_tokens * info.input_price
        + usage.output_tokens * info.output_price
        + usage.cache_read_tokens * read
        + usage.cache_write_tokens * write
    ) / 1_000_000
