"""``fanloop demo``: the offline tour, through the real provider code path.

It starts :class:`~fanloop.testing.FakeLLMServer` on 127.0.0.1 and drives the real
:class:`~fanloop.providers.openai.OpenAIProvider` (the official SDK, real HTTP, real SSE)
against it, rendered by the same view as ``fanloop run``. In order it shows: text streaming
in; one turn fanning out three tool calls (wall time next to the sum of their times); a
dangerous tool behind the confirmation prompt, auto-approved in demo mode; two sub-agents
delegated in parallel with their lines interleaved; a 429 injected by the server and retried
with backoff; and a one-line summary.

The tools are harmless: they sleep to simulate work, and the dangerous one writes only in a
temporary directory that is removed afterwards.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from typing import Any

import anyio
import httpx2

from .. import tool
from .._record import record
from .._result import RunResult
from ..catalog import cost_of
from ..providers import Usage
from ..providers.openai import OpenAIProvider
from ..testing import FakeLLMServer, Fault, call, reply
from ..tools import WriteFileTool
from ._app import Console, Interrupts, build_setup, execute, exit_code_for, run_command
from ._render import HumanView, plural

__all__ = ["ChatScript", "chat_tools", "demo"]

MODEL = "gpt-4o"
PROMPT = (
    "Plan a weekend in Lisbon: check the weather, events and hotel prices, save the plan, "
    "and get food and sightseeing tips."
)
SYSTEM = "You are a travel planner. Use your tools; independent calls run in parallel."
FOOD_TASK = "Find the three best places to eat in Lisbon for a weekend visitor."
SIGHTS_TASK = "Find the three sights in Lisbon a weekend visitor must not miss."
PLAN = """\
# A weekend in Lisbon

- Saturday: Alfama and the castle in the morning, tram 28, fado in the evening.
- Sunday: Belém — the tower, the monastery, pastéis de nata.
- Weather: 21°C and clear; pack a light jacket for the evening breeze.
- Stay: a guesthouse in Baixa (about €95 a night).
"""


@record(frozen=True)
class Pace:
    """How long things take: slow enough to watch, or ``--fast`` for tests."""

    tools: tuple[float, float, float]
    search: float
    delta_delay: float
    chars_per_delta: int
    retry_after: float


SLOW = Pace((1.1, 1.4, 0.8), 0.8, 0.02, 6, 1.0)
FAST = Pace((0.15, 0.2, 0.1), 0.1, 0.0, 12, 0.1)
WEB = Pace((0.3, 0.4, 0.2), 0.6, 0.03, 5, 0.5)
"""``fanloop web --demo``: text streams in visibly, sub-agents take long enough to watch."""


def _tools(pace: Pace) -> tuple[list[Any], list[Any]]:
    """The root agent's tools and the sub-agents' (all simulated: they only sleep)."""
    weather_s, events_s, hotels_s = pace.tools

    @tool
    async def weather(city: str) -> str:
        """The weekend forecast for a city."""
        await anyio.sleep(weather_s)
        return f"{city}: 21°C and clear on Saturday, 19°C with a breeze on Sunday."

    @tool
    async def events(city: str) -> str:
        """Concerts, festivals and shows in a city this weekend."""
        await anyio.sleep(events_s)
        return f"{city}: fado night in Alfama (Sat), open-air jazz in Belém (Sun)."

    @tool
    async def hotel_prices(city: str) -> str:
        """Typical hotel prices per night in a city."""
        await anyio.sleep(hotels_s)
        return f"{city}: guesthouses from €95, four-star hotels from €160 a night."

    @tool(concurrent_safe=True)
    async def search_guide(topic: str) -> str:
        """Search the city guide."""
        await anyio.sleep(pace.search)
        return {
            "food": "Time Out Market; Cervejaria Ramiro; Pastéis de Belém.",
            "sights": "Belém Tower; São Jorge Castle; the LX Factory.",
        }.get(topic, "nothing found")

    return [weather, events, hotel_prices], [search_guide]


def _user_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


class Script:
    """The fake model: answers each request from where its conversation stands."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self.rate_limited = False

    def __call__(self, body: dict[str, Any]) -> Any:
        messages = body.get("messages", [])
        first_user = next((_user_text(m) for m in messages if m.get("role") == "user"), "")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if first_user == FOOD_TASK:
            return self._subagent(
                turn,
                "food",
                "Eat at Cervejaria Ramiro (seafood), the "
                "Time Out Market, and Pastéis de Belém for custard tarts.",
            )
        if first_user == SIGHTS_TASK:
            return self._subagent(
                turn,
                "sights",
                "See Belém Tower, São Jorge Castle at sunset, and the LX Factory on Sunday.",
            )
        return self._root(turn)

    def _root(self, turn: int) -> Any:
        if turn == 0:
            return reply(
                "Let me check the weather, events and hotel prices at the same time.",
                tool_calls=[
                    call("weather", city="Lisbon"),
                    call("events", city="Lisbon"),
                    call("hotel_prices", city="Lisbon"),
                ],
                usage=Usage(input_tokens=1_180, output_tokens=96),
            )
        if turn == 1:
            return reply(
                "All three came back. I'll save the plan to plan.md — that writes a file, "
                "so it asks first.",
                tool_calls=[call("write_file", path="plan.md", content=PLAN)],
                usage=Usage(input_tokens=1_460, output_tokens=182),
            )
        if turn == 2:
            return reply(
                "Saved. Now two sub-agents research food and sights in parallel.",
                tool_calls=[call("delegate", task=FOOD_TASK), call("delegate", task=SIGHTS_TASK)],
                usage=Usage(input_tokens=1_720, output_tokens=88),
            )
        if not self.rate_limited:
            self.rate_limited = True
            return Fault.http(
                429, retry_after=self.pace.retry_after, message="Rate limit reached (demo)"
            )
        return reply(
            "Your weekend is planned: Alfama, the castle and fado on Saturday, "
            "Belém on Sunday. Eat at Cervejaria Ramiro and the Time Out Market, and don't "
            "miss the custard tarts in Belém. Expect 21°C and sun.",
            usage=Usage(input_tokens=2_050, output_tokens=74),
        )

    def _subagent(self, turn: int, topic: str, answer: str) -> Any:
        if turn == 0:
            return reply(
                f"Searching the guide for {topic}.",
                tool_calls=[call("search_guide", topic=topic)],
                usage=Usage(input_tokens=420, output_tokens=40),
            )
        return reply(answer, usage=Usage(input_tokens=510, output_tokens=52))


CHANGE_WORDS = (
    "change",
    "edit",
    "write",
    "delete",
    "remove",
    "save",
    "create",
    "update",
    "fix",
    "modify",
    "rename",
    "replace",
    "append",
)
"""A prompt with one of these words makes :class:`ChatScript` ask for a dangerous call."""
RESEARCH_WORDS = ("plan", "research", "compare", "parallel", "sub-agent", "subagent")
"""A prompt with one of these words makes :class:`ChatScript` delegate to two sub-agents."""
FACTS_TASK = "Gather the facts about: "
RISKS_TASK = "Look for risks and open questions about: "
_MAX_ECHO = 160


def chat_tools(pace: Pace) -> list[Any]:
    """The sub-agents' tool in the chat demo (simulated: it only sleeps)."""

    @tool(concurrent_safe=True)
    async def lookup(topic: str) -> str:
        """Look a topic up in the notes."""
        await anyio.sleep(pace.search)
        return f"3 notes mention {topic[:_MAX_ECHO]}: a summary, a checklist and an open question."

    return [lookup]


def _words(text: str, words: tuple[str, ...]) -> bool:
    """Whether a word of ``text`` starts with one of ``words`` ("edits" yes, "credit" no)."""
    lowered = text.lower()
    return any(re.search(r"\b" + re.escape(word), lowered) for word in words)


def _echo(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_ECHO else flat[: _MAX_ECHO - 1] + "…"


class ChatScript:
    """The fake model of ``fanloop web --demo``: it answers any prompt, from where the
    conversation stands since the last prompt.

    A prompt that asks for a change (see :data:`CHANGE_WORDS`) gets a ``write_file`` call
    that waits for approval; one that asks for a plan or research (:data:`RESEARCH_WORDS`)
    gets two sub-agents in parallel; anything else gets streamed text.
    """

    def __call__(self, body: dict[str, Any]) -> Any:
        messages = body.get("messages", [])
        first_user = next((_user_text(m) for m in messages if m.get("role") == "user"), "")
        last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        prompt = _user_text(messages[last]) if last >= 0 else ""
        turn = sum(1 for m in messages[last + 1 :] if m.get("role") == "assistant")
        for task in (FACTS_TASK, RISKS_TASK):
            if first_user.startswith(task):
                return self._subagent(turn, first_user)
        tool_output = " ".join(
            _user_text(m) for m in messages[last + 1 :] if m.get("role") == "tool"
        )
        if _words(prompt, CHANGE_WORDS):
            return self._change(turn, prompt, tool_output)
        if _words(prompt, RESEARCH_WORDS):
            return self._research(turn, prompt)
        return reply(
            f"You said: “{_echo(prompt)}”. I am fanloop's demo model, so every answer streams "
            "in token by token and nothing leaves this machine. Ask me to change something "
            "(“write a note”, “edit the plan”) to see a dangerous call wait for your approval, "
            "or to plan or research something to watch two sub-agents work in parallel.",
            usage=Usage(input_tokens=240, output_tokens=70),
        )

    def _change(self, turn: int, prompt: str, tool_output: str) -> Any:
        if turn == 0:
            return reply(
                "I'll make that change in notes.md. Writing a file is a dangerous call, so it "
                "waits for your approval.",
                tool_calls=[
                    call("write_file", path="notes.md", content=f"# Notes\n\n{_echo(prompt)}\n")
                ],
                usage=Usage(input_tokens=310, output_tokens=64),
            )
        if tool_output.lower().startswith("error"):  # declined: the reason, or why it failed
            reason = tool_output.split(":", 1)[-1].strip() or "declined"
            text = f"Understood: I left notes.md alone (your answer: {_echo(reason)})."
        else:
            text = "Done: notes.md in the demo workspace now holds your note."
        return reply(text, usage=Usage(input_tokens=420, output_tokens=24))

    def _research(self, turn: int, prompt: str) -> Any:
        subject = _echo(prompt)
        if turn == 0:
            return reply(
                "Two sub-agents look into this in parallel: one gathers the facts, one looks "
                "for risks.",
                tool_calls=[
                    call("delegate", task=FACTS_TASK + subject),
                    call("delegate", task=RISKS_TASK + subject),
                ],
                usage=Usage(input_tokens=330, output_tokens=58),
            )
        return reply(
            "Both sub-agents are back. The facts are in order and the one open question is "
            "noted; ask me to write the plan down when you are ready.",
            usage=Usage(input_tokens=760, output_tokens=40),
        )

    def _subagent(self, turn: int, task: str) -> Any:
        topic = task.split(": ", 1)[-1]
        if turn == 0:
            return reply(
                "Looking it up.",
                tool_calls=[call("lookup", topic=topic)],
                usage=Usage(input_tokens=180, output_tokens=20),
            )
        kind = "facts" if task.startswith(FACTS_TASK) else "risks"
        return reply(
            f"Found the {kind}: three notes cover it, one question is still open.",
            usage=Usage(input_tokens=260, output_tokens=26),
        )


def _options(root: str, json: bool) -> argparse.Namespace:
    return argparse.Namespace(
        provider=None,
        model=None,
        root=root,
        yes=False,
        json=json,
        max_turns=10,
        timeout=None,
        delegate=True,
        memory=False,
        skills=False,
    )


async def demo(console: Console, *, fast: bool = False, json: bool = False) -> int:
    """Run the tour; returns the exit code."""
    pace = FAST if fast else SLOW
    root_tools, guide_tools = _tools(pace)
    s = console.style
    out = console.out
    say = console.info if not json else (lambda text: print(text, file=console.err, flush=True))
    with tempfile.TemporaryDirectory(prefix="fanloop-demo-") as workdir:
        server = FakeLLMServer(
            responder=Script(pace),
            delta_delay=pace.delta_delay,
            chars_per_delta=pace.chars_per_delta,
        )
        async with server, httpx2.AsyncClient(trust_env=False, timeout=30.0) as client:
            provider = OpenAIProvider(
                MODEL, api_key="demo", base_url=server.openai_base_url, http_client=client
            )
            setup = build_setup(
                _options(workdir, json),
                console,
                provider=provider,
                tools=[*root_tools, WriteFileTool(root=workdir, read_cache=False)],
                delegate_tools=guide_tools,
                approve="demo",
                system=SYSTEM,
            )
            if isinstance(setup.view, HumanView):
                setup.view.show_usage = False  # the summary below says it all, once
            if not json:
                print(
                    s.bold("fanloop demo")
                    + s.dim(
                        f" — a fake model server on {server.url}, driven through the real "
                        "OpenAI client. No key; nothing leaves this machine."
                    ),
                    file=out,
                    flush=True,
                )
                print(s.bold(s.green("you › ")) + PROMPT + "\n", file=out, flush=True)
            started = time.perf_counter()

            async def body(interrupts: Interrupts) -> int:
                outcome = await execute(
                    lambda: setup.agent.run(PROMPT), setup.view, interrupts, console
                )
                return exit_code_for(outcome)

            code = await run_command(body, console)
            wall = time.perf_counter() - started
            result = setup.view.result
            if result is not None and code == 0:
                say(s.bold(_summary(result, server, wall)))
            if isinstance(setup.view, HumanView) and code == 0:
                say(
                    "That was the real OpenAI provider over HTTP (plan.md went to a temporary "
                    "folder, removed now). Try it on your own: "
                    'fanloop run --provider anthropic --model claude-sonnet-4-5 "..."'
                )
            return code


def _summary(result: RunResult, server: FakeLLMServer, wall: float) -> str:
    u = result.usage
    cost = cost_of(MODEL, u)
    return (
        f"demo done: {plural(result.turns, 'turn')} · {plural(result.tool_calls, 'tool call')} · "
        f"{plural(len(server.requests), 'model request')} (1 rate-limited) · "
        f"tokens in {u.input_tokens:,} out {u.output_tokens:,} · ${cost or 0:.4f} · {wall:.1f}s"
    )
