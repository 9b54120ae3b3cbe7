"""Limits, budget accounting, and stall detection.

:class:`Limits` is configuration. A :class:`Budget` is the running account of one run tree: the
root run makes it and every sub-agent spends from the same one, so parallel sub-agents cannot
overshoot a limit together.

Before each model call the loop *reserves* what the call may spend: its input tokens (estimated
from the request with :func:`estimate_input`), its output allowance (the request's ``max_tokens``,
clamped to what is left) and their price. A call that does not fit in what is left minus the
reservations of the calls in flight waits for those to settle; when nothing is in flight and it
still does not fit, the run ends with ``token_budget`` or ``cost_budget`` without sending it.
After the call, :meth:`Budget.settle` releases the reservation and charges the real usage, so a
limit can be overshot only by how far a call's real input exceeds its estimate, and the
estimate errs high.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio

from ._model_types import ModelRequest, ToolSpec, Usage, zero_usage
from ._record import record
from ._result import TerminationReason
from .catalog import ModelInfo, cost_of, model_info
from .errors import ConfigurationError
from .events import BudgetKind
from .messages import Message, ToolCallPart

__all__ = [
    "Budget",
    "InputEstimate",
    "Limits",
    "Reservation",
    "StallDetector",
    "clean_usage",
    "estimate_input",
    "media_tokens",
    "text_tokens",
]


@record(frozen=True)
class Limits:
    """What a run may spend before it ends.

    Attributes:
        max_turns: model rounds per agent run (``None``: no limit).
        timeout: wall-clock seconds for the whole run, enforced with a cancel scope: a turn in
            flight is interrupted and the run ends with ``deadline``.
        max_input_tokens: input tokens (cache reads and writes included) across the run tree.
        max_output_tokens: output tokens across the run tree.
        max_total_tokens: input plus output tokens across the run tree.
        max_cost_usd: dollars across the run tree, priced from :mod:`fanloop.catalog`.
        max_tool_calls: tool calls across the run tree.
        warn_at: share of a limit at which a budget warning fires (once per limit).
        stall_threshold: same tool, same arguments this many times in a row is a stall.
        stop_on_stall: end the run with ``stalled`` when a stall is detected.
    """

    max_turns: int | None = 25
    timeout: float | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tool_calls: int | None = None
    warn_at: float = 0.8
    stall_threshold: int = 3
    stop_on_stall: bool = False

    def __post_init__(self) -> None:
        for name in (
            "max_turns",
            "timeout",
            "max_input_tokens",
            "max_output_tokens",
            "max_total_tokens",
            "max_cost_usd",
            "max_tool_calls",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(f"Limits.{name} must be >= 0, got {value!r}")
        if not 0 < self.warn_at <= 1:
            raise ConfigurationError(f"Limits.warn_at must be in (0, 1], got {self.warn_at!r}")
        if self.stall_threshold < 2:
            raise ConfigurationError("Limits.stall_threshold must be >= 2")


# -- estimating a request's input tokens -----------------------------------------------------

ASCII_CHARS_PER_TOKEN = 3
"""ASCII characters per token the estimate assumes: fewer than tokenizers average (about 4 for
English prose, 3 to 3.5 for code and JSON), so the estimate errs high."""
EXTRA_BYTES_PER_TOKEN = 2
"""UTF-8 bytes beyond a character's first, per token: about 1.3 tokens for a CJK character,
1.8 for an emoji, 0.8 for a Cyrillic or Greek one."""
REQUEST_OVERHEAD = 16
MESSAGE_OVERHEAD = 4
PART_OVERHEAD = 8
"""A tool call's or tool result's id, name and framing."""
TOOL_OVERHEAD = 8
HOSTED_TOOL_TOKENS = 1_000
"""A provider-run tool (web search, code execution): its instructions and what it reads in."""
IMAGE_TOKENS = 1_600
"""An image (:class:`~fanloop.messages.ImagePart`): what the providers charge for one at their
largest default size (they scale larger images down)."""
DOCUMENT_TOKENS = 8_000
"""A document (:class:`~fanloop.messages.DocumentPart`, a PDF) of a few pages: the least one
is counted as; its real cost depends on its page count (see :data:`DOCUMENT_BYTES_PER_TOKEN`)."""
DOCUMENT_BYTES_PER_TOKEN = 64
"""A document sent as data counts at least one token per this many of its bytes (a 2 MiB PDF
as about 33,000 tokens: each page costs its text plus an image of the page)."""
UNMEASURABLE_TOKENS = 1_000
"""A value that cannot be serialised to measure it."""
MAX_INPUT_SCALE = 2.0
"""How far the estimate of a run's first call may be scaled up by what earlier first calls in
the tree really cost (a provider's hidden tool instructions, a denser tokenizer)."""


def text_tokens(text: str) -> int:
    """A high estimate of the tokens ``text`` costs (no tokenizer: cheap and deterministic)."""
    n = len(text)
    tokens = (n + ASCII_CHARS_PER_TOKEN - 1) // ASCII_CHARS_PER_TOKEN
    if not text.isascii():  # O(1) in CPython
        step = _ENCODE_CHUNK  # encoded a piece at a time: memory stays small for a huge text
        size = sum(
            len(text[i : i + step].encode("utf-8", "surrogatepass")) for i in range(0, n, step)
        )
        tokens += (size - n + EXTRA_BYTES_PER_TOKEN - 1) // EXTRA_BYTES_PER_TOKEN
    return tokens


_ENCODE_CHUNK = 1 << 16


def _value_tokens(value: Any) -> int:
    if isinstance(value, str):
        return text_tokens(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        return UNMEASURABLE_TOKENS
    return text_tokens(text)


def media_tokens(part: Any) -> int:
    """A high estimate of the input tokens an image or a document costs (0 for other parts)."""
    kind = getattr(part, "kind", None)
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "document":
        data = getattr(part, "data", None)
        size = len(data) if isinstance(data, bytes) else 0
        return max(DOCUMENT_TOKENS, size // DOCUMENT_BYTES_PER_TOKEN)
    return 0


def _part_tokens(part: Any) -> int:
    kind = getattr(part, "kind", None)
    if kind == "text":
        return text_tokens(part.text)
    if kind == "tool_result":
        tokens = PART_OVERHEAD + _value_tokens(part.content)
        for media in getattr(part, "parts", ()):
            tokens += media_tokens(media)
        return tokens
    if kind == "tool_call":
        return PART_OVERHEAD + text_tokens(part.name) + _value_tokens(part.arguments)
    if kind == "thinking":
        return text_tokens(part.text) + text_tokens(part.redacted or "")
    if kind == "image" or kind == "document":
        return media_tokens(part)
    return PART_OVERHEAD + _value_tokens(part)


def _count_message(message: Message) -> int:
    tokens = MESSAGE_OVERHEAD + sum(_part_tokens(p) for p in message.content)
    origin = message.origin
    if origin is not None and origin.raw is not None:  # the provider may replay this instead
        tokens = max(tokens, MESSAGE_OVERHEAD + _value_tokens(origin.raw))
    return tokens


def _count_tool(spec: ToolSpec) -> int:
    return (
        TOOL_OVERHEAD
        + text_tokens(spec.name)
        + text_tokens(spec.description)
        + _value_tokens(spec.parameters)
    )


def _count_output(output: Any) -> int:
    """A native structured-output schema costs input like the tool it replaces."""
    return TOOL_OVERHEAD + _value_tokens(output.json_schema)


_T = TypeVar("_T")
_MEMO: dict[int, tuple[weakref.ref[Any], int]] = {}


def _forget(key: int, ref: weakref.ref[Any]) -> None:
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is ref:
        del _MEMO[key]


def _memo(obj: _T, count: Callable[[_T], int]) -> int:
    """``count(obj)``, remembered for as long as ``obj`` lives (messages and tool specs are
    immutable, and each is estimated once however many calls resend it)."""
    key = id(obj)
    hit = _MEMO.get(key)
    if hit is not None and hit[0]() is obj:
        return hit[1]
    tokens = count(obj)
    try:
        ref = weakref.ref(obj, partial(_forget, key))
    except TypeError:
        return tokens
    _MEMO[key] = (ref, tokens)
    return tokens


def _messages_tokens(messages: Iterable[Message]) -> int:
    return sum(_memo(m, _count_message) for m in messages)


@record(frozen=True)
class InputEstimate:
    """A high estimate of a request's input tokens.

    Attributes:
        tokens: the whole request.
        fresh: the part the provider has not seen in this run before (priced at the cache-write
            price; the rest at the plain input price).
        measured: the unscaled character estimate, when the whole request was estimated from
            its characters (a run's first call), else 0; the budget learns its scale from it.
        shape: for such an estimate, what the provider may add to any request alike (the
            system prompt, the tools, the output schema): the key under which the budget
            learns how far the estimate of such a request falls short.
    """

    tokens: int
    fresh: int
    measured: int = 0
    shape: Hashable | None = None

    def at_least(self, tokens: int) -> InputEstimate:
        """This estimate raised to ``tokens`` (the whole request is fresh: a first call)."""
        if tokens <= self.tokens:
            return self
        return InputEstimate(tokens, tokens, self.measured, self.shape)

    def cost(self, info: ModelInfo) -> float:
        """Dollars these input tokens cost at most on the model ``info`` describes."""
        write = info.cache_write_price
        fresh_price = max(info.input_price, write if write is not None else 0.0)
        seen = self.tokens - self.fresh
        return (seen * info.input_price + self.fresh * fresh_price) / 1_000_000


NO_INPUT = InputEstimate(0, 0)


def estimate_input(
    request: ModelRequest,
    *,
    known_tokens: int = 0,
    known_messages: int = 0,
    scale: float = 1.0,
) -> InputEstimate:
    """Estimate the input tokens of ``request``, erring high.

    Args:
        request: the model request.
        known_tokens: what the previous call of the same run really cost (its input plus its
            output), as the provider reported it; 0 when unknown.
        known_messages: how many of ``request.messages`` that call sent.
        scale: factor for an estimate made from characters alone.

    With a known previous call, the estimate is its cost plus the messages added since (so a
    long conversation is measured by the provider's own count). Otherwise it is counted from
    the characters of the system prompt, tool specs and messages (about three ASCII characters
    per token, more for other scripts; fixed amounts for images, documents and hosted tools).
    Messages and tool specs are measured once each and remembered.
    """
    messages = request.messages
    if known_tokens > 0 and known_messages <= len(messages):
        fresh = _messages_tokens(messages[known_messages:])
        return InputEstimate(known_tokens + fresh, fresh)
    measured = (
        REQUEST_OVERHEAD
        + text_tokens(request.system or "")
        + sum(_memo(t, _count_tool) for t in request.tools)
        + HOSTED_TOOL_TOKENS * len(request.hosted_tools)
        + (_memo(request.output, _count_output) if request.output is not None else 0)
        + _messages_tokens(messages)
    )
    tokens = math.ceil(measured * scale) if scale > 1.0 else measured
    return InputEstimate(tokens, tokens, measured, _shape(request))


def _shape(request: ModelRequest) -> Hashable:
    """What makes two first requests cost alike beyond their messages (see InputEstimate)."""
    return (
        request.system,
        tuple(t.name for t in request.tools),
        tuple(type(t).__name__ for t in request.hosted_tools),
        request.output is not None,
    )


MAX_REPORTED_TOKENS = 10**15
"""The most tokens one response may claim; more is taken as this (and still ends the budget)."""


def clean_usage(usage: Usage) -> Usage:
    """``usage`` with every count a whole number in ``[0, MAX_REPORTED_TOKENS]``.

    The counts come from the server. A negative one would refund the budget, a huge one would
    overflow the price arithmetic, a non-number would break the sums: negatives and non-numbers
    count as 0, fractions are rounded up, huge counts are capped. Usage that is already clean
    is returned as it is; anything that is not a :class:`Usage` counts as none.
    """
    if not isinstance(usage, Usage):
        return Usage()
    values = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        getattr(usage, "reasoning_tokens", 0),
    )
    for v in values:  # (a loop: a generator per call costs more than the counts' check)
        if type(v) is not int or not 0 <= v <= MAX_REPORTED_TOKENS:
            break
    else:
        return usage
    fixed = [_clean_count(v) for v in values]
    return Usage.model_construct(
        input_tokens=fixed[0],
        output_tokens=fixed[1],
        cache_read_tokens=fixed[2],
        cache_write_tokens=fixed[3],
        reasoning_tokens=fixed[4],
    )


def _clean_count(value: Any) -> int:
    if type(value) is int:
        return min(max(value, 0), MAX_REPORTED_TOKENS)
    if type(value) is float and math.isfinite(value):
        return min(max(math.ceil(value), 0), MAX_REPORTED_TOKENS)
    if type(value) is float and value > 0:  # +inf
        return MAX_REPORTED_TOKENS
    return 0


# -- the shared account ----------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Reservation:
    """What one model call may spend, held in a :class:`Budget` until the call settles.

    Attributes:
        input_tokens: the call's estimated input tokens.
        output_tokens: its output allowance (the request's ``max_tokens``).
        cost_usd: the price of both (0 when the model has no price).
        measured: the character estimate to calibrate against (see :class:`InputEstimate`).
        open: ``False`` once settled.
        kind: the key of the call's kind of request when it was estimated from its
            characters (see :meth:`Budget.reserve`), else ``None``.
        probe: whether it is the first of its kind, the one the others wait for.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    measured: int = 0
    open: bool = True
    kind: Hashable | None = None
    probe: bool = False


Denial = tuple[TerminationReason, str]


@record()
class Budget:
    """The running account of a run tree, shared by the root run and its sub-agents.

    ``reserved_*`` and ``outstanding`` count the reservations of the model calls in flight.
    """

    limits: Limits
    started: float = field(default_factory=time.monotonic)
    usage: Usage = field(default_factory=zero_usage)
    cost_usd: float = 0.0
    priced: bool = True
    tool_calls: int = 0
    reserved_input: int = 0
    reserved_output: int = 0
    reserved_cost: float = 0.0
    outstanding: int = 0
    input_scale: float = 1.0
    _shortfall: dict[Hashable, int] = field(default_factory=dict)
    # Built on first use: most runs never probe a kind nor warn (a set is a tracked object
    # per run, and 10,000 runs in flight make the collector walk every one).
    _probing: set[Hashable] | None = None
    _warned: set[str] | None = None
    _watching: bool = True
    _metering: bool = True
    _counts_input: bool = True
    _settled: anyio.Event | None = None

    def __post_init__(self) -> None:
        lim = self.limits
        self._counts_input = (
            lim.max_input_tokens is not None
            or lim.max_total_tokens is not None
            or lim.max_cost_usd is not None
        )
        self._metering = self._counts_input or lim.max_output_tokens is not None
        self._watching = self._metering or lim.timeout is not None or lim.max_tool_calls is not None

    @property
    def watching(self) -> bool:
        """Whether any shared limit is set (else the checks are skipped)."""
        return self._watching

    @property
    def metering(self) -> bool:
        """Whether a token or cost limit is set, so model calls reserve before they run."""
        return self._metering

    @property
    def counts_input(self) -> bool:
        """Whether a limit depends on input tokens, so requests are estimated."""
        return self._counts_input

    @property
    def elapsed(self) -> float:
        """Seconds since the root run started."""
        return time.monotonic() - self.started

    # -- guards --------------------------------------------------------------------------

    def exhausted(self) -> Denial | None:
        """The budget limit already reached, if any, with a sentence saying which."""
        if not self._watching:
            return None
        spent = Budget.spent(self)
        if spent is not None:
            return spent
        lim = self.limits.max_tool_calls
        if lim is not None and self.tool_calls >= lim:
            return TerminationReason.TOOL_CALL_BUDGET, (
                f"tool call budget spent ({self.tool_calls} of {lim})"
            )
        return None

    def spent(self) -> Denial | None:
        """The token or cost limit that reported usage has already reached, if any: once one
        has, no model call may start anywhere in the run tree."""
        if not self._metering:
            return None
        lim = self.limits
        u = self.usage
        if lim.max_input_tokens is not None and u.total_input_tokens >= lim.max_input_tokens:
            return TerminationReason.TOKEN_BUDGET, (
                f"input token budget spent ({u.total_input_tokens} of {lim.max_input_tokens})"
            )
        if lim.max_output_tokens is not None and u.output_tokens >= lim.max_output_tokens:
            return TerminationReason.TOKEN_BUDGET, (
                f"output token budget spent ({u.output_tokens} of {lim.max_output_tokens})"
            )
        if lim.max_total_tokens is not None and u.total_tokens >= lim.max_total_tokens:
            return TerminationReason.TOKEN_BUDGET, (
                f"token budget spent ({u.total_tokens} of {lim.max_total_tokens})"
            )
        if lim.max_cost_usd is not None and self.cost_usd >= lim.max_cost_usd:
            return TerminationReason.COST_BUDGET, (
                f"cost budget spent (${self.cost_usd:.4f} of ${lim.max_cost_usd:.4f})"
            )
        return None

    # -- reservations --------------------------------------------------------------------

    def estimate(
        self, request: ModelRequest, known_tokens: int, known_messages: int
    ) -> InputEstimate:
        """The input estimate of ``request`` (see :func:`estimate_input`); zero when no limit
        depends on input tokens."""
        if not self._counts_input:
            return NO_INPUT
        return estimate_input(
            request,
            known_tokens=known_tokens,
            known_messages=known_messages,
            scale=self.input_scale,
        )

    async def reserve(
        self, estimate: InputEstimate, requested: int, model: str
    ) -> Reservation | Denial:
        """Reserve a model call's input estimate, output allowance and their price.

        The output allowance is ``requested`` clamped to what is left. A call that does not fit
        beside the reservations in flight waits until one of them settles, then tries again;
        a call that does not fit even without them (nothing can free room for it) gets the
        reason to end the run instead. Cancelled while waiting, it holds nothing.

        A request estimated from its characters alone (a run's first call) may cost far more
        than its estimate (a provider's hidden instructions, a server that counts otherwise),
        and no reservation can hold what it does not know. So the first request of each kind
        (its :attr:`~InputEstimate.shape`) in the run tree goes alone: requests of the same
        kind wait for its report, then reserve at least their own estimate plus the shortfall
        that report showed. Parallel sub-agents therefore cannot all send an underestimated
        first call at once; the wait is one model call, once per kind of request.

        Returns:
            The reservation, to hand to :meth:`settle` once the call is over, or the
            termination reason and a sentence saying why the call cannot be made.
        """
        while True:
            decided = self.decide(estimate, requested, model)
            if decided is None:
                await self._wait()
                continue
            if isinstance(decided, Reservation):
                self._hold(decided)
            return decided

    def decide(
        self, estimate: InputEstimate, requested: int, model: str
    ) -> Reservation | Denial | None:
        """What :meth:`reserve` does now, without holding anything: the reservation the call
        may take, the reason it can never be made, or ``None`` when it must wait for a call
        in flight to settle. (A budget kept elsewhere, e.g. in a database, decides with it.)"""
        kind = None if estimate.shape is None else (model, estimate.shape)
        probe = kind is not None and kind not in self._shortfall
        if probe and self._probing is not None and kind in self._probing:
            return None  # the first of its kind is out: wait for its report
        estimate = self._calibrated(estimate, kind)
        granted = self._grant(estimate, requested, model, held=True)
        if isinstance(granted, Reservation):
            granted.kind = kind
            granted.probe = probe
            return granted
        if self.outstanding:
            alone = self._grant(estimate, requested, model, held=False)
            if isinstance(alone, Reservation):
                return None
            return alone
        return granted

    def _calibrated(self, estimate: InputEstimate, kind: Hashable | None) -> InputEstimate:
        """``estimate`` raised by what requests of its kind really cost beyond their own."""
        short = self._shortfall.get(kind, 0) if kind is not None else 0
        return estimate.at_least(estimate.measured + short) if short else estimate

    def output_allowance(self, requested: int, model: str) -> Reservation:
        """Reserve an output allowance without estimating the input or waiting.

        ``requested`` is clamped to what is left beside the reservations in flight; the result's
        ``output_tokens`` may be 0. Prefer :meth:`reserve`, which also holds the input.
        """
        granted = self._grant(NO_INPUT, requested, model, held=True)
        if not isinstance(granted, Reservation):
            granted = Reservation()
        if self._watching:
            self._hold(granted)
        return granted

    def settle(self, reserved: Reservation | None, usage: Usage | None, model: str) -> None:
        """Release a reservation (once; ``None``: nothing was held) and charge ``usage``."""
        if not self._watching:
            return  # nothing to hold usage against: the runs keep their own totals
        if reserved is not None and reserved.open:
            reserved.open = False
            if reserved.kind is not None:
                self._learn(reserved, usage)
            self.outstanding -= 1
            if self.outstanding:
                self.reserved_input -= reserved.input_tokens
                self.reserved_output -= reserved.output_tokens
                self.reserved_cost -= reserved.cost_usd
            else:  # exact zeros, whatever float rounding did
                self.reserved_input = self.reserved_output = 0
                self.reserved_cost = 0.0
        if usage is not None:
            self._charge(usage, model, reserved.measured if reserved is not None else 0)
        event = self._settled
        if event is not None:
            self._settled = None
            event.set()

    def _learn(self, reserved: Reservation, usage: Usage | None) -> None:
        """A call of a kind settled: learn how far its estimate fell short. (The first of its
        kind that reported nothing taught nothing: the next of its kind goes first instead.)"""
        kind = reserved.kind
        if reserved.probe and self._probing is not None:
            self._probing.discard(kind)
        if usage is not None:
            short = max(usage.total_input_tokens - reserved.measured, 0)
            self._shortfall[kind] = max(self._shortfall.get(kind, 0), short)

    def _charge(self, usage: Usage, model: str, measured: int) -> None:
        self.usage = self.usage + usage
        cost = cost_of(model, usage)
        if cost is None:
            if usage.total_tokens:
                self.priced = False
        else:
            self.cost_usd += cost
        seen = usage.total_input_tokens
        if measured and seen > measured * self.input_scale:
            self.input_scale = min(MAX_INPUT_SCALE, seen / measured)

    def probing(self, kind: Hashable) -> None:
        """Mark ``kind`` as having its first call out (its report teaches the estimate)."""
        if self._probing is None:
            self._probing = set()
        self._probing.add(kind)

    def _hold(self, r: Reservation) -> None:
        if r.probe:
            self.probing(r.kind)
        self.outstanding += 1
        self.reserved_input += r.input_tokens
        self.reserved_output += r.output_tokens
        self.reserved_cost += r.cost_usd

    async def _wait(self) -> None:
        event = self._settled
        if event is None:
            event = self._settled = anyio.Event()
        await event.wait()

    def _grant(
        self, estimate: InputEstimate, requested: int, model: str, *, held: bool
    ) -> Reservation | Denial:
        """The reservation a call may take now, or why it cannot; changes nothing.

        ``held``: count the reservations in flight (else only what was really spent).
        """
        lim = self.limits
        u = self.usage
        need = estimate.tokens
        r_in, r_out, r_cost = (
            (self.reserved_input, self.reserved_output, self.reserved_cost) if held else (0, 0, 0.0)
        )
        out = requested
        if lim.max_input_tokens is not None:
            left = lim.max_input_tokens - u.total_input_tokens - r_in
            if need > left:
                return TerminationReason.TOKEN_BUDGET, (
                    f"input token budget too small for the next model call (it needs about "
                    f"{need} input tokens; {max(left, 0)} of {lim.max_input_tokens} left)"
                )
        if lim.max_output_tokens is not None:
            out = min(out, lim.max_output_tokens - u.output_tokens - r_out)
            if out <= 0:
                return TerminationReason.TOKEN_BUDGET, (
                    f"output token budget spent ({u.output_tokens} used and "
                    f"{r_out} reserved of {lim.max_output_tokens})"
                )
        if lim.max_total_tokens is not None:
            left = lim.max_total_tokens - u.total_tokens - r_in - r_out
            out = min(out, left - need)
            if out <= 0:
                return TerminationReason.TOKEN_BUDGET, (
                    f"token budget too small for the next model call (it needs about {need} "
                    f"input tokens and some output; {max(left, 0)} of {lim.max_total_tokens} left)"
                )
        cost = 0.0
        if lim.max_cost_usd is not None:
            info = model_info(model)
            if info is not None:  # an unpriced model: the cost limit cannot be held ahead
                cost_in = estimate.cost(info)
                left_usd = lim.max_cost_usd - self.cost_usd - r_cost - cost_in
                if info.output_price > 0:
                    out = min(out, int(max(left_usd, 0.0) * 1_000_000 / info.output_price))
                if left_usd < 0 or out <= 0:
                    return TerminationReason.COST_BUDGET, (
                        f"cost budget too small for the next model call (its input alone may "
                        f"cost about ${cost_in:.4f}, and its output more; "
                        f"${max(lim.max_cost_usd - self.cost_usd - r_cost, 0.0):.4f} of "
                        f"${lim.max_cost_usd:.4f} left)"
                    )
                cost = cost_in + out * info.output_price / 1_000_000
        return Reservation(need, out, cost, estimate.measured)

    def take_tool_calls(self, wanted: int) -> int:
        """Grant up to ``wanted`` tool calls from the budget and count them."""
        lim = self.limits.max_tool_calls
        granted = wanted if lim is None else max(0, min(wanted, lim - self.tool_calls))
        self.tool_calls += granted
        return granted

    # -- warnings ------------------------------------------------------------------------

    def warnings(self) -> list[tuple[BudgetKind, float, float]]:
        """Shared limits that just crossed the ``warn_at`` share; each is reported once.

        (Turns are counted per agent run, so the run warns about those itself.)
        """
        if not self._watching:
            return []
        lim = self.limits
        u = self.usage
        candidates: list[tuple[BudgetKind, float, Any]] = [
            ("deadline", self.elapsed, lim.timeout),
            ("input_tokens", u.total_input_tokens, lim.max_input_tokens),
            ("output_tokens", u.output_tokens, lim.max_output_tokens),
            ("total_tokens", u.total_tokens, lim.max_total_tokens),
            ("cost", self.cost_usd, lim.max_cost_usd),
            ("tool_calls", self.tool_calls, lim.max_tool_calls),
        ]
        out: list[tuple[BudgetKind, float, float]] = []
        for kind, used, limit in candidates:
            if limit and used >= limit * lim.warn_at:
                warned = self._warned
                if warned is None:
                    warned = self._warned = set()
                elif kind in warned:
                    continue
                warned.add(kind)
                out.append((kind, float(used), float(limit)))
        return out


class StallDetector:
    """Counts the same tool called with the same arguments in a row."""

    __slots__ = ("_count", "_last", "threshold")

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._last: tuple[str, dict[str, Any]] | None = None
        self._count = 0

    def observe(self, call: ToolCallPart) -> int:
        """Record ``call``; return the repeat count if it reached the threshold, else 0."""
        last = self._last
        if last is not None and last[0] == call.name and last[1] == call.arguments:
            self._count += 1
        else:
            self._last, self._count = (call.name, call.arguments), 1
        return self._count if self._count >= self.threshold else 0
