"""Terminal rendering of a run's events: the human view and the ``--json`` view.

The loop never prints; these views are what turn its events into output. Both are plain
objects with an ``on_event(event)`` method, fed by :class:`EventObserver` (an observer's
``on_event`` sees every event of the run, sub-agents' included, in order).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

from .._record import record
from ..catalog import cost_of
from ..observers import NullObserver
from ._terminal import (
    Spinner,
    Stream,
    display_width,
    fit,
    is_terminal,
    safe,
    safe_lines,
    terminal_width,
)

if TYPE_CHECKING:
    from .._approvals import PendingApproval
    from .._result import RunResult
    from ..events import Event
    from ..providers import Usage

__all__ = [
    "EventObserver",
    "HumanView",
    "JsonView",
    "Style",
    "View",
    "approve_hints",
    "format_call",
    "plural",
    "usage_line",
]

_MAX_PREVIEW_LINES = 60


class Style:
    """ANSI styles that turn themselves off where colour does not belong.

    Colour is on only when ``stream`` is a terminal, ``NO_COLOR`` is not set (to anything) and
    ``TERM`` is not ``dumb``.
    """

    def __init__(self, stream: Stream | None = None) -> None:
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


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages`` (``many`` for irregular plurals)."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def _clip(text: str, width: int) -> str:
    text = " ".join(safe(text).split())
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def format_call(name: str, arguments: dict[str, Any], width: int = 72) -> str:
    """``name(key='value', ...)``, clipped to about ``width`` characters; control
    characters (in the name or the values) are shown escaped, never sent to the terminal."""
    args = ", ".join(f"{safe(str(k))}={v!r}" for k, v in arguments.items())
    name = _clip(name, max(8, width // 2))
    return f"{name}({_clip(args, max(8, width - len(name) - 2))})"


def _first_line(text: str, width: int = 60) -> str:
    for line in text.splitlines():
        if line.strip():
            return _clip(line, width)
    return ""


def approve_hints(
    pending: Iterable[PendingApproval], session_id: str | None, options: str = ""
) -> list[str]:
    """The lines that say what waits for approval and how to answer it (ids shell-quoted,
    control characters shown escaped)."""
    pending = list(pending)
    sid = shlex.quote(session_id) if session_id else "SESSION"
    lines = [f"  {safe(p.call_id)}  {format_call(p.name, p.arguments)}" for p in pending]
    ids = " ".join(shlex.quote(p.call_id) for p in pending) or "CALL_ID"
    command = safe(f"fanloop sessions approve {sid} {ids}{options}")
    lines.append(f"  approve: {command}")
    lines.append(f"  deny:    {command} --deny [REASON]")
    return lines


def _short_id(call_id: str | None) -> str:
    return (call_id or "")[-4:]


def usage_line(
    result: RunResult,
    model: str,
    *,
    session_id: str | None = None,
    cut_off: Usage | None = None,
) -> str:
    """``tokens in 1,234 · out 56 · cost $0.0042 · 2.31s`` (cost ``n/a`` for unknown models).

    ``cut_off`` is an estimate of the calls a cancel cut off before the server reported their
    usage: added to the counts, which are then marked ``~`` (estimated).
    """
    u: Usage = result.usage
    about = ""
    if cut_off is not None and (cut_off.input_tokens or cut_off.output_tokens):
        u, about = u + cut_off, "~"
    cost = cost_of(model, u)
    parts = [
        f"tokens in {about}{u.input_tokens:,} · out {about}{u.output_tokens:,}",
        f"cost {'n/a' if cost is None else f'{about}${cost:.4f}'}",
        f"{result.elapsed:.2f}s",
    ]
    if about:
        parts.insert(1, "estimated: a call was cut off before the server counted it")
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


@record()
class _Batch:
    """One turn's calls, for the ``⇉`` line. Time spent waiting for a person at the approval
    prompt is not tool time: it is left out of the wall time."""

    expected: int = 0
    started_at: float | None = None
    finished: int = 0
    durations: list[float] = field(default_factory=list)
    asked_at: float | None = None
    waiting: float = 0.0

    def start(self, now: float) -> None:
        if self.started_at is None:
            self.started_at = now

    def wall(self, now: float) -> float:
        return now - (self.started_at or now) - self.waiting


class HumanView:
    """Streams text as it arrives and shows each tool call as a line with status and duration.

    Calls of one turn show a ``running`` line when they start and a ``✓``/``✗`` line with
    their duration when they finish, so calls running side by side are visible as such; when
    the last one of a turn with several finishes, a line compares the wall time (without the
    time a person took at the approval prompt) with the sum. A sub-agent's lines carry its
    path and the delegating call's id: ``[delegate-1#3f2a]``. A dangerous call shows its preview
    (the diff, the ``$ command``); the question itself is asked by
    :class:`~fanloop.cli._prompt.Approver`.

    On a terminal, ``thinking…`` shows while the first token is awaited, and tool lines are
    cut to the terminal's width (previews never are: what is approved is shown whole).
    Control characters in text from the model, tools or files are shown escaped.

    Args:
        out: where to write.
        err: where the command line's own notes go (``^C cancelling…``); ``out`` if ``None``.
        model: the model's name (for the cost).
        dangerous: the dangerous tools' names (their approval block shows them starting).
        subagent_tools: the tools that run sub-agents (their lines carry the call id).
        session_id: shown in the usage line and in approval hints.
        style: colours.
        show_usage: print the usage line at the end of a run.
        approve_options: appended to the ``fanloop sessions approve`` hint (e.g. ``--root``).
    """

    def __init__(
        self,
        out: Stream,
        *,
        model: str,
        dangerous: Iterable[str] = (),
        subagent_tools: Iterable[str] = ("delegate",),
        session_id: str | None = None,
        style: Style | None = None,
        show_usage: bool = True,
        approve_options: str = "",
        err: Stream | None = None,
        err_style: Style | None = None,
    ) -> None:
        self.out = out
        self.style = style or Style(out)
        self.err = err
        self.err_style = err_style or (Style(err) if err is not None else self.style)
        self.model = model
        self.session_id = session_id
        self.dangerous = frozenset(dangerous)
        self.subagent_tools = frozenset(subagent_tools)
        self.show_usage = show_usage
        self.approve_options = approve_options
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.midline = False
        self.spinner: Spinner | None = None
        if is_terminal(out) and os.environ.get("TERM") != "dumb":
            self.spinner = Spinner(out, self.style.dim)
        self._sub_text: dict[Key, str] = {}
        self._batches: dict[Key, _Batch] = {}
        self._declined: set[str] = set()
        # Model calls not yet counted (request sent, no response yet): their request and the
        # characters streamed so far, for the estimate shown when a cancel cuts them off.
        self._in_flight: dict[Key, tuple[Any, int]] = {}
        self._handlers: dict[str, Callable[[Any], None]] = {
            "request_started": self._request,
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
        self._meter(event)
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event)

    def hide_spinner(self) -> None:
        """Stop the ``thinking…`` indicator and clear its line (if it shows)."""
        if self.spinner is not None:
            self.spinner.hide()

    def write(self, text: str) -> None:
        """Write raw text (the prompt uses this, so the line state stays right)."""
        if text:
            self.hide_spinner()
            self.out.write(text)
            self.out.flush()
            self.midline = not text.endswith("\n")

    def line(self, text: str, event: Event | None = None, *, fit_width: bool = False) -> None:
        """Write one whole line, starting a new one first if text is mid-line; with
        ``fit_width``, cut to the terminal's width."""
        self.hide_spinner()
        prefix = self._prefix(event) if event is not None else ""
        if self.midline:
            self.out.write("\n")
        whole = prefix + text
        if fit_width:
            whole = fit(whole, terminal_width(self.out))
        self.out.write(whole + "\n")
        self.out.flush()
        self.midline = False

    def note(self, text: str) -> None:
        """A line of the command line's own, on ``err`` (the streamed text stays whole)."""
        if self.err is None:
            self.line(self.style.yellow(text))
            return
        self.hide_spinner()
        if self.midline:  # end the streamed line first, so the note starts a line of its own
            self.out.write("\n")
            self.out.flush()
            self.midline = False
        self.err.write(self.err_style.yellow(text) + "\n")
        self.err.flush()

    def input_ended(self) -> None:
        """The user ended a line of input: the terminal's echo left the cursor on a new line."""
        self.midline = False

    def _prefix(self, event: Event) -> str:
        if event.parent_call_id is None and len(event.agent_path) <= 1:
            return ""
        path = "/".join(event.agent_path[1:]) or "/".join(event.agent_path)
        return self.style.magenta(f"[{safe(path)}#{_short_id(event.parent_call_id)}] ")

    @staticmethod
    def _key(event: Event) -> Key:
        return (event.agent_path, event.parent_call_id)

    @staticmethod
    def _is_root(event: Event) -> bool:
        return event.parent_call_id is None and len(event.agent_path) <= 1

    def _label(self, event: Any, width: int = 72) -> str:
        call = event.call
        label = format_call(call.name, call.arguments, width)
        if call.name in self.subagent_tools:
            label = f"{safe(call.name)}#{_short_id(call.id)}{label[len(safe(call.name)) :]}"
        return label

    def _tool_line(self, event: Any, mark: str, status: str, snippet: str = "") -> None:
        """``  ✓ name(args)  0.01s  first line of the result``, cut to the terminal's width:
        the arguments first, then the snippet, so the status stays in sight."""
        width = terminal_width(self.out)
        if width is None:
            label = self._label(event)
            snippet = _clip(snippet, 60) if snippet else ""
        else:
            used = display_width(self._plain_prefix(event) + status) + 6
            label = self._label(event, max(16, min(72, width - used)))
            room = width - used - display_width(label) - 2
            snippet = _clip(snippet, room) if snippet and room >= 8 else ""
        text = f"  {mark} {label}  {status}"
        if snippet:
            text += f"  {self.style.dim(snippet)}"
        self.line(text, event, fit_width=True)

    def _plain_prefix(self, event: Event) -> str:
        if self._is_root(event):
            return ""
        path = "/".join(event.agent_path[1:]) or "/".join(event.agent_path)
        return f"[{safe(path)}#{_short_id(event.parent_call_id)}] "

    def _meter(self, event: Any) -> None:
        """Keep track of the model calls in flight, and of what they streamed."""
        kind = event.kind
        if kind == "request_started":
            self._in_flight[self._key(event)] = (event.request, 0)
        elif kind in ("text_delta", "thinking_delta"):
            key = self._key(event)
            if key in self._in_flight:
                request, chars = self._in_flight[key]
                self._in_flight[key] = (request, chars + len(event.text))
        elif kind in ("response_completed", "usage_updated", "model_failed"):
            self._in_flight.pop(self._key(event), None)

    def cut_off_usage(self) -> Usage | None:
        """An estimate of the calls in flight, which a cancel cut off before the server sent
        their usage (input from the request, about four characters a token of output)."""
        if not self._in_flight:
            return None
        from ..limits import estimate_input
        from ..providers import Usage

        total = Usage()
        for request, chars in self._in_flight.values():
            out = (chars + 3) // 4
            total = total + Usage(input_tokens=estimate_input(request).tokens, output_tokens=out)
        return total

    # -- text -------------------------------------------------------------------------------

    def _request(self, event: Any) -> None:
        if self.spinner is not None and self._is_root(event) and not self.midline:
            self.spinner.show()

    def _text(self, event: Any) -> None:
        text = safe(event.text.replace("\r", ""))
        if self._is_root(event):
            self.write(text)
            return
        key = self._key(event)
        pending = self._sub_text.get(key, "") + text
        *done, rest = pending.split("\n")
        for line in done:
            if line.strip():
                self.line(line, event)
        self._sub_text[key] = rest

    def _flush_sub_text(self, event: Event) -> None:
        rest = self._sub_text.pop(self._key(event), "")
        if rest.strip():
            self.line(rest, event)

    def _thinking(self, event: Any) -> None:
        if self._is_root(event):
            self.write(self.style.dim(safe(event.text.replace("\r", ""))))

    # -- tools ------------------------------------------------------------------------------

    def _response(self, event: Any) -> None:
        calls = event.response.tool_calls
        if self._is_root(event):
            self.hide_spinner()
        self._flush_sub_text(event)
        if calls:
            self._batches[self._key(event)] = _Batch(expected=len(calls))

    def _batch(self, event: Event) -> _Batch:
        return self._batches.setdefault(self._key(event), _Batch())

    def _tool_started(self, event: Any) -> None:
        self._batch(event).start(time.perf_counter())
        if event.call.name in self.dangerous:
            return  # the approval block shows it
        self._tool_line(event, self.style.cyan("⋯"), self.style.dim("running"))

    def _tool_finished(self, event: Any) -> None:
        s = self.style
        call, result = event.call, event.result
        if call.id in self._declined:
            self._declined.discard(call.id)
            self._tool_line(event, s.red("✗"), s.yellow("declined"))
        else:
            mark = s.red("✗") if result.is_error else s.green("✓")
            self._tool_line(
                event, mark, s.dim(f"{event.duration:.2f}s"), _first_line(result.content, 200)
            )
        batch = self._batch(event)
        batch.finished += 1
        batch.durations.append(event.duration)
        if batch.expected and batch.finished >= batch.expected:
            if batch.expected > 1 and batch.started_at is not None:
                wall = batch.wall(time.perf_counter())
                self.line(
                    s.cyan(
                        f"  ⇉ {batch.expected} calls side by side: {wall:.2f}s wall time, "
                        f"{sum(batch.durations):.2f}s if run one after another"
                    ),
                    event,
                    fit_width=True,
                )
            del self._batches[self._key(event)]

    def _approval_requested(self, event: Any) -> None:
        s = self.style
        batch = self._batch(event)
        now = time.perf_counter()
        batch.start(now)
        batch.asked_at = now  # until it is answered, the clock is the person's, not the tools'
        name = safe(event.call.name)
        self.line(f"  {s.yellow('?')} {s.bold(name)} {s.yellow('wants to run:')}", event)
        lines = safe_lines(event.preview)
        shown = lines[:_MAX_PREVIEW_LINES]
        for text in shown:
            self.line("    │ " + self._diff_colour(text), event)
        if len(lines) > len(shown):
            more = plural(len(lines) - len(shown), "more line")
            self.line(s.dim(f"    │ … {more}"), event)

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
        batch = self._batch(event)
        if batch.asked_at is not None:
            batch.waiting += time.perf_counter() - batch.asked_at
            batch.asked_at = None
        if not event.approved:
            self._declined.add(event.call.id)

    # -- the rest ---------------------------------------------------------------------------

    def _retry(self, event: Any) -> None:
        text = f"  ↻ {describe_error(event.error)} — retry {event.attempt} in {event.delay:.2f}s"
        if event.discard_partial:
            text += " (the partial answer above is discarded)"
        self.line(self.style.yellow(text), event, fit_width=True)

    def _budget(self, event: Any) -> None:
        self.line(
            self.style.yellow(f"  ! {event.budget}: {event.used:g} of {event.limit:g} used"), event
        )

    def _stall(self, event: Any) -> None:
        self.line(
            self.style.yellow(
                f"  ! {safe(event.tool_name)} called {plural(event.count, 'time')} "
                "with the same arguments"
            ),
            event,
            fit_width=True,
        )

    def _compaction_started(self, event: Any) -> None:
        self.line(self.style.dim(f"  ⋯ compacting {plural(event.message_count, 'message')}"), event)

    def _compaction_finished(self, event: Any) -> None:
        self.line(
            self.style.dim(
                f"  compacted {event.before_count} → {plural(event.after_count, 'message')}"
            ),
            event,
        )

    def _run_finished(self, event: Any) -> None:
        s = self.style
        result: RunResult = event.result
        if not self._is_root(event):
            self._flush_sub_text(event)
            self.line(
                s.dim(
                    f"done: {result.termination_reason}, {plural(result.turns, 'turn')}, "
                    f"{plural(result.usage.input_tokens + result.usage.output_tokens, 'token')}"
                ),
                event,
            )
            return
        self.hide_spinner()
        self.result, self.error = result, event.error
        reason = str(result.termination_reason)
        if reason == "cancelled":
            self.line(s.yellow("⊘ cancelled"))
        elif reason == "provider_error":
            pass  # the command line reports the error itself, on stderr
        elif reason == "awaiting_approval":
            waiting = plural(len(result.pending_approvals), "call")
            self.line(s.yellow(f"⏸ awaiting approval: {waiting} waiting for a person"))
            hints = approve_hints(result.pending_approvals, self.session_id, self.approve_options)
            for text in hints:
                self.line(text)
        elif reason != "completed":
            detail = f" — {safe(result.detail)}" if result.detail else ""
            self.line(s.yellow(f"⊘ stopped: {reason}{detail}"))
        if self.show_usage:
            cut_off = self.cut_off_usage() if reason == "cancelled" else None
            line = usage_line(result, self.model, session_id=self.session_id, cut_off=cut_off)
            self.line(s.dim(line))
        elif self.midline:
            self.write("\n")
        self._in_flight.clear()


# -- the JSON view ----------------------------------------------------------------------------


class JsonView:
    """``--json``: every event as one JSON object per line (``event.to_dict()``)."""

    def __init__(self, out: Stream) -> None:
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
