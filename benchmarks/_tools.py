"""The no-op tool every side of a benchmark runs, and its wire schemas (no SDK imported here:
the floor's process must not pay for the SDKs)."""

from __future__ import annotations

from typing import Any

NOOP_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
OPENAI_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "noop", "description": "Do nothing.", "parameters": NOOP_SCHEMA},
    }
]
ANTHROPIC_TOOLS: list[Any] = [
    {"name": "noop", "description": "Do nothing.", "input_schema": NOOP_SCHEMA}
]
RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "noop",
        "description": "Do nothing.",
        "parameters": NOOP_SCHEMA,
        "strict": False,
    }
]


async def noop() -> str:
    """The tool every side runs."""
    return "ok"
