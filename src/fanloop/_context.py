"""The context check before each round: track window use, compact when past the threshold."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._run import RunState

__all__ = ["check_context"]


async def check_context(run: RunState) -> None:
    """Compact older history when the conversation fills too much of the context window."""
