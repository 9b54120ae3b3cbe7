"""Terminal rendering of a run's events: the human view and the ``--json`` view.

The loop never prints; these views are what turn its events into output. Both are plain
objects with an ``on_event(event)`` method, fed by :class:`EventObserver` (an observer's
``on_event`` sees every event of the run, sub-agents' included, in order).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from ..catalog import cost_of
from ..observers import NullObserver

if TYPE_CHECKING:
    from .._result import RunResult
    from ..events import Event
    from ..providers import Usage

__all__ = [
    "EventObserver",
    "HumanView",
    "JsonView",
    "Style",
    "View",
    "format_call",
    "usage_line",
]

_MAX_PREVIEW_LINES = 60


class Style:
    """ANSI styles that turn themselves off where colour does not belong.

    Colour is on only when ``stream`` is a terminal, ``NO_COLOR`` is not set (to anything) and
    ``TERM`` is not ``dumb``.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        stream = stream or sys.stdout
        isatty = getattr(stream, "isatty", None)
        self.enabled = bool(
            isatty is not None
            and isatty()
            and "NO_COLOR" not in os.environ
            and os.environ.get("TERM") != "dumb"
        )

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled and text else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)

    def magenta(self, text: str) -> str:
        return self._wrap("35", text)


class View(Protocol):
    """What renders a run: fed every event, keeps the root run's ending."""

    result: RunResult | None
    error: BaseException | None

    def on_event(self, event: Event) -> None: ...

    def note(self, text: str) -> None:
        """A line from the command line itself (e.g. "cancelling…")."""
        ...


class EventObserver(NullObserver):
    """A :class:`~fanloop.LoopObserver` that hands every event to a view, in order."""

    def __init__(self, view: View) -> None:
        self.view = view

    def on_event(self, event: Event) -> None:
        self.view.on_event(event)


# -- helpers ----------------------------------------------------------------------------------


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_call(name: str, arguments: dict[str, Any], width: int = 72) -> str:
    """``name(key='value', ...)``, clipped to about ``width`` characters."""
    args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return f"{name}({_clip(args, max(8, width - len(name) - 2))})"


def _first_line(text: str, width: int = 60) -> str:
    for line in text.splitlines():
        if line.strip():
            return _clip(line, width)
    return ""


def _short_id(call_id: str | None) -> str:
    return (call_id or "")[-4:]


def usage_line(result: RunResult, model: str, *, session_id: str | None = None) -> str:
    """``tokens in 1,234 · out 56 · cost $0.0042 · 2.31s`` (cost ``n/a`` for unknown models)."""
    u: Usage = result.usage
    cost = cost_of(model, u)
    parts = [
        f"tokens in {u.input_tokens:,} · out {u.output_tokens:,}",
        f"cost {'n/a' if cost is None else f'${cost:.4f}'}",
        f"{result.elapsed:.2f}s",
    ]
    if session_id:
        parts.append(f"session {session_id}")
    return " · ".join(parts)


def describe_error(error: BaseException) -> str:
    """A one-line description of a provider error: its kind, HTTP status and message."""
    status = getattr(error, "status_code", None)
    message = _first_line(str(error), 120)
    shown = status and f"status {status}" not in message and str(status) not in message
    head = type(error).__name__ + (f" (HTTP {status})" if shown else "")
    return f"{head}: {message}" if message else head


# -- the human view ---------------------------------------------------------------------------

Key = tuple[tuple[str, ...], str | None]


@dataclass(slots=True)
class _Batch:
    expected: int = 0
    started_at: float | None = None
    finished: int = 0
    durations: list[float] = field(default_factory=list)


class HumanView:
    """Streams text as it arrives and shows each tool call as a line with status and duration.

    Calls of one turn show a ``running`` line when they start and a ``✓``/``✗`` line with
    their duration when they finish, so calls running side by side are visible as such; when
    the last one of a turn with several finishes, a line compares the wall time with the sum.
    A sub-agent's lines carry its path and the delegating call's id: ``[delegate#3f2a]``.
    A dangerous call shows its preview (the diff, the ``$ command``); the question itself is
    asked by :class:`~fanloop.cli._prompt.Approver`.
    """

    def __init__(
        self,
        out: TextIO,
        *,
        model: str,
        dangerous: Iterable[str] = (),
        subagent_tools: Iterable[str] = ("delegate",),
        session_id: str | None = None,
        style: Style | None = None,
    ) -> None:
        self.out = out
        self.style = style or Style(out)
        self.model = model
        self.session_id = session_id
        self.dangerous = frozenset(dangerous)
        self.subagent_tools = frozenset(subagent_tools)
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.midline = False
        self._sub_text: dict[Key, str] = {}
        self._batches: dict[Key, _Batch] = {}
        self._declined: set[str] = set()
        self._handlers: dict[str, Callable[[Any], None]] = {
            "text_delta": self._text,
            "thinking_delta": self._thinking,
            "response_completed": self._response,
            "tool_started": self._tool_started,
            "tool_finished": self._tool_finished,
            "approval_requested": self._approval_requested,
            "approval_resolved": self._approval_resolved,
            "retry_scheduled": self._retry,
            "budget_warning": self._budget,
            "stall_detected": self._stall,
            "compaction_started": self._compaction_started,
            "compaction_finished": self._compaction_finished,
            "run_finished": self._run_finished,
        }

    # -- plumbing ---------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event)

    def write(self, text: str) -> None:
        """Write raw text (the prompt uses this, so the line state stays right)."""
        if text:
            self.out.write(text)
            self.out.flush()
            self.midline = not text.endswith("\n")

    def line(self, text: str, event: Event | None = None) -> None:
        """Write one whole line, starting a new one first if text is mid-line."""
        prefix = self._prefix(event) if event is not None else ""
        if self.midline:
            self.out.write("\n")
        self.out.write(prefix + text + "\n")
        self.out.flush()
        self.midline = False

    def note(self, text: str) -> None:
        self.line(self.style.yellow(text))

    def _prefix(self, event: Event) -> str:
        if event.parent_call_id is None and len(event.agent_path) <= 1:
            return ""
        path = "/".join(event.agent_path[1:]) or "/".join(event.agent_path)
        return self.style.magenta(f"[{path}#{_short_id(event.parent_call_id)}] ")

    @staticmethod
    def _key(event: Event) -> Key:
        return (event.agent_path, event.parent_call_id)

    @staticmethod
    def _is_root(event: Event) -> bool:
        return event.parent_call_id is None and len(event.agent_path) <= 1

    def _label(self, event: Any) -> str:
        call = event.call
        label = format_call(call.name, call.arguments)
        if call.name in self.subagent_tools:
            label = f"{call.name}#{_short_id(call.id)}{label[len(call.name) :]}"
        return label

    # -- text -------------------------------------------------------------------------------

    def _text(self, event: Any) -> None:
        if self._is_root(event):
            self.write(event.text)
            return
        key = self._key(event)
        pending = self._sub_text.get(key, "") + event.text
        *done, rest = pending.split("\n")
        for text in done:
            if text.strip():
                self.line(text, event)
        self._sub_text[key] = rest

    def _flush_sub_text(self, event: Event) -> None:
        rest = self._sub_text.pop(self._key(event), "")
        if rest.strip():
            self.line(rest, event)

    def _thinking(self, event: Any) -> None:
        if self._is_root(event):
            self.write(self.style.dim(event.text))

    # -- tools ------------------------------------------------------------------------------

    def _response(self, event: Any) -> None:
        calls = event.response.tool_calls
        self._flush_sub_text(event)
        if calls:
            self._batches[self._key(event)] = _Batch(expected=len(calls))

    def _batch(self, event: Event) -> _Batch:
        return self._batches.setdefault(self._key(event), _Batch())

    def _tool_started(self, event: Any) -> None:
        batch = self._batch(event)
        if batch.started_at is None:
            batch.started_at = time.perf_counter()
        if event.call.name in self.dangerous:
            return  # the approval block shows it
        self.line(
            f"  {self.style.cyan('⋯')} {self._label(event)}  {self.style.dim('running')}", event
        )

    def _tool_finished(self, event: Any) -> None:
        s = self.style
        call, result = event.call, event.result
        if call.id in self._declined:
            self._declined.discard(call.id)
            self.line(f"  {s.red('✗')} {self._label(event)}  {s.yellow('declined')}", event)
        else:
            mark = s.red("✗") if result.is_error else s.green("✓")
            snippet = _first_line(result.content)
            self.line(
                f"  {mark} {self._label(event)}  {s.dim(f'{event.duration:.2f}s')}"
                + (f"  {s.dim(snippet)}" if snippet else ""),
                event,
            )
        batch = self._batch(event)
        batch.finished += 1
        batch.durations.append(event.duration)
        if batch.expected and batch.finished >= batch.expected:
            if batch.expected > 1 and batch.started_at is not None:
                wall = time.perf_counter() - batch.started_at
                self.line(
                    s.cyan(
                        f"  ⇉ {batch.expected} calls side by side: {wall:.2f}s wall time, "
                        f"{sum(batch.durations):.2f}s if run one after another"
                    ),
                    event,
                )
            del self._batches[self._key(event)]

    def _approval_requested(self, event: Any) -> None:
        s = self.style
        name = event.call.name
        self.line(f"  {s.yellow('?')} {s.bold(name)} {s.yellow('wants to run:')}", event)
        lines = event.preview.splitlines() or [""]
        shown = lines[:_MAX_PREVIEW_LINES]
        for text in shown:
            self.line("    │ " + self._diff_colour(text), event)
        if len(lines) > len(shown):
            self.line(s.dim(f"    │ … {len(lines) - len(shown)} more lines"), event)

    def _diff_colour(self, text: str) -> str:
        s = self.style
        if text.startswith(("+++", "---")):
            return s.bold(text)
        if text.startswith("+"):
            return s.green(text)
        if text.startswith("-"):
            return s.red(text)
        if text.startswith("@@"):
            return s.cyan(text)
        return text

    def _approval_resolved(self, event: Any) -> None:
        if not event.approved:
            self._declined.add(event.call.id)

    # -- the rest ---------------------------------------------------------------------------

    def _retry(self, event: Any) -> None:
        text = f"  ↻ {describe_error(event.error)} — retry {event.attempt} in {event.delay:.2f}s"
        if event.discard_partial:
            text += " (the partial answer above is discarded)"
        self.line(self.style.yellow(text), event)

    def _budget(self, event: Any) -> None:
        self.line(
            self.style.yellow(f"  ! {event.budget}: {event.used:g} of {event.limit:g} used"), event
        )

    def _stall(self, event: Any) -> None:
        self.line(
            self.style.yellow(
                f"  ! {event.tool_name} called {event.count} times with the same arguments"
            ),
            event,
        )

    def _compaction_started(self, event: Any) -> None:
        self.line(self.style.dim(f"  ⋯ compacting {event.message_count} messages"), event)

    def _compaction_finished(self, event: Any) -> None:
        self.line(
            self.style.dim(f"  compacted {event.before_count} → {event.after_count} messages"),
            event,
        )

    def _run_finished(self, event: Any) -> None:
        s = self.style
        result: RunResult = event.result
        if not self._is_root(event):
            self._flush_sub_text(event)
            self.line(
                s.dim(
                    f"done: {result.termination_reason}, {result.turns} turns, "
                    f"{result.usage.input_tokens + result.usage.output_tokens:,} tokens"
                ),
                event,
            )
            return
        self.result, self.error = result, event.error
        reason = str(result.termination_reason)
        if reason == "cancelled":
            self.line(s.yellow("⊘ cancelled"))
        elif reason == "provider_error":
            pass  # the command line reports the error itself, on stderr
        elif reason != "completed":
            detail = f" — {result.detail}" if result.detail else ""
            self.line(s.yellow(f"⊘ stopped: {reason}{detail}"))
        self.line(s.dim(usage_line(result, self.model, session_id=self.session_id)))


# -- the JSON view ----------------------------------------------------------------------------


class JsonView:
    """``--json``: every event as one JSON object per line (``event.to_dict()``)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.result: RunResult | None = None
        self.error: BaseException | None = None

    def on_event(self, event: Event) -> None:
        root = event.parent_call_id is None and len(event.agent_path) <= 1
        if event.kind == "run_finished" and root:
            self.result, self.error = event.result, event.error
        self.out.write(json.dumps(event.to_dict(), default=str, ensure_ascii=False) + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)
