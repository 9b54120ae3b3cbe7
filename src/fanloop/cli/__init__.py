"""The ``fanloop`` command line (also ``python -m fanloop``).

::

    fanloop run "prompt"          one run, streamed; the conversation is kept in a session
    fanloop chat                  an interactive conversation (/exit or Ctrl-D to leave)
    fanloop demo                  an offline tour: no key, no network
    fanloop web [--demo]          a chat page for the agent, on http://127.0.0.1:8765/
    fanloop sessions list | show ID | resume ID | effects [ID] | resolve-effect ID CALL_ID
    fanloop sessions pending [ID] | approve ID CALL_ID [--deny [REASON]]

Exit codes: 0 success, 1 a failed or unfinished run (provider error, limit reached...),
2 a usage or configuration error (e.g. a missing API key), 3 the run waits for a person's
approval (``--defer``), 130 interrupted by Ctrl-C, 141 stdout was closed (``| head``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any

import anyio

__all__ = ["build_parser", "main"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be from 0 to 65535")
    return value


def _root_option(parser: Any) -> None:
    parser.add_argument(
        "--root",
        metavar="DIR",
        help="the workspace: tools work inside it, sessions live in DIR/.fanloop/sessions.db "
        "unless --store says otherwise (default: the current directory)",
    )
    parser.add_argument(
        "--store",
        metavar="DSN|PATH",
        help="where sessions live: a postgresql:// URL (schema $FANLOOP_STORE_SCHEMA, "
        "default fanloop) or a SQLite file (default: $FANLOOP_STORE, else under --root)",
    )


def _json_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--json", action="store_true", help=help)


def _agent_options(parser: argparse.ArgumentParser) -> None:
    """The options of the commands that run an agent (run, chat, web, sessions resume/approve)."""
    group = parser.add_argument_group("agent options")
    group.add_argument(
        "--provider",
        help="anthropic, openai (the Responses API), openai-chat (Chat Completions), "
        "openrouter, vllm, ollama, gemini or azure (default: $LLM_PROVIDER; the key and "
        "endpoint: the vendor's variables, or $LLM_API_KEY and $LLM_BASE_URL)",
    )
    group.add_argument("--model", help="the model name, or vendor:model (default: $LLM_MODEL)")
    group.add_argument(
        "--mcp",
        action="append",
        metavar='"COMMAND ARGS"|URL',
        help="an MCP server whose tools the agent gets: a command to start (stdio) or an "
        "http(s):// URL (streamable HTTP); repeat for more",
    )
    group.add_argument(
        "--delegate", action="store_true", help="let the agent delegate to sub-agents"
    )
    group.add_argument(
        "--memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the remember tool and .fanloop/memory.md (default: on)",
    )
    group.add_argument(
        "--skills", action="store_true", help="discover SKILL.md skills (read_skill tool)"
    )
    # On the parser, not the group: the help lists --yes and --defer under "options", as it
    # did when these options came from a parent parser.
    gate = parser.add_mutually_exclusive_group()
    gate.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="approve every dangerous tool without asking (for scripts)",
    )
    gate.add_argument(
        "--defer",
        action="store_true",
        help="park dangerous calls in the session instead of asking; the run stops (exit "
        "code 3) until `fanloop sessions approve ID CALL_ID` answers (run and chat need "
        "--session ID)",
    )
    group.add_argument(
        "--max-turns", type=_positive_int, default=25, metavar="N", help="default: 25"
    )
    group.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="a deadline for each run"
    )
    _root_option(group)
    group.add_argument(
        "--json",
        action="store_true",
        help="print the event stream as JSON lines (one event per line) for other programs",
    )
    group.add_argument(
        "--verbose",
        "-v",
        action="count",
        default=0,
        help="fanloop's log lines on stderr (-v: info, -vv: debug; default: errors only)",
    )


class _LazyParser(argparse.ArgumentParser):
    """A sub-command's parser that adds its arguments when it is first used (to parse, or to
    show its usage or help): ``fanloop run`` does not build the options of every other
    command before its first request."""

    _fill: Callable[[argparse.ArgumentParser], None] | None = None

    def _filled(self) -> None:
        fill, self._fill = self._fill, None
        if fill is not None:
            fill(self)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        self._filled()
        return super().parse_known_args(*args, **kwargs)

    def format_usage(self) -> str:
        self._filled()
        return super().format_usage()

    def format_help(self) -> str:
        self._filled()
        return super().format_help()


def _subcommand(
    sub: Any, name: str, fill: Callable[[argparse.ArgumentParser], None], **kwargs: Any
) -> None:
    """Add the sub-command ``name``; ``fill`` adds its arguments when it is first used."""
    parser: _LazyParser = sub.add_parser(name, **kwargs)
    parser._fill = fill


def _run_args(run: argparse.ArgumentParser) -> None:
    _agent_options(run)
    run.add_argument("prompt", nargs="?", help="the prompt ('-' or none: read it from stdin)")
    run.add_argument("--session", metavar="ID", help="continue this session (created if new)")


def _chat_args(chat: argparse.ArgumentParser) -> None:
    _agent_options(chat)
    chat.add_argument("--session", metavar="ID", help="continue this session (created if new)")


def _demo_args(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--fast", action="store_true", help="skip the pauses between steps")
    _json_option(demo, "print the event stream as JSON lines")


def _web_args(web: argparse.ArgumentParser) -> None:
    _agent_options(web)
    web.add_argument(
        "agent",
        nargs="?",
        metavar="MODULE:AGENT",
        help="your own agent: a fanloop Agent (or a function returning one) in an importable "
        "module, e.g. myapp.agents:support",
    )
    web.add_argument(
        "--demo", action="store_true", help="the scripted demo model: no key, no network"
    )
    web.add_argument(
        "--fast", action="store_true", help="with --demo: no pauses (text arrives at once)"
    )
    web.add_argument("--port", type=_port, default=8765, help="default: 8765 (0: any free port)")
    web.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: 127.0.0.1); any other needs --token",
    )
    web.add_argument(
        "--token",
        metavar="TOKEN",
        help="a secret every request must carry (default: $FANLOOP_WEB_TOKEN); needed for "
        "any host but loopback",
    )


def _list_args(listing: argparse.ArgumentParser) -> None:
    _root_option(listing)
    _json_option(listing, "one JSON object per session")


def _show_args(show: argparse.ArgumentParser) -> None:
    show.add_argument("id", metavar="ID")
    _root_option(show)
    _json_option(show, "one JSON object per message")


def _resume_args(resume: argparse.ArgumentParser) -> None:
    _agent_options(resume)
    resume.add_argument("id", metavar="ID")


def _pending_args(pending: argparse.ArgumentParser) -> None:
    pending.add_argument("id", metavar="ID", nargs="?")
    _root_option(pending)
    _json_option(pending, "one JSON object per waiting call")


def _approve_args(approve: argparse.ArgumentParser) -> None:
    _agent_options(approve)
    approve.add_argument("id", metavar="ID")
    approve.add_argument("call_ids", metavar="CALL_ID", nargs="*", help="the calls to answer")
    approve.add_argument(
        "--all", action="store_true", help="answer every call the session waits for"
    )
    approve.add_argument(
        "--deny",
        nargs="?",
        const=True,
        metavar="REASON",
        help="decline instead of approving; the model is told REASON (put it after the CALL_IDs)",
    )


def _effects_args(effects: argparse.ArgumentParser) -> None:
    effects.add_argument("id", metavar="ID", nargs="?")
    _root_option(effects)
    _json_option(effects, "one JSON object per receipt")


def _resolve_args(resolve: argparse.ArgumentParser) -> None:
    resolve.add_argument("id", metavar="ID")
    resolve.add_argument("call_id", metavar="CALL_ID")
    outcome = resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--applied", dest="applied", action="store_true", default=None)
    outcome.add_argument("--not-applied", dest="applied", action="store_false")
    resolve.add_argument("--note", help="what you found")
    _root_option(resolve)


def _sessions_args(sessions: argparse.ArgumentParser) -> None:
    ssub = sessions.add_subparsers(dest="sessions_command", metavar="ACTION", required=True)
    _subcommand(
        ssub,
        "list",
        _list_args,
        help="every session, most recent first",
        description="Every session, the most recently updated first: its id, last update, "
        "message count, open effects and title.",
    )
    _subcommand(
        ssub,
        "show",
        _show_args,
        help="a session's conversation",
        description="A session's conversation: prompts, answers, tool calls and their "
        "results; then its open effects and the calls waiting for approval.",
    )
    _subcommand(
        ssub,
        "resume",
        _resume_args,
        help="finish a session's open turn, then chat on",
        description="Finish the turn a dead process left open in the session (if any), "
        "then continue the conversation as `fanloop chat --session ID` does.",
    )
    _subcommand(
        ssub,
        "pending",
        _pending_args,
        help="calls waiting for approval (of one session, or of all)",
        description="Dangerous calls parked for a person (by --defer): the session, the "
        "call id, the tool and its preview. Answer them with `fanloop sessions approve`.",
    )
    _subcommand(
        ssub,
        "approve",
        _approve_args,
        help="approve (or --deny) a deferred call and run on",
        description="Answer the calls a session waits for and run on: the rest of the "
        "parked batch, then the loop, as `sessions resume` does. Every waiting call needs an "
        "answer: name each CALL_ID, or pass --all. The parked turn's model call is not made "
        "again.",
        epilog="Exit codes: 0 the run completed, 1 an error (no such session or call, a "
        "failed run), 2 usage, 3 it waits for approval again.",
    )
    _subcommand(
        ssub,
        "effects",
        _effects_args,
        help="tool-effect receipts (of one session, or the open ones of all)",
        description="Dangerous tool calls leave a receipt: 'started' before the tool runs, "
        "'committed' after. A receipt left 'started' means the outcome is unknown.",
    )
    _subcommand(
        ssub,
        "resolve-effect",
        _resolve_args,
        help="record whether an uncertain effect took place",
        description="After checking the outside world, record whether the call's effect "
        "was applied; `sessions resume` then continues the session.",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``fanloop`` command.

    Each command's parser adds its arguments when it is first used (to parse, or to show its
    usage or help).
    """
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="fanloop",
        description="Run an agent: stream its answer, fan its tool calls out, ask before "
        "dangerous tools.",
        epilog="Exit codes: 0 ok, 1 run failed or stopped early, 2 usage or configuration "
        "error, 3 waiting for approval (--defer), 130 interrupted, 141 stdout closed.",
    )
    parser.add_argument("--version", action="version", version=f"fanloop {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_LazyParser)
    _subcommand(sub, "run", _run_args, help="run one prompt", description="Run one prompt.")
    _subcommand(
        sub,
        "chat",
        _chat_args,
        help="an interactive conversation",
        description="An interactive conversation kept in a session. /exit or Ctrl-D leaves; "
        "Ctrl-C cancels the answer being written, and exits at the prompt.",
    )
    _subcommand(
        sub,
        "demo",
        _demo_args,
        help="an offline tour of fanloop (no API key, no network)",
        description="An offline tour: a fake model server on 127.0.0.1 driven through the "
        "real OpenAI client.",
    )
    _subcommand(
        sub,
        "web",
        _web_args,
        help="a chat page for the agent in your browser",
        description="Serve a chat page for an agent: streamed text, tool calls, approve/deny "
        "buttons for dangerous calls, sub-agents side by side, usage and cost, sessions. The "
        "agent comes from the options below (as for `fanloop run`), from MODULE:AGENT, or "
        "from --demo (no key, no network). It listens on 127.0.0.1 unless --host says "
        "otherwise; any other host needs --token.",
    )
    _subcommand(
        sub,
        "sessions",
        _sessions_args,
        help="list, show and resume sessions; approve deferred calls; check tool effects",
        description="Every run and chat is kept in a session (SQLite under --root, or the "
        "--store / $FANLOOP_STORE database). These commands list and show sessions, resume "
        "one, answer the calls it waits to have approved, and check its tool effects.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fanloop`` command; returns the exit code."""
    from ._app import Console, handle_errors

    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    _configure_logging(getattr(args, "verbose", 0))
    command = _command(args, console)
    if command is None:
        parser.print_help(sys.stderr)
        return 2
    return handle_errors(lambda: anyio.run(command), console)


def _configure_logging(verbose: int) -> None:
    """The command line is the application: it decides where fanloop's log lines go.

    Errors only by default (a retry or a failed call is already shown by the renderer);
    ``-v`` adds info, ``-vv`` debug. Applications that embed fanloop are left alone.
    """
    log = logging.getLogger("fanloop")
    if not any(getattr(h, "_fanloop_cli", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("fanloop: log: %(levelname)s %(message)s"))
        handler._fanloop_cli = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.ERROR)


def _command(
    args: argparse.Namespace, console: Any
) -> Callable[[], Coroutine[Any, Any, int]] | None:
    from . import _app

    if args.command == "run":
        return partial(_app.cmd_run, args, console)
    if args.command == "chat":
        return partial(_app.cmd_chat, args, console)
    if args.command == "demo":
        from ._demo import demo

        return partial(demo, console, fast=args.fast, json=args.json)
    if args.command == "web":
        from ._web import cmd_web

        return partial(cmd_web, args, console)
    if args.command == "sessions":
        action = args.sessions_command
        if action == "resume":
            return partial(_app.cmd_chat, args, console, resume=True)
        if action == "approve":
            from ._approve import cmd_approve

            return partial(cmd_approve, args, console)
        from . import _sessions

        return partial(
            {
                "list": _sessions.cmd_list,
                "show": _sessions.cmd_show,
                "pending": _sessions.cmd_pending,
                "effects": _sessions.cmd_effects,
                "resolve-effect": _sessions.cmd_resolve,
            }[action],
            args,
            console,
        )
    return None
