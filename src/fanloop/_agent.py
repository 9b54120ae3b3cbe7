"""Agent: immutable configuration plus ``run`` / ``stream`` / ``run_sync``. No turn logic here."""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
from types import MappingProxyType, UnionType
from typing import TYPE_CHECKING, Any, Generic, Self

import anyio
from typing_extensions import TypeVar

from ._approvals import check_answer_types, check_answers, check_no_pending
from ._dispatch import Emitter, build_table
from ._fanout import LimiterPool
from ._guardrails import Guardrail, Guardrails, InputGuardrail, OutputGuardrail
from ._handoff import Handoff, enter_active_agent, handoff_tools
from ._log import bind, logger, unbind
from ._loop import run_loop
from ._migrants import AGENT_NAMES, RUN_NAMES, refuse_migrant_names
from ._model import Invoker, make_invoker
from ._model_types import HostedTool, OutputFormat, ToolSpec
from ._output import FINAL_TOOL, OutputMode, OutputSpec, OutputValidator
from ._parked import resume_parked
from ._result import OutputT, RunResult, TerminationReason
from ._resume import repair
from ._retry import RetryPolicy
from ._run import CLEANUP_GRACE, RunState, dynamic_system
from ._scope import enter_run, leave_run
from ._session_budget import record_spend, remaining_limits
from ._settings import NO_SETTINGS, ModelSettings, check_settings
from .catalog import model_info
from .errors import ConfigurationError, ProviderError
from .events import Event, RunFinished, RunStarted
from .limits import Budget, Limits
from .messages import DocumentPart, ImagePart, Message, TextPart
from .observers import ConversationContext, ConversationSummary, Hooks, LoopObserver
from .tools.base import FunctionTool, Tool, tool

if TYPE_CHECKING:
    from ._delegate import Delegation
    from ._stream import RunStream
    from .providers.base import Provider
    from .sessions import Session

__all__ = ["Agent", "ConfirmFn"]

ConfirmFn = Callable[..., "Awaitable[bool | str | object] | bool | str | object"]
"""``confirm(name, preview)`` or ``confirm(name, preview, call)``, sync or async: ``True``,
``False``, a reason string, or :data:`fanloop.DEFER`."""
PromptPart = str | TextPart | ImagePart | DocumentPart
Prompt = PromptPart | Message | Sequence[PromptPart]
"""What a run starts from: text, or text, images and PDF documents in order (plain strings in a
sequence become text parts), or a whole user :class:`~fanloop.messages.Message`."""

SystemFn = Callable[..., "str | Awaitable[str | None] | None"]
"""``system(ctx) -> str``, sync or async: a system prompt made at each run's start from its
:class:`~fanloop.RunContext` (``ctx.deps``, ``ctx.run_id``...)."""

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
        tools: :class:`~fanloop.Tool` instances, or plain functions (made into tools with
            :func:`~fanloop.tool`).
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
            a :class:`~fanloop.Delegation` also sets their prompt, model, tools and settings.
        memory: give the agent the ``remember`` tool and load ``.fanloop/memory.md`` into the
            system prompt.
        skills: discover ``SKILL.md`` skills, list them in the system prompt and add
            ``read_skill``.
        name: the agent's name in event lineage and logs.
        model_settings: sampling and tool-choice options of every model call
            (:class:`~fanloop.ModelSettings`); a run may override them field by field with
            ``run(..., model_settings=...)``. A setting the provider cannot honour is a
            :class:`~fanloop.errors.ConfigurationError`.
        max_tokens: the output budget of a model call (a shortcut for
            ``model_settings.max_tokens``; 4096 when neither says).
        max_tokens_ceiling: how far a truncated tool call may grow the budget by retrying
            (defaults to the model's output ceiling from the model table).
        temperature: sampling temperature (a shortcut for ``model_settings.temperature``;
            giving both with different values is a ``ConfigurationError``).
        thinking_budget: tokens of extended thinking, when the provider supports it.
        hosted_tools: tools the provider runs itself (:class:`~fanloop.providers.HostedTool`).
        max_concurrency: cap on this agent's tool calls running at once, across its runs.
        tool_concurrency: caps per tool name, e.g. ``{"bash": 2}``.
        concurrency_limits: named keyed caps, e.g. ``{"db": 1}``, shared by every tool whose
            ``concurrency_key`` names them, across runs, sub-agents and every other agent of
            the process (one limiter per key per event loop). Two live agents giving one key
            different limits is a ``ConfigurationError``.
        tool_threads: worker threads for synchronous tools.
        context_window: the model's context window (defaults to the model table's).
        compact_threshold: share of the context window past which older history is compacted.
        max_tool_result_chars: tool output longer than this is cut, with a note saying so
            (``None``: never cut).
        max_depth: how deep delegation may nest (1: sub-agents cannot delegate).
        delegate_tools: the tools a delegated sub-agent gets (default: this agent's own
            read-only built-in tools, or read-only tools rooted at ``workspace``).
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
        "confirm",
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
    compact_threshold: float
    max_concurrency: int | None
    tool_concurrency: dict[str, int]
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

    @refuse_migrant_names(AGENT_NAMES)
    def __init__(
        self,
        provider: Provider | str | Sequence[Any] | None = None,
        *,
        system: str | SystemFn | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
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
        max_tokens: int | None = None,
        max_tokens_ceiling: int | None = None,
        temperature: float | None = None,
        thinking_budget: int | None = None,
        hosted_tools: Iterable[HostedTool] = (),
        max_concurrency: int | None = None,
        tool_concurrency: Mapping[str, int] | None = None,
        concurrency_limits: Mapping[str, int] | None = None,
        tool_threads: int = 64,
        context_window: int | None = None,
        compact_threshold: float = 0.8,
        max_tool_result_chars: int | None = 100_000,
        max_depth: int = 1,
        delegate_tools: Iterable[Tool] | None = None,
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
        if client is not None:  # the older spelling: Agent(tools, client=provider)
            if provider is not None and not isinstance(provider, list | tuple):
                raise ConfigurationError("pass the provider once: positionally or as client=")
            tools = [*(provider or ()), *tools]
            provider = client
        own_tools = tuple(t if isinstance(t, Tool) else tool(t) for t in tools)
        if provider is None:
            raise ConfigurationError("Agent needs a provider (or a 'vendor:model' string)")
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
        if max_tokens is not None and max_tokens < 1:
            raise ConfigurationError("max_tokens must be >= 1")
        settings = _with_shortcuts(model_settings, max_tokens=max_tokens, temperature=temperature)
        max_tokens = settings.max_tokens or DEFAULT_MAX_TOKENS
        if not 0 < compact_threshold <= 1:
            raise ConfigurationError("compact_threshold must be in (0, 1]")
        if max_depth < 0:
            raise ConfigurationError("max_depth must be >= 0")
        set_ = partial(object.__setattr__, self)
        set_("_owns_provider", owns_provider)
        set_("_confirm_arg", confirm)
        if confirm is None and hooks is not None:
            confirm = hooks.confirm
        set_("_provider", provider)
        set_("provider_name", str(getattr(provider, "name", type(provider).__name__)))
        set_("model", str(getattr(provider, "model", "")))
        set_("name", name)
        set_("system", system)
        set_("limits", limits if limits is not None else _DEFAULT_LIMITS)
        set_("retry", retry if retry is not None else _DEFAULT_RETRY)
        set_("confirm", confirm)
        set_("auto_approve", auto_approve)
        set_("observer", observer)
        set_("hooks", hooks)
        set_("delegation", delegation)
        set_("memory", memory)
        set_("skills", skills)
        set_("workspace", workspace)
        set_("max_depth", max_depth)
        set_("model_settings", settings)
        set_("temperature", settings.temperature)
        set_("thinking_budget", thinking_budget)
        set_("compact_threshold", compact_threshold)
        set_("max_tool_result_chars", max_tool_result_chars)
        set_("max_concurrency", max_concurrency)
        set_("tool_concurrency", dict(tool_concurrency or {}))
        info = model_info(self.model)
        set_("context_window", context_window or (info.context_window if info else 0))
        set_("max_tokens", max_tokens)
        ceiling = max_tokens_ceiling or max(
            info.max_output_tokens if info else max_tokens * 8, max_tokens
        )
        set_("max_tokens_ceiling", ceiling)

        hosted = tuple(hosted_tools)
        supported: frozenset[str] = getattr(provider, "hosted_tools", frozenset())
        for h in hosted:
            if h.kind not in supported:
                raise ConfigurationError(
                    f"provider {self.provider_name!r} does not support hosted tool {h.kind!r}"
                    f" (supported: {', '.join(sorted(supported)) or 'none'})"
                )
        set_("hosted_tools", hosted)

        if _limiters is None:
            _limiters = LimiterPool(dict(concurrency_limits or {}), threads=tool_threads)
        elif concurrency_limits:
            _limiters.declare(concurrency_limits)
        set_("limiters", _limiters)

        output_validators = tuple(output_validators)
        delegate_tools = None if delegate_tools is None else tuple(delegate_tools)
        spec = OutputSpec(
            output_type, retries=output_retries, validators=output_validators, mode=output_mode
        )
        native = _native_output(spec, provider)
        set_("output", spec)
        set_("native_output", native)
        set_("output_format", _output_format(spec) if native else None)
        given_guardrails, guard = Guardrails.build(guardrails)
        set_("guardrails", given_guardrails)
        set_("_guard", guard)

        all_tools = list(own_tools)
        handoffs, handoff_tools_ = handoff_tools(handoffs, name)
        set_("handoffs", handoffs)
        all_tools.extend(handoff_tools_)
        if not spec.is_text and not native:
            all_tools.append(spec.tool())
        system_parts = [system] if isinstance(system, str) and system else []
        if delegation and max_depth > 0:
            from ._delegate import DelegateTool, Delegation

            config = delegation if isinstance(delegation, Delegation) else Delegation()
            all_tools.append(DelegateTool.from_config(config, delegate_tools))
        if memory:
            from .tools.memory import RememberTool

            all_tools.append(RememberTool(root=workspace))
        if skills:
            from .skills import ReadSkillTool, discover_skills, skills_prompt

            found = discover_skills(root=workspace)
            if found:
                all_tools.append(ReadSkillTool(found))
                system_parts.append(skills_prompt(found))
        by_name: dict[str, Tool] = {}
        for t in all_tools:
            if t.name in by_name:
                raise ConfigurationError(f"two tools are named {t.name!r}")
            if t.concurrency_key is not None and t.concurrency_key not in _limiters.keys:
                raise ConfigurationError(
                    f"tool {t.name!r} uses concurrency key {t.concurrency_key!r}; give its "
                    f"limit with Agent(concurrency_limits={{{t.concurrency_key!r}: N}})"
                )
            by_name[t.name] = t
        check_settings(settings, provider, [*by_name, *(h.kind for h in hosted)])
        set_("tools", by_name)
        set_("tool_specs", tuple(_spec(t) for t in all_tools))
        set_(
            "_tool_async",
            {
                t.name: (
                    t.is_async
                    if isinstance(t, FunctionTool)
                    else inspect.iscoroutinefunction(type(t).run)
                )
                for t in all_tools
            },
        )
        set_("_caps", {t.name: self._caps_of(t) for t in all_tools})
        set_("system_prompt", "\n\n".join(system_parts) or None)
        # A provider that watches its own streams (FallbackProvider: per provider it asks)
        # is not watched here too.
        watched = not getattr(provider, "handles_stream_idle", False)
        idle = self.retry.stream_idle_timeout if watched else None
        set_("_invoke", make_invoker(provider, idle))
        set_("_table", build_table(observer, hooks))
        # What this agent was made from, with iterables frozen, the provider made and the
        # shortcuts folded into the settings: with_options() rebuilds from it.
        received.update(
            provider=provider,
            client=None,
            tools=own_tools,
            hosted_tools=hosted,
            output_validators=output_validators,
            guardrails=given_guardrails,
            delegate_tools=delegate_tools,
            handoffs=handoffs,
            tool_concurrency=_frozen(tool_concurrency),
            concurrency_limits=_frozen(concurrency_limits),
            model_settings=settings,
            max_tokens=None,
            temperature=None,
            _limiters=_limiters,
        )
        set_("_options", MappingProxyType(received))

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

    def with_options(self, **changes: Any) -> Agent[Any, Any]:
        """A copy of this agent with some constructor arguments changed.

        The copy is made from the arguments this agent was made from (every one of them), with
        ``changes`` over them. It shares this agent's provider and limiter pool (a new
        ``tool_threads`` gets a new pool); ``max_tokens`` or ``temperature`` replaces that
        field of ``model_settings``.
        """
        options = dict(self._options)
        shortcuts = {k for k in ("max_tokens", "temperature") if k in changes}
        if shortcuts and "model_settings" not in changes:  # the shortcut replaces the field
            options["model_settings"] = options["model_settings"].model_copy(
                update=dict.fromkeys(shortcuts)
            )
        if "client" in changes and "provider" not in changes:
            options["provider"] = None
        if "tool_threads" in changes and "_limiters" not in changes:
            options["_limiters"] = None  # a new pool, declaring the keys this one holds
            options["concurrency_limits"] = {
                **self.limiters.keys,
                **(changes.pop("concurrency_limits", None) or {}),
            }
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
        return await self._execute(
            prompt, messages=messages, session=session, deps=deps, model_settings=model_settings
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

        execute: Callable[..., Awaitable[RunResult[Any]]] = partial(
            self._active()._execute,  # an override in force now holds for the whole stream
            prompt,
            messages=messages,
            session=session,
            deps=deps,
            model_settings=model_settings,
        )
        if resume:
            if session is None or prompt is not None:
                raise ConfigurationError("stream(resume=True) takes a session and no prompt")
            execute = _resumed(session, approvals, execute)
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
        return await _resumed(session, approvals, execute)(model_settings=model_settings)

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

    async def _execute(
        self,
        prompt: Prompt | None,
        *,
        messages: Sequence[Message] | None = None,
        session: Session | None = None,
        deps: Any = None,
        send: Callable[[Event], Awaitable[None] | None] | None = None,
        parent: RunState | None = None,
        parent_call_id: str | None = None,
        before: Callable[[RunState], Awaitable[RunResult | None]] | None = None,
        model_settings: ModelSettings | None = None,
        label: str | None = None,
        trace_context: dict[str, str] | None = None,
    ) -> RunResult[Any]:
        active = self._active()
        if active is not self:  # inside override(): the replacement runs instead
            return await active._execute(
                prompt,
                messages=messages,
                session=session,
                deps=deps,
                send=send,
                parent=parent,
                parent_call_id=parent_call_id,
                before=before,
                model_settings=model_settings,
                label=label,
                trace_context=trace_context,
            )
        settings = self.model_settings
        if model_settings is not None:  # checked before anything happens
            settings = settings.merge(_as_settings(model_settings))
            check_settings(
                settings, self._provider, [*self.tools, *(h.kind for h in self.hosted_tools)]
            )
        if session is not None and messages is not None:
            raise ConfigurationError("pass messages= or session=, not both")
        if session is not None and before is None:
            check_no_pending(session)
        history = list(session.messages if session is not None else messages or ())
        if parent is None:  # a session with a budget of its own tightens the run's limits
            limits = remaining_limits(session, self.limits)
            budget = Budget(limits)
            path: tuple[str, ...] = (self.name,)
            parent_emitter = None
        else:
            budget = parent.budget
            path = (*parent.emitter.path, label or self.name)
            parent_emitter = parent.emitter
        emitter = Emitter(
            self._table, path=path, parent_call_id=parent_call_id, send=send, parent=parent_emitter
        )
        run = RunState(
            self,
            emitter,
            budget,
            messages=history,
            session=session,
            deps=deps if deps is not None or parent is None else parent.deps,
            depth=0 if parent is None else parent.depth + 1,
            parent=parent,
        )
        run.trace_context = trace_context
        if settings is not self.model_settings:
            run.settings = settings
            run.max_tokens = settings.max_tokens or self.max_tokens
        current = enter_run(run)
        try:
            if callable(self.system):
                run.system = await dynamic_system(self.system, run)
            if session is not None:  # a resume goes on with the agent a handoff left in charge
                await enter_active_agent(run, resumed=before is not None)
            log_tokens = bind(run_id=run.run_id, agent_path="/".join(path))
            try:
                return await self._run_observed(run, prompt, before, parent is None, session)
            finally:
                unbind(log_tokens)
        finally:
            leave_run(current)

    async def _run_observed(
        self,
        run: RunState,
        prompt: Prompt | None,
        before: Callable[[RunState], Awaitable[RunResult | None]] | None,
        root: bool,
        session: Session | None,
    ) -> RunResult[Any]:
        emitter = run.emitter
        observer = self.observer if root else None
        result: RunResult | None = None
        error: BaseException | None = None
        with observer.conversation() if observer is not None else nullcontext():
            if observer is not None:
                _notify(
                    observer,
                    "on_conversation_start",
                    ConversationContext(
                        run.run_id,
                        self.name,
                        self.provider_name,
                        self.model,
                        self.limits,
                        session.id if session is not None else None,
                    ),
                )
            try:
                await emitter.emit(
                    RunStarted(
                        run.run_id,
                        self.name,
                        self.model,
                        self.provider_name,
                        trace_context=run.trace_context,
                    )
                )
                if before is not None:
                    result = await before(run)
                if result is None:
                    if prompt is not None:
                        await run.append(_user_message(prompt))
                    result = await self._loop(run, deadline=root)
            except ProviderError as exc:
                error = exc
                result = run.result(TerminationReason.PROVIDER_ERROR, detail=str(exc))
                exc.partial = result
                raise
            except anyio.get_cancelled_exc_class() as exc:
                error = exc
                result = run.result(TerminationReason.CANCELLED, detail="the run was cancelled")
                exc.partial = result  # type: ignore[attr-defined]
                raise
            except BaseException as exc:
                error = exc
                result = run.result(TerminationReason.UNKNOWN, detail=repr(exc))
                logger.exception("run_failed")
                raise
            finally:
                assert result is not None
                logger.debug(
                    "run_finished",
                    reason=str(result.termination_reason),
                    turns=result.turns,
                    tool_calls=result.tool_calls,
                )
                # Shielded so a cancelled run still reports how it ended, but only for a grace
                # period: a consumer that never returns cannot make the run uncancellable.
                with anyio.move_on_after(FINAL_EVENT_GRACE, shield=True):
                    if root:
                        await record_spend(session, result)
                    await emitter.emit(RunFinished(result, error))
                if observer is not None:
                    _notify(
                        observer,
                        "on_conversation_end",
                        ConversationSummary(
                            run.run_id,
                            result.termination_reason,
                            result.turns,
                            result.usage,
                            result.elapsed,
                            result.tool_calls,
                            error,
                        ),
                    )
        return result

    async def _loop(self, run: RunState, *, deadline: bool) -> RunResult[Any]:
        timeout = self.limits.timeout
        loop = run_loop if self._guard is None else self._guard.run  # guardrails around it
        if not deadline or timeout is None:
            return await loop(run)
        result: RunResult | None = None
        with anyio.CancelScope(deadline=run.set_deadline(timeout)):
            result = await loop(run)
        if result is None:
            return run.result(
                TerminationReason.DEADLINE, detail=f"the run passed its {timeout:g} s deadline"
            )
        return result


_AUTO_TOOLS = frozenset({"delegate", "remember", "read_skill", FINAL_TOOL})

FINAL_EVENT_GRACE = CLEANUP_GRACE
"""Seconds the final ``run_finished`` event may take to deliver once the run is cancelled."""


def _spec(t: Tool) -> ToolSpec:
    """``t``'s spec, trusted as is (``model_construct`` without its per-call overhead: this
    runs for every tool of every agent made)."""
    spec = _new_spec(ToolSpec)
    _set_attr(
        spec, "__dict__", {"name": t.name, "description": t.description, "parameters": t.parameters}
    )
    _set_attr(spec, "__pydantic_fields_set__", {"name", "description", "parameters"})
    _set_attr(spec, "__pydantic_extra__", None)
    _set_attr(spec, "__pydantic_private__", None)
    return spec


_new_spec = ToolSpec.__new__
_set_attr = object.__setattr__


def _user_message(prompt: Prompt) -> Message:
    if isinstance(prompt, Message):
        return prompt
    if isinstance(prompt, str):
        return Message.user(prompt)
    if isinstance(prompt, TextPart | ImagePart | DocumentPart):
        return Message(role="user", content=(prompt,))
    if isinstance(prompt, bytes | bytearray):
        raise ConfigurationError("a prompt cannot be bytes: wrap an image in ImagePart(data=...)")
    content: list[TextPart | ImagePart | DocumentPart] = []
    for item in prompt:
        if isinstance(item, str):
            content.append(TextPart(text=item))
        elif isinstance(item, TextPart | ImagePart | DocumentPart):
            content.append(item)
        else:
            raise ConfigurationError(
                "a prompt is a string or a sequence of strings, TextPart, ImagePart and "
                f"DocumentPart, not one holding {type(item).__name__}"
            )
    return Message(role="user", content=tuple(content))


def _native_output(spec: OutputSpec, provider: Any) -> bool:
    """Whether typed answers use the provider's native structured output.

    A provider may also judge the schema (``accepts_output_schema(schema) -> bool``): in
    ``"auto"`` mode a schema it cannot express goes through the ``final_result`` tool.
    """
    if spec.is_text or spec.mode == "tool":
        return False
    supported = bool(getattr(provider, "native_output", False))
    name = getattr(provider, "name", provider)
    if spec.mode == "native" and not supported:
        raise ConfigurationError(
            f"provider {name!r} has no native structured output; use output_mode='tool' or 'auto'"
        )
    accepts = getattr(provider, "accepts_output_schema", None)
    if supported and callable(accepts) and not accepts(spec.parameters):
        if spec.mode == "native":
            raise ConfigurationError(
                f"provider {name!r} cannot constrain its answer to the schema of "
                f"{spec.name!r} (a free-form dict, Any or a tuple in it); use "
                "output_mode='tool' or 'auto'"
            )
        return False
    return supported


def _output_format(spec: OutputSpec) -> OutputFormat:
    """The schema a native typed answer must follow, made once per agent."""
    from .providers._schema import schema_name

    return OutputFormat(name=schema_name(spec.name), json_schema=spec.parameters)


DEFAULT_MAX_TOKENS = 4096
"""The output budget of a model call when neither ``max_tokens`` nor the settings say."""

# Frozen, so one instance of each default serves every agent that does not give its own.
_DEFAULT_LIMITS = Limits()
_DEFAULT_RETRY = RetryPolicy()

_overrides: contextvars.ContextVar[Mapping[int, Agent[Any, Any]]] = contextvars.ContextVar(
    "fanloop_agent_overrides", default=MappingProxyType({})
)
"""``Agent.override``: id of the agent -> the agent its runs use (copied on write)."""


def _frozen(mapping: Mapping[str, int] | None) -> Mapping[str, int] | None:
    return None if mapping is None else MappingProxyType(dict(mapping))


def _as_settings(value: Any) -> ModelSettings:
    if isinstance(value, ModelSettings):
        return value
    if isinstance(value, Mapping):
        return ModelSettings(**value)
    raise ConfigurationError(f"model_settings must be a ModelSettings, not {type(value).__name__}")


def _with_shortcuts(
    settings: Any, *, max_tokens: int | None, temperature: float | None
) -> ModelSettings:
    """The agent's settings with the ``max_tokens`` / ``temperature`` shortcuts folded in."""
    if settings is None and max_tokens is None and temperature is None:
        return NO_SETTINGS
    result = _as_settings(settings) if settings is not None else NO_SETTINGS
    changes: dict[str, Any] = {}
    for name, value in (("max_tokens", max_tokens), ("temperature", temperature)):
        if value is None:
            continue
        given = getattr(result, name)
        if given is not None and given != value:
            raise ConfigurationError(
                f"{name}={value!r} conflicts with model_settings.{name}={given!r}: give it once"
            )
        changes[name] = value
    if not changes:
        return result
    try:
        return ModelSettings(**{**result.__dict__, **changes})
    except ValueError as exc:
        raise ConfigurationError(f"invalid model setting: {exc}") from None


def _resumed(
    session: Session,
    approvals: Mapping[str, bool | str] | None,
    execute: Callable[..., Awaitable[RunResult[Any]]],
) -> Callable[..., Awaitable[RunResult[Any]]]:
    """``execute`` as a resumed run: a parked batch claimed and run on with ``approvals``, or
    the turn a dead process left open repaired first. Answers of the wrong type are refused at
    once; whether they match what the session waits for is checked on the stored state."""

    if approvals:
        check_answer_types(approvals)
        return partial(resume_parked, session, approvals, execute)
    check_answers(session, approvals)  # raises before anything is changed
    return partial(execute, before=repair)


def _notify(observer: LoopObserver, name: str, arg: Any) -> None:
    fn = getattr(observer, name, None)
    if fn is None:
        return
    try:
        fn(arg)
    except Exception:
        logger.exception("callback_failed", owner=type(observer).__name__, callback=name)
