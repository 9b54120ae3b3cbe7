"""Agent: immutable configuration plus ``run`` / ``stream`` / ``run_sync``. No turn logic here."""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from types import MappingProxyType, UnionType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self

import anyio
from typing_extensions import TypeVar

from ._agent_config import (
    AUTO_TOOLS,
    DEFAULT_LIMITS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_RETRY,
    as_settings,
    check_hosted,
    check_provider,
    delegate_tool,
    index_tools,
    native_output,
    output_format,
    split_tools,
    tool_spec,
    tools_async,
)
from ._config import DEFAULT_CONTEXT, NO_CONCURRENCY, Concurrency, ContextPolicy
from ._dispatch import build_table
from ._fanout import LimiterPool
from ._migrants import AGENT_NAMES, MOVED_AGENT_NAMES, RUN_NAMES, refuse_migrant_names
from ._model import Invoker, make_invoker
from ._model_types import HostedTool, OutputFormat, ToolSpec
from ._output import OutputMode, OutputSpec, OutputValidator
from ._parked import resumed
from ._result import OutputT, RunResult
from ._retry import RetryPolicy
from ._run import RunState
from ._runner import Prompt, SystemFn, run_with_deadline, start_run
from ._settings import NO_SETTINGS, ModelSettings, check_settings
from .catalog import model_info
from .errors import ConfigurationError
from .limits import Limits
from .messages import Message
from .observers import Hooks, LoopObserver
from .tools.base import Tool

if TYPE_CHECKING:
    from ._delegate import Delegation
    from ._guardrails import Guardrail, Guardrails, InputGuardrail, OutputGuardrail
    from ._handoff import Handoff
    from ._stream import RunStream
    from .providers.base import Provider
    from .sessions import Session

__all__ = ["Agent", "ConfirmFn"]

ConfirmFn = Callable[..., "Awaitable[bool | str | object] | bool | str | object"]
"""``confirm(name, preview)`` or ``confirm(name, preview, call)``, sync or async: ``True``,
``False``, a reason string, or :data:`fanloop.DEFER`."""
DepsT = TypeVar("DepsT", default=Any)
"""The type of ``deps`` the agent's tools receive in their :class:`RunContext`."""


class Agent(Generic[DepsT, OutputT]):
    """An agent: a provider, a system prompt, tools, and the rules of the loop.

    An ``Agent`` is immutable configuration, cheap to make and safe to share: any number of
    runs may use one agent at the same time. The conversation lives in the run (or in a
    :class:`~fanloop.sessions.Session`), never on the agent.

    Args:
        provider: a :class:`~fanloop.providers.Provider`, or a ``"anthropic:MODEL"`` /
            ``"openai:MODEL"`` string.
        system: the system prompt, or a function of the run's :class:`~fanloop.RunContext`
            (sync or async) that makes it at each run's start.
        tools: :class:`~fanloop.Tool` instances, plain functions (made into tools with
            :func:`~fanloop.tool`), and tools the provider runs itself
            (:class:`~fanloop.providers.HostedTool`).
        limits: turn, time, token, cost and tool-call limits (:class:`~fanloop.Limits`).
        retry: how transient provider failures are retried (:class:`~fanloop.RetryPolicy`).
        confirm: ``(name, preview) -> bool | str``, sync or async: the gate before a dangerous
            tool. ``True`` runs it; ``False`` or a string declines (the string is the reason
            the model sees); :data:`~fanloop.DEFER` parks the call until a person answers
            through :meth:`resume` (the run ends with ``awaiting_approval``). A ``confirm`` with
            a third positional parameter also receives the :class:`ToolCallPart`. Defaults to
            ``hooks.confirm``.
        auto_approve: run dangerous tools without asking.
        observer: a :class:`~fanloop.LoopObserver`.
        hooks: :class:`~fanloop.Hooks` callbacks.
        delegation: give the agent the ``delegate`` tool (sub-agents with read-only tools);
            a :class:`~fanloop.Delegation` also sets their prompt, model, tools, settings and
            how deep delegation may nest.
        memory: give the agent the ``remember`` tool and load ``.fanloop/memory.md`` into the
            system prompt.
        skills: discover ``SKILL.md`` skills, list them in the system prompt and add
            ``read_skill``.
        name: the agent's name in event lineage and logs.
        model_settings: sampling and tool-choice options of every model call
            (:class:`~fanloop.ModelSettings`); a run may override them field by field with
            ``run(..., model_settings=...)``. ``max_tokens`` (4096 when unset),
            ``thinking_budget`` and ``max_tokens_ceiling`` live there too. A setting the
            provider cannot honour is a :class:`~fanloop.errors.ConfigurationError`.
        concurrency: how many tool calls run at once (:class:`~fanloop.Concurrency`: per
            agent, per tool, per named key, and the worker threads of synchronous tools).
        context: how the conversation is kept inside the model's context window
            (:class:`~fanloop.ContextPolicy`: the window, the compaction threshold, the cap on
            one tool result).
        workspace: the root directory for file tools, memory and skills (default: the cwd).
        output_type: what the answer must be: a pydantic model, a dataclass, a TypedDict, a
            primitive, ``list[...]`` or a union of them (default ``str``, the text; ``None``
            means the same). The validated value is ``result.output``.
        output_retries: how many answers that fail validation go back to the model (with
            the errors) before the run ends with ``output_invalid``.
        output_validators: checks of the validated value, ``fn(output)`` or
            ``fn(ctx, output)``, sync or async; one may raise
            :class:`~fanloop.errors.ModelRetry` to send the answer back, or return a
            corrected value.
        handoffs: agents (or :func:`~fanloop.handoff` objects) the model may hand the
            conversation to with a ``transfer_to_<name>`` tool: the target finishes the run
            (docs/handoffs.md).
        output_mode: ``"auto"`` (the provider's native structured output where it has one,
            else a ``final_result`` tool), ``"tool"`` or ``"native"``.
        guardrails: checks of each run's prompt (:func:`~fanloop.input_guardrail`, run
            alongside the first model call) and of its final answer
            (:func:`~fanloop.output_guardrail`); one that trips ends the run with
            ``guardrail_tripped`` (docs/guardrails.md).
    """

    __slots__ = (
        "_caps",
        "_confirm_arg",
        "_guard",
        "_invoke",
        "_options",
        "_owns_provider",
        "_provider",
        "_table",
        "_tool_async",
        "auto_approve",
        "compact_threshold",
        "concurrency",
        "confirm",
        "context",
        "context_window",
        "delegation",
        "guardrails",
        "handoffs",
        "hooks",
        "hosted_tools",
        "limiters",
        "limits",
        "max_concurrency",
        "max_depth",
        "max_tokens",
        "max_tokens_ceiling",
        "max_tool_result_chars",
        "memory",
        "model",
        "model_settings",
        "name",
        "native_output",
        "observer",
        "output",
        "output_format",
        "provider_name",
        "retry",
        "skills",
        "system",
        "system_prompt",
        "temperature",
        "thinking_budget",
        "tool_concurrency",
        "tool_specs",
        "tools",
        "workspace",
    )

    _provider: Any
    provider_name: str
    model: str
    name: str
    system: str | SystemFn | None
    system_prompt: str | None
    limits: Limits
    retry: RetryPolicy
    confirm: ConfirmFn | None
    auto_approve: bool
    observer: LoopObserver | None
    hooks: Hooks | None
    delegation: bool | Delegation
    handoffs: tuple[Handoff, ...]
    memory: bool
    skills: bool
    workspace: str | None
    max_depth: int
    temperature: float | None
    thinking_budget: int | None
    concurrency: Concurrency
    context: ContextPolicy
    compact_threshold: float
    max_concurrency: int | None
    tool_concurrency: Mapping[str, int]
    context_window: int
    max_tokens: int
    max_tokens_ceiling: int
    max_tool_result_chars: int | None
    hosted_tools: tuple[HostedTool, ...]
    output: OutputSpec
    native_output: bool
    output_format: OutputFormat | None
    model_settings: ModelSettings
    limiters: LimiterPool
    tools: dict[str, Tool]
    tool_specs: tuple[ToolSpec, ...]
    _tool_async: dict[str, bool]
    _invoke: Invoker
    _options: Mapping[str, Any]
    _confirm_arg: ConfirmFn | None
    _caps: dict[str, tuple[tuple[str, int], ...]]
    _owns_provider: bool
    _table: dict[str, tuple[Any, ...]]
    guardrails: tuple[Guardrail, ...]
    _guard: Guardrails | None
    _subagent_class: ClassVar[type[Agent[Any, Any]]]
    """The class ``delegate`` sub-agents are made with (this one: see fanloop._delegate)."""

    @refuse_migrant_names(AGENT_NAMES, MOVED_AGENT_NAMES)
    def __init__(
        self,
        provider: Provider | str | Sequence[Any] | None = None,
        *,
        system: str | SystemFn | None = None,
        tools: Iterable[Tool | HostedTool | Callable[..., Any]] = (),
        limits: Limits | None = None,
        retry: RetryPolicy | None = None,
        confirm: ConfirmFn | None = None,
        auto_approve: bool = False,
        observer: LoopObserver | None = None,
        hooks: Hooks | None = None,
        delegation: bool | Delegation = False,
        memory: bool = False,
        skills: bool = False,
        name: str = "agent",
        model_settings: ModelSettings | None = None,
        concurrency: Concurrency | None = None,
        context: ContextPolicy | None = None,
        workspace: str | None = None,
        output_type: type[OutputT] | UnionType | None = str,  # type: ignore[assignment]
        output_retries: int = 1,
        output_validators: Iterable[OutputValidator] = (),
        output_mode: OutputMode = "auto",
        guardrails: Iterable[InputGuardrail | OutputGuardrail] = (),
        handoffs: Iterable[Agent[Any, Any] | Handoff] = (),
        client: Provider | None = None,
        _limiters: LimiterPool | None = None,
    ) -> None:
        received = dict(locals())  # first, so exactly the parameters: see with_options()
        del received["self"]
        provider, tools = check_provider(provider, client, tools)
        own_tools, hosted = split_tools(tools)
        owns_provider = isinstance(provider, str)
        if isinstance(provider, str):
            from .providers._resolve import resolve_provider

            provider = resolve_provider(provider)
        if not callable(getattr(provider, "complete", None)) and not callable(
            getattr(provider, "stream", None)
        ):
            raise ConfigurationError(
                f"{provider!r} is not a provider: it needs a complete() or stream() method"
            )
        settings = NO_SETTINGS if model_settings is None else as_settings(model_settings)
        max_tokens = settings.max_tokens or DEFAULT_MAX_TOKENS
        if concurrency is None:
            concurrency = NO_CONCURRENCY
        elif not isinstance(concurrency, Concurrency):
            raise ConfigurationError(
                f"concurrency must be a Concurrency, not {type(concurrency).__name__}"
            )
        if context is None:
            context = DEFAULT_CONTEXT
        elif not isinstance(context, ContextPolicy):
            raise ConfigurationError(
                f"context must be a ContextPolicy, not {type(context).__name__}"
            )
        _set(self, "_owns_provider", owns_provider)
        _set(self, "_confirm_arg", confirm)
        if confirm is None and hooks is not None:
            confirm = hooks.confirm
        _set(self, "_provider", provider)
        provider_name = str(getattr(provider, "name", type(provider).__name__))
        _set(self, "provider_name", provider_name)
        _set(self, "model", str(getattr(provider, "model", "")))
        _set(self, "name", name)
        _set(self, "system", system)
        _set(self, "limits", limits if limits is not None else DEFAULT_LIMITS)
        _set(self, "retry", retry if retry is not None else DEFAULT_RETRY)
        _set(self, "confirm", confirm)
        _set(self, "auto_approve", auto_approve)
        _set(self, "observer", observer)
        _set(self, "hooks", hooks)
        _set(self, "delegation", delegation)
        _set(self, "memory", memory)
        _set(self, "skills", skills)
        _set(self, "workspace", workspace)
        _set(self, "model_settings", settings)
        _set(self, "temperature", settings.temperature)
        _set(self, "thinking_budget", settings.thinking_budget)
        _set(self, "concurrency", concurrency)
        _set(self, "max_concurrency", concurrency.max_concurrency)
        _set(self, "tool_concurrency", concurrency.tool_concurrency)
        _set(self, "context", context)
        _set(self, "compact_threshold", context.compact_threshold)
        _set(self, "max_tool_result_chars", context.max_tool_result_chars)
        info = model_info(self.model)
        _set(self, "context_window", context.context_window or (info.context_window if info else 0))
        _set(self, "max_tokens", max_tokens)
        ceiling = settings.max_tokens_ceiling or max(
            info.max_output_tokens if info else max_tokens * 8, max_tokens
        )
        _set(self, "max_tokens_ceiling", ceiling)
        if hosted:
            check_hosted(hosted, provider, provider_name)
        _set(self, "hosted_tools", hosted)

        keys = concurrency.concurrency_limits
        if _limiters is None:
            _limiters = LimiterPool(keys, threads=concurrency.tool_threads)
        elif keys:
            _limiters.declare(keys)
        _set(self, "limiters", _limiters)

        output_validators = tuple(output_validators)
        spec = OutputSpec(
            output_type, retries=output_retries, validators=output_validators, mode=output_mode
        )
        native = native_output(spec, provider)
        _set(self, "output", spec)
        _set(self, "native_output", native)
        _set(self, "output_format", output_format(spec) if native else None)
        given_guardrails: tuple[Guardrail, ...] = ()
        guard: Guardrails | None = None
        if guardrails != ():  # loaded by the agents that have some (not by `import fanloop`)
            from ._guardrails import Guardrails

            given_guardrails, guard = Guardrails.build(guardrails)
        _set(self, "guardrails", given_guardrails)
        _set(self, "_guard", guard)

        all_tools = list(own_tools)
        given_handoffs: tuple[Handoff, ...] = ()
        if handoffs != ():  # loaded by the agents that have some
            from ._handoff import handoff_tools

            given_handoffs, handoff_tools_ = handoff_tools(handoffs, name)
            all_tools.extend(handoff_tools_)
        _set(self, "handoffs", given_handoffs)
        if not spec.is_text and not native:
            all_tools.append(spec.tool())
        system_parts = [system] if isinstance(system, str) and system else []
        max_depth = 0
        if delegation:
            delegate, max_depth = delegate_tool(delegation)
            if delegate is not None:
                all_tools.append(delegate)
        _set(self, "max_depth", max_depth)
        if memory:
            from .tools.memory import RememberTool

            all_tools.append(RememberTool(root=workspace))
        if skills:
            from .skills import ReadSkillTool, discover_skills, skills_prompt

            found = discover_skills(root=workspace)
            if found:
                all_tools.append(ReadSkillTool(found))
                system_parts.append(skills_prompt(found))
        by_name = index_tools(all_tools, _limiters)
        check_settings(settings, provider, [*by_name, *(h.kind for h in hosted)])
        _set(self, "tools", by_name)
        _set(self, "tool_specs", tuple(map(tool_spec, all_tools)))
        _set(self, "_tool_async", tools_async(all_tools))
        _set(self, "_caps", {t.name: self._caps_of(t) for t in all_tools})
        _set(self, "system_prompt", "\n\n".join(system_parts) or None)
        # A provider that watches its own streams (FallbackProvider: per provider it asks)
        # is not watched here too.
        watched = not getattr(provider, "handles_stream_idle", False)
        idle = self.retry.stream_idle_timeout if watched else None
        _set(self, "_invoke", make_invoker(provider, idle))
        _set(self, "_table", build_table(observer, hooks))
        # What this agent was made from, with iterables frozen and the provider made:
        # with_options() rebuilds from it.
        received.update(
            provider=provider,
            client=None,
            tools=own_tools + hosted if hosted else own_tools,
            output_validators=output_validators,
            guardrails=given_guardrails,
            handoffs=given_handoffs,
            model_settings=settings,
            _limiters=_limiters,
        )
        _set(self, "_options", MappingProxyType(received))

    async def aclose(self) -> None:
        """Close the provider if this agent made it from a model string.

        A provider object handed to the agent is borrowed: closing it stays with its owner.
        """
        if self._owns_provider:
            close = getattr(self._provider, "aclose", None)
            if close is not None:
                await close()
        delegate = self.tools.get("delegate")
        close_delegate = getattr(delegate, "aclose", None)
        if close_delegate is not None:
            await close_delegate()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Agent[Any, Any]:
        """An agent on the provider that ``LLM_PROVIDER`` / ``LLM_MODEL`` and the usual key
        variables describe (see :func:`fanloop.providers.from_env`); ``options`` are the other
        constructor arguments. The agent owns that provider: close it with ``with`` /
        ``async with`` or :meth:`aclose`."""
        from .providers import from_env

        agent = cls(from_env(environ), **options)
        object.__setattr__(agent, "_owns_provider", True)
        return agent

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        """Close an owned provider (for scripts that use :meth:`run_sync`)."""
        if self._owns_provider:
            from ._sync import run_blocking

            run_blocking(self.aclose)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Agent is immutable; use agent.with_options({name}=...)")

    def __repr__(self) -> str:
        return f"<Agent {self.name!r} {self.provider_name}:{self.model} tools={list(self.tools)}>"

    # -- configuration helpers ---------------------------------------------------------

    def system_for_run(self) -> str | None:
        """The system prompt a new run starts with (the memory file is read at each run)."""
        if not self.memory:
            return self.system_prompt
        from .tools.memory import memory_prompt

        block = memory_prompt(self.workspace)
        if not block:
            return self.system_prompt
        return f"{self.system_prompt}\n\n{block}" if self.system_prompt else block

    @property
    def provider(self) -> Any:
        """The provider model calls go to (the overriding one inside :meth:`override`)."""
        return self._active()._provider

    @property
    def invoke(self) -> Invoker:
        """The prebuilt provider call (streaming or not), used by the loop (the overriding
        provider's inside :meth:`override`)."""
        return self._active()._invoke

    def _active(self) -> Agent[Any, Any]:
        """This agent, or what replaces it inside :meth:`override` in this context."""
        overrides = _overrides.get()
        return overrides.get(id(self), self) if overrides else self

    @contextmanager
    def override(self, **changes: Any) -> Iterator[Agent[Any, Any]]:
        """Swap the provider (or any other constructor argument) for the code in the block,
        without rebuilding the agent: for tests of code that holds a module-level agent::

            with support_agent.override(provider=ScriptedProvider(["Hello!"])):
                await app.handle("hi")          # its runs use the scripted provider

        Every run of this agent started inside the block (``run``, ``stream``, ``run_sync``,
        ``resume``, and runs as a tool or sub-agent of another agent) runs as
        ``agent.with_options(**changes)``: its provider, model, native-output choice and
        tools all follow the override. The override lives in a context variable, so it holds
        for this task and the tasks it starts inside the block, and nowhere else: runs of the
        same agent in other tasks are unaffected. Overrides nest (the inner one applies on top
        of the outer one). Outside a run, :attr:`provider` and :attr:`invoke` follow the
        override too; the other attributes stay the agent's own.

        Yields:
            The agent the runs inside the block use.
        """
        replacement = self._active().with_options(**changes)
        token = _overrides.set({**_overrides.get(), id(self): replacement})
        try:
            yield replacement
        finally:
            _overrides.reset(token)

    def tool_is_async(self, t: Tool) -> bool:
        """Whether ``t.run`` is a coroutine function (decided once, at construction)."""
        known = self._tool_async.get(t.name)
        return inspect.iscoroutinefunction(type(t).run) if known is None else known

    def limiters_for(self, t: Tool) -> list[anyio.CapacityLimiter]:
        """The capacity limiters a call of ``t`` must hold: per agent, per tool, per key."""
        caps = self._caps.get(t.name)
        if caps is None:
            caps = self._caps_of(t)
        if not caps:
            return []
        return [self.limiters.get(name, total) for name, total in caps]

    def _caps_of(self, t: Tool) -> tuple[tuple[str, int], ...]:
        caps = []
        if self.max_concurrency is not None:
            caps.append((f"agent:{id(self)}", self.max_concurrency))
        cap = self.tool_concurrency.get(t.name, t.max_concurrency)
        if cap is not None:
            caps.append((f"tool:{id(self)}:{t.name}", cap))
        if t.concurrency_key is not None:
            caps.append((f"key:{t.concurrency_key}", self.limiters.keys[t.concurrency_key]))
        return tuple(caps)

    @refuse_migrant_names(AGENT_NAMES, MOVED_AGENT_NAMES)
    def with_options(self, **changes: Any) -> Agent[Any, Any]:
        """A copy of this agent with some constructor arguments changed.

        The copy is made from the arguments this agent was made from (every one of them), with
        ``changes`` over them, as :func:`dataclasses.replace` does. It shares this agent's
        provider and limiter pool (a ``concurrency`` with another ``tool_threads`` gets a new
        pool, declaring the keyed limits this one holds). The old spellings of arguments
        that moved are refused, as by ``Agent(...)``.
        """
        options = dict(self._options)
        if "client" in changes and "provider" not in changes:
            options["provider"] = None
        new = changes.get("concurrency", options["concurrency"])
        threads = new.tool_threads if isinstance(new, Concurrency) else NO_CONCURRENCY.tool_threads
        if threads != self.limiters.threads and "_limiters" not in changes:
            options["_limiters"] = None  # a new pool, declaring the keys this one holds
            keys = {**self.limiters.keys, **new.concurrency_limits}
            changes["concurrency"] = replace(new, concurrency_limits=keys)
        options.update(changes)
        return Agent(**options)

    # -- running -----------------------------------------------------------------------

    @refuse_migrant_names(RUN_NAMES)
    async def run(
        self,
        prompt: Prompt | None = None,
        *,
        messages: Sequence[Message] | None = None,
        session: Session | None = None,
        deps: Any = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult[OutputT]:
        """Run the loop on ``prompt`` until the model answers or a limit ends it.

        Args:
            prompt: the user's message (``None`` continues ``messages``/``session`` as is).
            messages: an earlier conversation to continue (e.g. ``result.messages``).
            session: a :class:`~fanloop.sessions.Session`; every message is persisted to it
                as it is appended.
            deps: any object; tools receive it as ``RunContext.deps``.
            model_settings: settings for this run's model calls, over the agent's field by
                field (:meth:`ModelSettings.merge <fanloop.ModelSettings.merge>`); checked
                before the run starts (a ``ConfigurationError`` if the provider cannot
                honour one).

        Returns:
            The :class:`~fanloop.RunResult`, for every ending but two: a provider error that
            survives its retries raises its :class:`~fanloop.errors.ProviderError`, and
            cancellation propagates. Both carry the partial result as ``.partial``.
        """
        active = self._active()
        if active is not self:  # inside override(): the replacement runs instead
            return await active._execute(
                prompt,
                messages=messages,
                session=session,
                deps=deps,
                model_settings=model_settings,
            )
        # (not through _execute: a coroutine frame less for each run in flight)
        return await start_run(
            self,
            prompt,
            messages=messages,
            session=session,
            deps=deps,
            model_settings=model_settings,
        )

    @refuse_migrant_names(RUN_NAMES)
    def stream(
        self,
        prompt: Prompt | None = None,
        *,
        messages: Sequence[Message] | None = None,
        session: Session | None = None,
        deps: Any = None,
        buffer: int = 64,
        resume: bool = False,
        approvals: Mapping[str, bool | str] | None = None,
        model_settings: ModelSettings | None = None,
    ) -> RunStream[OutputT]:
        """Run as :meth:`run`, yielding the run's events as they happen.

        Use it as ``async with agent.stream("...") as run: async for event in run: ...``;
        afterwards ``run.result`` holds the :class:`~fanloop.RunResult`. The event buffer is
        bounded: a slow consumer slows the run down rather than growing memory. Leaving the
        ``async with`` early cancels the run. With ``resume=True`` (and a ``session``, no
        prompt) it streams :meth:`resume`, with ``approvals`` as there. ``model_settings``
        as in :meth:`run`.
        """
        from ._stream import RunStream

        # An override in force now holds for the whole stream; the run starts in start_run
        # itself, not through _execute (a coroutine frame less for each stream in flight).
        execute: Callable[..., Awaitable[RunResult[Any]]] = partial(
            start_run,
            self._active(),
            prompt,
            messages=messages,
            session=session,
            deps=deps,
            model_settings=model_settings,
        )
        if resume:
            if session is None or prompt is not None:
                raise ConfigurationError("stream(resume=True) takes a session and no prompt")
            execute = resumed(session, approvals, execute)
        elif approvals is not None:
            raise ConfigurationError("approvals= is for stream(resume=True)")
        return RunStream(execute, buffer=buffer)

    @refuse_migrant_names(RUN_NAMES)
    def run_sync(
        self,
        prompt: Prompt | None = None,
        *,
        messages: Sequence[Message] | None = None,
        session: Session | None = None,
        deps: Any = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult[OutputT]:
        """:meth:`run` for scripts: runs and returns. Not for async code (``await run()``).

        Every ``run_sync`` call in a process runs on one event loop kept in a background
        thread, so providers' connection pools stay usable from call to call.
        """
        try:
            import asyncio

            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("run_sync() was called inside a running event loop; await run()")
        from ._sync import run_blocking

        return run_blocking(
            partial(
                self._active()._execute,  # resolved here: the run's loop is in another thread
                prompt,
                messages=messages,
                session=session,
                deps=deps,
                model_settings=model_settings,
            )
        )

    async def resume(
        self,
        session: Session,
        *,
        approvals: Mapping[str, bool | str] | None = None,
        deps: Any = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult[OutputT]:
        """Go on with the turn left open in ``session``: parked for approval, or cut short.

        A batch parked by ``confirm`` returning :data:`~fanloop.DEFER` (the run ended with
        ``awaiting_approval``) runs on from the parked call with ``approvals``, one answer per
        pending call id: ``True`` runs the call, ``False`` or a reason string declines it. No
        model call is made for that turn and no call that already finished runs again. This
        works from any process that can open the session.

        A turn a dead process left open is closed first: a dangerous call whose receipt was
        committed gets its recorded result back without running again; one whose receipt was
        left ``started`` ends the run with ``effect_outcome_uncertain``, naming the call; any
        other unanswered call is told it was interrupted. Then the loop continues.

        Raises:
            ApprovalError: ``approvals`` name a call that is not pending, leave a pending call
                unanswered, or are given for a session that waits for none; or the session
                waits for approvals and none were given. Nothing is changed.
        """
        execute = partial(self._execute, None, session=session, deps=deps)
        return await resumed(session, approvals, execute)(model_settings=model_settings)

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        concurrent_safe: bool = True,
    ) -> Tool:
        """This agent as a tool another agent can call with a ``task`` string.

        The run is a sub-agent of the caller's run: its events reach the caller's stream with
        their lineage, its usage rolls up, it spends from the caller's budget, and cancelling
        the caller cancels it.
        """
        from ._delegate import AgentTool

        return AgentTool(self, name=name, description=description, concurrent_safe=concurrent_safe)

    async def _execute(self, prompt: Prompt | None, **options: Any) -> RunResult[Any]:
        """Run on ``prompt``: the body is :func:`~fanloop._runner.start_run`, which names the
        options. Inside :meth:`override` the replacement runs instead (its own ``_active()``
        is itself: overrides are keyed by the overridden agent)."""
        return await start_run(self._active(), prompt, **options)

    async def _loop(self, run: RunState, *, deadline: bool) -> RunResult[Any]:
        """The loop of ``run`` (inside the guardrails, when the agent has some), under the
        agent's ``timeout`` when ``deadline`` is set."""
        return await run_with_deadline(run, deadline=deadline)


Agent._subagent_class = Agent

_AUTO_TOOLS = AUTO_TOOLS  # the name fanloop.ui reads
_set = object.__setattr__  # how __init__ fills the slots (the class refuses setattr)

_overrides: contextvars.ContextVar[Mapping[int, Agent[Any, Any]]] = contextvars.ContextVar(
    "fanloop_agent_overrides", default=MappingProxyType({})
)
"""``Agent.override``: id of the agent -> the agent its runs use (copied on write)."""
