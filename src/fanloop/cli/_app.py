"""The commands that run an agent: ``run``, ``chat`` and ``sessions resume``.

Each command builds one :class:`~fanloop.Agent` from the options, with a view (the human
renderer or ``--json``) as its observer and an :class:`Approver` as its confirmation gate,
then runs it inside a cancel scope that Ctrl-C (or a closed stdout) can cancel.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio
from anyio.abc import TaskStatus

from .. import Agent, Limits
from .._httpcore import trio_on_first_use
from .._record import record
from ..errors import ConfigurationError, FanloopError, ProviderError
from ..providers import Provider, from_env, resolve_provider
from ..providers._resolve import VENDORS
from ..sessions import Session, SessionNotFound, SQLiteStore, pending_approvals
from ._exits import (
    EXIT_AWAITING,
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    CommandError,
)
from ._mcp import open_mcp as open_servers
from ._prompt import ApproveMode, Approver, LineReader, stdin_reader
from ._render import (
    EventObserver,
    HumanView,
    JsonView,
    Style,
    View,
    approve_hints,
    describe_error,
    plural,
)
from ._terminal import EXIT_BROKEN_PIPE, GuardedStream, safe

if TYPE_CHECKING:
    from .._result import RunResult
    from ..sessions import PostgresStore

__all__ = [
    "EXIT_AWAITING",
    "EXIT_BROKEN_PIPE",
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "CommandError",
    "Console",
    "Interrupts",
    "RunOutcome",
    "exit_code_for",
    "execute",
    "is_postgres",
    "make_provider",
    "make_store",
    "note_new_store",
    "open_mcp",
    "run_command",
    "session_db",
    "store_label",
    "store_target",
]


SYSTEM_PROMPT = (
    "You are fanloop, a capable assistant working in the directory {root}. Use the tools to "
    "look things up and to act; several independent tool calls in one turn run in parallel. "
    "Be concise."
)


def session_db(root: str | None) -> Path:
    """``ROOT/.fanloop/sessions.db`` (the current directory when no root is given)."""
    return Path(root or ".") / ".fanloop" / "sessions.db"


STORE_ENV = "FANLOOP_STORE"
SCHEMA_ENV = "FANLOOP_STORE_SCHEMA"
_POSTGRES = ("postgresql://", "postgres://")


def store_target(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
    """Where the sessions live: ``--store``, else ``$FANLOOP_STORE``, else the SQLite file
    under ``--root``. A ``postgresql://`` (or ``postgres://``) URL, or a file path."""
    env = os.environ if environ is None else environ
    target = getattr(args, "store", None) or env.get(STORE_ENV, "").strip()
    return target or str(session_db(args.root))


def is_postgres(target: str) -> bool:
    """Whether a store target is a PostgreSQL URL rather than a SQLite file."""
    return target.lower().startswith(_POSTGRES)


def make_store(
    target: str, environ: Mapping[str, str] | None = None
) -> SQLiteStore | PostgresStore:
    """The store a target names: :class:`PostgresStore` for a PostgreSQL URL (in the schema
    ``$FANLOOP_STORE_SCHEMA``, default ``fanloop``), else :class:`SQLiteStore` on the file.

    Raises:
        CommandError: with exit code 2 for a bad schema name.
        ConfigurationError: psycopg is missing, or the URL cannot be parsed.
    """
    if not is_postgres(target):
        return SQLiteStore(os.path.expanduser(target))
    from ..sessions import PostgresStore  # only for a PostgreSQL URL: SQLite is the default

    env = os.environ if environ is None else environ
    schema = env.get(SCHEMA_ENV, "").strip() or "fanloop"
    try:
        return PostgresStore(target, schema=schema)
    except ValueError as exc:
        if isinstance(exc, ConfigurationError):
            raise
        raise CommandError(f"{SCHEMA_ENV}: {exc}", EXIT_CONFIG) from None


def note_new_store(target: str, console: Console) -> Callable[[], None]:
    """A function that says once, on stderr, that the SQLite file ``target`` was created (call
    it after the store was first used; it says nothing when the file was there before)."""
    if is_postgres(target):
        return lambda: None
    path = os.path.expanduser(target)
    existed = os.path.exists(path)

    def after() -> None:
        if not existed and os.path.exists(path):
            to_stderr(console)(
                safe(
                    f"fanloop: created {path} to keep the sessions in (--store or "
                    f"${STORE_ENV} puts them elsewhere)"
                )
            )

    return after


def store_label(store: SQLiteStore | PostgresStore) -> str:
    """The store, printable (a PostgreSQL URL without its password)."""
    return store.path if isinstance(store, SQLiteStore) else store.location


# -- providers --------------------------------------------------------------------------------


_GUESSES = (
    (("gpt-", "o1", "o3", "o4", "chatgpt-"), "openai"),
    (("claude-",), "anthropic"),
    (("gemini-",), "gemini"),
)


def _guess_vendor(model: str) -> str | None:
    """The vendor a bare model name belongs to (``gpt-4.1``: openai), if it is plain."""
    lowered = model.lower()
    for prefixes, vendor in _GUESSES:
        if lowered.startswith(prefixes):
            return vendor
    return None


def _check_vendor(vendor: str, where: str) -> None:
    """Refuse a vendor fanloop does not know, suggesting the closest one (``opnai``: openai)."""
    known = [*VENDORS, "azure"]
    if vendor.strip().lower() in known:
        return
    import difflib  # only for a misspelt name

    close = difflib.get_close_matches(vendor.lower(), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise CommandError(
        f"unknown vendor {vendor!r} in {where}{hint} (the vendors: {', '.join(known)})",
        EXIT_CONFIG,
    )


def make_provider(
    provider: str | None, model: str | None, environ: Mapping[str, str] | None = None
) -> Provider:
    """The provider named by ``--provider``/``--model``, else by ``LLM_PROVIDER``/``LLM_MODEL``.

    ``--model vendor:name`` also names the provider. The key and endpoint come from the
    environment as :func:`~fanloop.providers.from_env` reads them (``LLM_API_KEY`` and
    ``LLM_BASE_URL`` included).

    Raises:
        CommandError: with exit code 2 when something is missing or unknown; the message
            names the option or variable to set.
    """
    env = dict(os.environ if environ is None else environ)
    if model and not provider and ":" in model:
        vendor, name = model.split(":", 1)
        _check_vendor(vendor, f"--model {model}")
        provider, model = vendor, name
    elif provider:
        _check_vendor(provider, f"--provider {provider}")
    elif env.get("LLM_PROVIDER", "").strip():
        _check_vendor(env["LLM_PROVIDER"].strip(), "LLM_PROVIDER")
    elif model and (guess := _guess_vendor(model)):
        raise CommandError(
            f"--model {model} names no vendor: pass --model {guess}:{model} (or --provider "
            f"{guess}, or set LLM_PROVIDER)",
            EXIT_CONFIG,
        )
    if provider:
        provider = provider.strip().lower()
        _refuse_foreign_endpoint(env, provider)
        env["LLM_PROVIDER"] = provider
    if model:
        env["LLM_MODEL"] = model
    if env.get("LLM_PROVIDER", "").strip().lower() == "azure":
        return _azure(env)
    # One conversation at a time: httpx2's own pool carries it, and the aiohttp transport
    # (made for hundreds of requests in flight) would add ~70 ms of import to every start.
    transport = "auto" if env.get("FANLOOP_HTTP_TRANSPORT", "").strip() else "httpx"
    try:
        resolved = from_env(env, transport=transport)
    except ConfigurationError as exc:
        message = str(exc)
        if message.startswith("LLM_PROVIDER is not set"):
            message += "; pass --provider or set LLM_PROVIDER"
        elif message.startswith("LLM_MODEL is not set"):
            message += "; pass --model or set LLM_MODEL"
        elif "_API_KEY is not set" in message:
            message += f"; set {message.split()[0]} (or LLM_API_KEY) in the environment"
        raise CommandError(message, EXIT_CONFIG) from None
    if transport == "httpx":
        # httpx2's pool would load trio (55-60 ms) where it is installed; this process runs
        # on asyncio and starts no thread that imports trio (see fanloop._httpcore).
        with trio_on_first_use():
            import httpcore2  # noqa: F401
    return resolved


def _refuse_foreign_endpoint(env: Mapping[str, str], vendor: str) -> None:
    """``LLM_API_KEY`` and ``LLM_BASE_URL`` belong to ``$LLM_PROVIDER``: when the options name
    another vendor, its key must not be sent to that endpoint (nor that key to its endpoint).

    Raises:
        CommandError: with exit code 2.
    """
    configured = env.get("LLM_PROVIDER", "").strip().lower()
    generic = [v for v in ("LLM_BASE_URL", "LLM_API_KEY") if env.get(v, "").strip()]
    if generic and configured and configured != vendor:
        raise CommandError(
            f"{' and '.join(generic)} {'are' if len(generic) > 1 else 'is'} set for "
            f"LLM_PROVIDER={configured}, but the options name {vendor}; unset "
            f"{' and '.join(generic)} (or set LLM_PROVIDER={vendor}) so that no key goes to "
            "another vendor's endpoint",
            EXIT_CONFIG,
        )


def _azure(env: Mapping[str, str]) -> Provider:
    """``--model azure:DEPLOYMENT``: Azure OpenAI, from ``AZURE_OPENAI_ENDPOINT`` and
    ``AZURE_OPENAI_API_KEY`` (``LLM_BASE_URL`` and ``LLM_API_KEY`` are refused: Azure has
    its own variables)."""
    for variable in ("LLM_BASE_URL", "LLM_API_KEY"):
        if env.get(variable, "").strip():
            raise CommandError(
                f"{variable} is not read for azure: set AZURE_OPENAI_ENDPOINT and "
                "AZURE_OPENAI_API_KEY instead",
                EXIT_CONFIG,
            )
    model = env.get("LLM_MODEL", "").strip()
    if not model:
        raise CommandError("name the deployment: --model azure:DEPLOYMENT", EXIT_CONFIG)
    try:
        return resolve_provider(f"azure:{model}", transport="httpx")
    except ConfigurationError as exc:
        raise CommandError(str(exc), EXIT_CONFIG) from None


# -- Ctrl-C -----------------------------------------------------------------------------------


class Interrupts:
    """Ctrl-C: the first one cancels the current run; another one (or one while no run is
    going, e.g. at the chat prompt) exits with code 130.

    If the exit does not finish promptly (a tool stuck in a thread), the process is ended
    after ``grace`` seconds.
    """

    def __init__(self, exit_scope: anyio.CancelScope, *, grace: float = 3.0) -> None:
        self.exit_scope = exit_scope
        self.grace = grace
        self.run_scope: anyio.CancelScope | None = None
        self.view: View | None = None
        self.exiting = False

    def interrupt(self) -> None:
        scope = self.run_scope
        if scope is not None and not scope.cancel_called:
            scope.cancel()
            if self.view is not None:
                self.view.note("^C cancelling… (Ctrl-C again to quit)")
            return
        self.exiting = True
        if isinstance(self.view, HumanView) and self.view.midline:
            self.view.write("\n")
        self.exit_scope.cancel()
        timer = threading.Timer(self.grace, os._exit, (EXIT_INTERRUPTED,))
        timer.daemon = True
        timer.start()

    async def watch(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Receive SIGINT for as long as the command runs."""
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                self.interrupt()


async def run_command(
    body: Callable[[Interrupts], Awaitable[int]], console: Console | None = None
) -> int:
    """Run a command with Ctrl-C handled; returns its exit code (130 when interrupted).

    When the reader of ``console.out`` goes away (``| head -1``), the command is cancelled at
    once and the exit code is 141.
    """
    if console is not None and console.out.broken:
        return EXIT_BROKEN_PIPE  # the reader left before the work began: do none of it
    code = EXIT_INTERRUPTED
    interrupts: Interrupts | None = None
    try:
        async with anyio.create_task_group() as tg:
            interrupts = Interrupts(tg.cancel_scope)
            if console is not None:
                console.out.on_broken = tg.cancel_scope.cancel
            if sys.platform != "win32" and threading.current_thread() is threading.main_thread():
                await tg.start(interrupts.watch)
            code = await body(interrupts)
            tg.cancel_scope.cancel()
    finally:
        if console is not None:
            console.out.on_broken = None
        if interrupts is not None and isinstance(interrupts.view, HumanView):
            interrupts.view.hide_spinner()  # nothing is left spinning after the command
    if console is not None and console.out.broken:
        return EXIT_BROKEN_PIPE
    return EXIT_INTERRUPTED if interrupts is not None and interrupts.exiting else code


# -- one run ----------------------------------------------------------------------------------


@record()
class RunOutcome:
    """How one run went: its result (``None`` if it never started) and its provider error."""

    result: RunResult | None
    error: ProviderError | None


def exit_code_for(outcome: RunOutcome) -> int:
    """0 for a completed run, 3 when it waits for approval, 130 when cancelled, 1 for any
    other ending."""
    if outcome.error is not None or outcome.result is None:
        return EXIT_ERROR
    reason = str(outcome.result.termination_reason)
    if reason == "completed":
        return 0
    if reason == "awaiting_approval":
        return EXIT_AWAITING
    return EXIT_INTERRUPTED if reason == "cancelled" else EXIT_ERROR


async def execute(
    start: Callable[[], Awaitable[Any]],
    view: View,
    interrupts: Interrupts | None,
    console: Console,
) -> RunOutcome:
    """Run ``start()`` (an ``agent.run``/``agent.resume`` call) cancellably; report its ending.

    Ctrl-C cancels the run's own scope: fanloop finishes the run as ``cancelled`` (every
    started call gets a result, the session keeps what was done) and the view shows it.
    """
    error: ProviderError | None = None
    with anyio.CancelScope() as scope:
        if interrupts is not None:
            interrupts.run_scope, interrupts.view = scope, view
        try:
            await start()
        except ProviderError as exc:
            error = exc
        finally:
            if interrupts is not None:
                interrupts.run_scope = None
    if error is not None:
        console.error(describe_error(error))
    return RunOutcome(view.result, error)


# -- building the agent -----------------------------------------------------------------------


class Console:
    """Where the command line writes: stdout for the run, stderr for errors.

    Both are :class:`GuardedStream`: a closed pipe makes writes no-ops (and, on stdout,
    cancels the command: see :func:`run_command`) instead of raising.
    """

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = GuardedStream(out or sys.stdout)
        self.err = GuardedStream(err or sys.stderr)
        self.style = Style(self.out)
        self.err_style = Style(self.err)

    def error(self, message: str) -> None:
        print(f"{self.err_style.red('fanloop: error:')} {message}", file=self.err, flush=True)

    def info(self, message: str) -> None:
        """A dim line on stdout (stderr in ``--json`` mode, where stdout is for events)."""
        print(self.style.dim(message), file=self.out, flush=True)


@record()
class AgentSetup:
    """An agent with its view, gate and line reader, ready for runs."""

    agent: Agent
    view: View
    reader: LineReader | None


def build_setup(
    args: argparse.Namespace,
    console: Console,
    *,
    provider: Provider | None = None,
    tools: Any = None,
    delegate_tools: Any = None,
    approve: ApproveMode | None = None,
    system: str | None = None,
    session_id: str | None = None,
    retry: Any = None,
    extra_tools: Sequence[Any] = (),
) -> AgentSetup:
    """The agent the options describe (``--provider``, ``--delegate``, ``--memory``...);
    ``extra_tools`` (the ``--mcp`` servers' tools) join the built-in ones."""
    if provider is None:
        provider = make_provider(args.provider, args.model)
    root = args.root
    if tools is None:
        from ..tools import DEFAULT_TOOLS, default_tools, read_only_tools

        tools = DEFAULT_TOOLS if root is None else default_tools(root=root)
        if root is not None and delegate_tools is None:
            delegate_tools = read_only_tools(root=root)
    if extra_tools:
        tools = [*tools, *extra_tools]
    reader = stdin_reader(sys.stdin)
    if approve is None:
        if getattr(args, "defer", False):
            approve = "defer"
        elif args.yes:
            approve = "yes"
        elif reader is not None and reader.interactive:
            approve = "ask"
        else:
            approve = "decline"
    view: View
    if args.json:
        view = JsonView(console.out)
        err_style = console.err_style

        def write_err(text: str) -> None:
            console.err.write(text)
            console.err.flush()

        gate = Approver(
            approve, reader=reader, write=write_err, colour=err_style.yellow, show_preview=True
        )
    else:
        human = HumanView(
            console.out,
            model=str(getattr(provider, "model", "")),
            session_id=session_id,
            style=console.style,
            approve_options=approve_options(args),
            err=console.err,
            err_style=console.err_style,
        )
        view = human
        gate = Approver(
            approve,
            reader=reader,
            write=human.write,
            colour=console.style.yellow,
            answered=human.input_ended,
        )
    limits = Limits(max_turns=args.max_turns, timeout=args.timeout)
    delegation: Any = False
    if args.delegate:
        from .._delegate import Delegation  # only with --delegate

        delegation = Delegation(tools=delegate_tools)
    options: dict[str, Any] = {}
    if retry is not None:
        options["retry"] = retry
    agent = Agent(
        provider,
        system=system or SYSTEM_PROMPT.format(root=os.path.abspath(root or ".")),
        tools=tools,
        confirm=gate,
        observer=EventObserver(view),
        delegation=delegation,
        memory=args.memory,
        skills=args.skills,
        workspace=root,
        limits=limits,
        **options,
    )
    if isinstance(view, HumanView):
        view.dangerous = frozenset(n for n, t in agent.tools.items() if t.dangerous)
        view.subagent_tools = _subagent_tools(agent)
    return AgentSetup(agent, view, reader)


def _subagent_tools(agent: Agent) -> frozenset[str]:
    """The names of the agent's tools that run sub-agents (``delegate``, ``Agent.as_tool``)."""
    # Their classes live in fanloop._delegate: while nothing has imported it, no tool can be one
    # (a run without --delegate does not import it).
    delegate = sys.modules.get("fanloop._delegate")
    if delegate is None:
        return frozenset()
    kinds = (delegate.DelegateTool, delegate.AgentTool)
    return frozenset(n for n, t in agent.tools.items() if isinstance(t, kinds))


async def close_provider(provider: Any) -> None:
    """Close the provider's HTTP client (shielded: it runs while a command is cancelled)."""
    aclose = getattr(provider, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


async def _open_session(
    store: SQLiteStore | PostgresStore, session_id: str | None, *, must_exist: bool
) -> Session:
    if must_exist:
        try:
            return await store.load(session_id or "")
        except SessionNotFound:
            raise CommandError(f"no session {session_id!r} in {store_label(store)}") from None
    return await store.open(session_id)


def approve_options(args: argparse.Namespace) -> str:
    """The options an approval hint repeats so that it finds the session (``--root``)."""
    root = getattr(args, "root", None)
    return f" --root {shlex.quote(root)}" if root else ""


def refuse_if_pending(session: Session, args: argparse.Namespace) -> None:
    """A session with calls waiting for approval takes no new turn: say how to answer them.

    Raises:
        CommandError: the session waits (exit code 1).
    """
    pending = pending_approvals(session)
    if pending:
        ids = " ".join(shlex.quote(p.call_id) for p in pending)
        raise CommandError(
            safe(
                f"session {session.id} has {plural(len(pending), 'call')} waiting for "
                f"approval; answer first: fanloop sessions approve {shlex.quote(session.id)} "
                f"{ids}{approve_options(args)} [--deny [REASON]]"
            )
        )


def report_awaiting(
    outcome: RunOutcome, console: Console, session: Session, args: argparse.Namespace
) -> None:
    """In ``--json`` mode, say on stderr what waits for approval (the human view shows it)."""
    result = outcome.result
    if not args.json or result is None or not result.pending_approvals:
        return
    say = to_stderr(console)
    say(f"awaiting approval in session {session.id}:")
    for text in approve_hints(result.pending_approvals, session.id, approve_options(args)):
        say(text)


def needs_session_for_defer(args: argparse.Namespace) -> None:
    """``--defer`` parks calls in the session: ``run`` and ``chat`` need ``--session ID``.

    Raises:
        CommandError: with exit code 2 when it is missing.
    """
    if getattr(args, "defer", False) and not getattr(args, "session", None):
        raise CommandError(
            "--defer needs --session ID: the deferred calls wait in that session, and "
            "`fanloop sessions approve ID CALL_ID` answers them",
            EXIT_CONFIG,
        )


async def _title(session: Session, prompt: str) -> None:
    if not session.messages and "title" not in session.metadata:
        await session.set_metadata(title=" ".join(prompt.split())[:80])


def _needs_resume(session: Session) -> bool:
    """Whether the last turn was left open (a prompt or tool results with no answer yet,
    or tool calls without results)."""
    if not session.messages:
        return False
    last = session.messages[-1]
    return last.role == "user" or bool(last.tool_calls)


async def open_mcp(args: argparse.Namespace, stack: AsyncExitStack) -> list[Any]:
    """The tools of the ``--mcp`` servers, open until ``stack`` closes (see ``_mcp.py``)."""

    return await open_servers(args, stack)


# -- the commands -----------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """``fanloop run PROMPT``: one run, in a session (new unless ``--session``)."""
    prompt = args.prompt
    if prompt is None or prompt == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise CommandError('give a prompt: fanloop run "..." (or pipe one in)', EXIT_CONFIG)
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise CommandError("the prompt is empty", EXIT_CONFIG)
    needs_session_for_defer(args)
    provider = make_provider(args.provider, args.model)
    target = store_target(args)
    created = note_new_store(target, console)
    store = make_store(target)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(close_provider, provider)
        stack.push_async_callback(store.aclose)
        session = await _open_session(store, args.session, must_exist=False)
        created()
        refuse_if_pending(session, args)
        setup = build_setup(
            args,
            console,
            provider=provider,
            session_id=session.id,
            extra_tools=await open_mcp(args, stack),
        )
        await _title(session, prompt)

        async def body(interrupts: Interrupts) -> int:
            outcome = await execute(
                lambda: setup.agent.run(prompt, session=session), setup.view, interrupts, console
            )
            report_awaiting(outcome, console, session, args)
            return exit_code_for(outcome)

        return await run_command(body, console)
    raise AssertionError("unreachable")  # pragma: no cover


async def cmd_chat(args: argparse.Namespace, console: Console, *, resume: bool = False) -> int:
    """``fanloop chat``: a conversation kept in a session; ``/exit`` or Ctrl-D leaves.

    With ``resume`` (``fanloop sessions resume ID``) the session must exist, and a turn a
    dead process left open is finished first.
    """
    if not resume:
        needs_session_for_defer(args)
    provider = make_provider(args.provider, args.model)
    target = store_target(args)
    created = note_new_store(target, console)
    store = make_store(target)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(close_provider, provider)
        stack.push_async_callback(store.aclose)
        session_id = args.session if not resume else args.id
        session = await _open_session(store, session_id, must_exist=resume)
        created()
        refuse_if_pending(session, args)
        setup = build_setup(
            args,
            console,
            provider=provider,
            session_id=session.id,
            extra_tools=await open_mcp(args, stack),
        )
        agent, view, reader = setup.agent, setup.view, setup.reader
        interactive = reader is not None and reader.interactive
        say = console.info if not args.json else to_stderr(console)
        if session.messages:
            say(f"session {session.id} · {plural(len(session.messages), 'message')} so far")
        else:
            say(
                f"session {session.id} "
                f"(continue it later with: fanloop chat --session {session.id})"
            )
        if interactive:
            say("type /exit or press Ctrl-D to leave; Ctrl-C cancels a running answer")

        async def body(interrupts: Interrupts) -> int:
            code = 0
            interrupts.view = view
            if resume and _needs_resume(session):
                say("finishing the turn that was left open…")
                outcome = await execute(lambda: agent.resume(session), view, interrupts, console)
                report_awaiting(outcome, console, session, args)
                code = exit_code_for(outcome)
                if code == EXIT_AWAITING:
                    return code  # the session takes no new turn until a person answers
                if outcome.result is not None and (
                    str(outcome.result.termination_reason) == "effect_outcome_uncertain"
                ):
                    console.error(
                        f"the effect of an earlier tool call is uncertain: "
                        f"{outcome.result.detail} (see: fanloop sessions effects {session.id})"
                    )
                    return EXIT_ERROR
            if reader is None:
                return code
            while True:
                if interactive:
                    prompt_mark = console.style.bold(console.style.green("you › "))
                    if isinstance(view, HumanView):
                        view.write(prompt_mark)
                    else:
                        console.err.write("you › ")
                        console.err.flush()
                line = await reader.readline()
                if line is None:
                    if interactive and isinstance(view, HumanView):
                        view.write("\n")
                    return code
                if interactive and isinstance(view, HumanView):
                    view.input_ended()
                text = line.strip()
                if not text:
                    continue
                if text in ("/exit", "/quit"):
                    return code
                await _title(session, text)
                outcome = await execute(
                    partial(agent.run, text, session=session), view, interrupts, console
                )
                report_awaiting(outcome, console, session, args)
                code = exit_code_for(outcome)
                if code == EXIT_INTERRUPTED:
                    code = 0  # a cancelled answer does not end the conversation
                if code == EXIT_AWAITING:
                    return code  # the session takes no new turn until a person answers

        return await run_command(body, console)
    raise AssertionError("unreachable")  # pragma: no cover


def to_stderr(console: Console) -> Callable[[str], None]:
    """A ``say(text)`` that writes dim lines on stderr (``--json`` keeps stdout for events)."""

    def say(text: str) -> None:
        print(console.err_style.dim(text), file=console.err, flush=True)

    return say


def handle_errors(fn: Callable[[], int], console: Console) -> int:
    """Run a command; expected errors become one line on stderr and an exit code.

    A closed stdout (``| head``) ends the command quietly with exit code 141.
    """
    try:
        code = _unwrapped(fn)
    except BrokenPipeError:
        console.out.mark_broken()  # stdout at /dev/null: the interpreter's last flush is quiet too
        code = EXIT_BROKEN_PIPE
    except CommandError as exc:
        console.error(str(exc))
        return exc.code
    except ConfigurationError as exc:
        console.error(str(exc))
        return EXIT_CONFIG
    except FanloopError as exc:
        console.error(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_BROKEN_PIPE if console.out.broken else code


def _unwrapped(fn: Callable[[], int]) -> int:
    """``fn()``, with an exception group of one exception (from a task group) unwrapped."""
    try:
        return fn()
    except BaseExceptionGroup as group:
        inner: BaseException = group
        while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
            inner = inner.exceptions[0]
        if inner is group:
            raise
        raise inner from None
