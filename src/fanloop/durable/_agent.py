"""DurableAgent: an agent's loop as a DBOS workflow, and DurableRun, the handle of one run."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..messages import Message
from ._codec import dump_prompt, load_run_output
from ._dbos import dbos, require
from ._events import read_events, wait_output
from ._steps import approval_topic
from ._workflow import Level, QueueSpec

if TYPE_CHECKING:
    from dbos import DBOSClient

    from .._agent import Agent
    from .._result import RunResult
    from .._runner import Prompt

__all__ = ["DurableAgent", "DurableRun"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_taken: set[str] = set()


class DurableRun:
    """One durable run, known by its workflow id, from this process or any other.

    ``DurableAgent.start`` returns one; build one yourself to follow a run started elsewhere,
    through this process's launched ``DBOS`` or through a ``dbos.DBOSClient``::

        run = DurableRun(workflow_id, client=DBOSClient(system_database_url=url))
        async for event in run.events(): ...
        result = await run.result()

    Args:
        workflow_id: the run's workflow id.
        client: reach the run through this client instead of the launched ``DBOS``.
    """

    def __init__(
        self,
        workflow_id: str,
        *,
        client: DBOSClient | None = None,
        handle: Any = None,
        output_adapter: Any = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.client = client
        self._handle = handle
        self._adapter = output_adapter

    async def result(self) -> RunResult:
        """Wait for the run to end and return its :class:`~fanloop.RunResult`.

        A typed answer comes back as the agent's ``output_type`` through
        ``DurableAgent.start``/``retrieve``; a ``DurableRun`` built by hand (no agent at
        hand) leaves ``result.output`` as its JSON value.

        Raises:
            ProviderError: the run ended with a provider error that survived its retries (its
                own class, with the partial result as ``.partial``), as ``Agent.run`` does.
        """
        if self._handle is not None:  # started here: the result comes from its task
            output = await self._handle.get_result()
        else:
            output = await wait_output(self.workflow_id, client=self.client)
        return load_run_output(output, self._adapter)

    def events(self, *, raw: bool = False) -> AsyncIterator[Any]:
        """The run's events from its start, as they come (see :func:`read_events`)."""
        return read_events(self.workflow_id, client=self.client, raw=raw)

    async def approve(self, call_id: str, answer: bool | str) -> None:
        """Answer a dangerous call the run waits on (its ``confirm`` returned ``DEFER``).

        ``True`` runs the call; ``False`` declines it; a string declines it with that reason
        for the model. The call id is in the run's ``approval_requested`` event. The answer is
        delivered once, durably: a run waiting on it resumes, even in another process.
        """
        if not isinstance(answer, bool | str):
            raise ConfigurationError("an approval is True, False or a reason string")
        topic = approval_topic(call_id)
        portable = require().WorkflowSerializationFormat.PORTABLE
        if self.client is not None:
            await self.client.send_async(
                self.workflow_id, answer, topic, serialization_type=portable
            )
        else:
            await dbos().send_async(self.workflow_id, answer, topic, serialization_type=portable)

    def __repr__(self) -> str:
        return f"<DurableRun {self.workflow_id!r}>"


class DurableAgent:
    """An agent whose runs are DBOS workflows: durable, recoverable, spread over workers.

    Each model call and each tool call of a run is a checkpointed DBOS step, so a run whose
    worker process died is recovered (by a worker with the same DBOS executor id, or by DBOS
    Conductor) from its last completed step: completed model calls are not repeated and
    completed tool calls are not run again. Sub-agents (``delegate``, and agents given as
    tools with ``Agent.as_tool``) are child workflows on a DBOS queue with a global
    concurrency limit, so a fan-out spreads over every worker connected to the database. A
    run's events, text deltas included, can be read from any process with :meth:`events` or
    :func:`~fanloop.durable.read_events`.

    Build it at import time or at least before ``DBOS.launch()`` (the workflows must be
    registered before DBOS recovers runs), in every worker, with the same ``name``::

        durable = DurableAgent(agent, name="support")
        DBOS(config={"name": "support-app", "system_database_url": url})
        DBOS.launch()
        result = await durable.run("Where is my parcel?")

    Args:
        agent: the agent to run. Its provider, tools, limits, retry policy, ``confirm`` and
            ``auto_approve`` apply; its observer and hooks are not called (read the events),
            except an :class:`~fanloop.otel.OpenTelemetryObserver`: the spans of a run are
            made by the worker that runs it, all in the trace :meth:`start` was called in.
        name: the name of the run workflow (``fanloop.<name>``), unique in the process and the
            same in every worker.
        queue: the DBOS queue of the sub-agents (default ``fanloop.<name>``; a sub-agent's
            own sub-agents use ``<queue>.2``, and so on, so a level waiting on the next never
            holds the slots that level needs).
        concurrency: sub-agents running at once per level, across all workers (``None``: no
            limit).
        worker_concurrency: sub-agents running at once per level in one worker process.
        poll_interval: seconds between a worker's polls of the queue.
        events: write the run's events to its DBOS stream (``False``: no stream, one write
            less per batch of events).

    Raises:
        ConfigurationError: DBOS is not installed, ``name`` is invalid or already used, or
            sub-agents nest more than 8 levels deep.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        name: str,
        queue: str | None = None,
        concurrency: int | None = 8,
        worker_concurrency: int | None = None,
        poll_interval: float = 0.25,
        events: bool = True,
    ) -> None:
        require()
        if not _NAME.fullmatch(name):
            raise ConfigurationError(
                f"DurableAgent name {name!r} must be 1-64 letters, digits, '_', '.' or '-'"
            )
        if name in _taken:
            raise ConfigurationError(
                f"a DurableAgent named {name!r} already exists in this process; "
                "its workflows must have one definition"
            )
        if concurrency is not None and concurrency < 1:
            raise ConfigurationError("concurrency must be >= 1 (or None)")
        if worker_concurrency is not None and worker_concurrency < 1:
            raise ConfigurationError("worker_concurrency must be >= 1 (or None)")
        if not poll_interval > 0:
            raise ConfigurationError("poll_interval must be > 0")
        self.agent = agent
        self.name = name
        self.workflow_name = f"fanloop.{name}"
        queue = queue or self.workflow_name

        def queues(depth: int) -> QueueSpec:
            name = queue if depth == 1 else f"{queue}.{depth}"
            return QueueSpec(name, concurrency, worker_concurrency, poll_interval)

        self._root = Level(
            agent, workflow_name=self.workflow_name, depth=0, queues=queues, events=events
        )
        _taken.add(name)

    @property
    def queues(self) -> tuple[str, ...]:
        """The names of the sub-agent queues, one per level of sub-agents."""
        return tuple(sorted({lv.queue_spec.name for lv in self._root.walk() if lv.queue_spec}))

    @property
    def workflows(self) -> tuple[str, ...]:
        """The names of the workflows this agent registered with DBOS (its own first)."""
        return tuple(level.workflow_name for level in self._root.walk())

    async def register_queues(self) -> None:
        """Register the sub-agent queues now (after ``DBOS.launch()``).

        Optional: a queue is registered on first use. Registering it in every worker at start
        means the workers poll it from the first sub-agent on (DBOS notices a queue registered
        later within about a second).
        """
        for level in self._root.walk():
            if level.queue_spec is not None:
                await level.queue()

    async def start(
        self,
        prompt: Prompt | None = None,
        *,
        messages: Sequence[Message] | None = None,
        workflow_id: str | None = None,
    ) -> DurableRun:
        """Start a run as a workflow in this process and return its handle at once.

        Args:
            prompt: the user's message.
            messages: an earlier conversation to continue.
            workflow_id: the workflow id (default: one DBOS makes up). Starting a run under
                an id already used returns the existing run.
        """
        DBOS = dbos()
        payload = {
            "prompt": dump_prompt(prompt),
            "messages": [m.model_dump(mode="json") for m in messages] if messages else None,
            "limits": None,
        }
        tracer = self._root.tracer
        if tracer is not None and callable(getattr(tracer, "remote_trace_context", None)):
            payload["trace"] = tracer.remote_trace_context(self.agent.name)
        if workflow_id is None:
            handle = await DBOS.start_workflow_async(self._root.workflow, payload)
        else:
            with require().SetWorkflowID(workflow_id):
                handle = await DBOS.start_workflow_async(self._root.workflow, payload)
        return DurableRun(
            handle.get_workflow_id(), handle=handle, output_adapter=self._root.output_adapter
        )

    def retrieve(self, workflow_id: str) -> DurableRun:
        """The handle of this agent's run ``workflow_id``, started here or anywhere else."""
        return DurableRun(workflow_id, output_adapter=self._root.output_adapter)

    async def run(
        self,
        prompt: Prompt | None = None,
        *,
        messages: Sequence[Message] | None = None,
        workflow_id: str | None = None,
    ) -> RunResult:
        """Run as a workflow and wait for the :class:`~fanloop.RunResult` (see :meth:`start`).

        Raises:
            ProviderError: as ``Agent.run`` (with the partial result as ``.partial``).
        """
        run = await self.start(prompt, messages=messages, workflow_id=workflow_id)
        return await run.result()

    def events(self, workflow_id: str, *, raw: bool = False) -> AsyncIterator[Any]:
        """The events of the run ``workflow_id``, from its start, as they are written."""
        return read_events(workflow_id, raw=raw)

    async def approve(self, workflow_id: str, call_id: str, answer: bool | str) -> None:
        """Answer a call the run ``workflow_id`` waits on (see :meth:`DurableRun.approve`)."""
        await DurableRun(workflow_id).approve(call_id, answer)

    def __repr__(self) -> str:
        return f"<DurableAgent {self.name!r} {self.agent!r}>"
