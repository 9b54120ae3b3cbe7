"""Durable runs on DBOS: each model call and tool call a checkpointed step (extra: ``durable``).

::

    from fanloop.durable import DurableAgent

    durable = DurableAgent(agent, name="support")       # before DBOS.launch(), in every worker
    result = await durable.run("prompt")                # the loop as a DBOS workflow
    run = await durable.start("prompt")                 # run.workflow_id; await run.result()
    async for event in durable.events(run.workflow_id): # from any process, text deltas included
        ...

A run whose worker died is recovered from its last completed step: completed model calls are
not repeated, completed tool calls are not run again (a tool call cut off mid-way runs again:
at least once). Delegated sub-agents are child workflows on a DBOS queue with a global
concurrency limit, spread over every worker connected to the database. See ``docs/durable.md``.

Importing this package does not import DBOS; building a :class:`DurableAgent` without it
installed raises a :class:`~fanloop.errors.ConfigurationError` naming the extra.
"""

from ._agent import DurableAgent, DurableRun
from ._codec import RemoteError
from ._events import RunRecovered, read_events

__all__ = ["DurableAgent", "DurableRun", "RemoteError", "RunRecovered", "read_events"]
