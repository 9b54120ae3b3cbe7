"""A type checker knows what ``result.output`` is: mypy runs on a small program."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROGRAM = textwrap.dedent(
    """
    from pydantic import BaseModel

    from fanloop import Agent
    from fanloop.testing import ScriptedProvider


    class Invoice(BaseModel):
        total: float


    class Refusal(BaseModel):
        reason: str


    async def main() -> None:
        agent = Agent(ScriptedProvider([]), output_type=Invoice)
        result = await agent.run("extract")
        total: float = result.output.total
        result.output.nope  # E: no such attribute

        text = await Agent(ScriptedProvider([])).run("hi")
        upper: str = text.output.upper()

        number = await Agent(ScriptedProvider([]), output_type=int).run("n")
        n: int = number.output + 1

        either: Agent[None, Invoice | Refusal] = Agent(
            ScriptedProvider([]), output_type=Invoice | Refusal
        )
        value = (await either.run("x")).output
        value.total  # E: only one side has it

        async with agent.stream("extract") as run:
            async for _ in run:
                pass
        streamed: float = run.result.output.total
    """
)


@pytest.mark.slow
def test_mypy_knows_the_output_type(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), str(program)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    lines = PROGRAM.splitlines()
    expected = {i + 1 for i, line in enumerate(lines) if "# E:" in line}
    found = {int(line.split(":")[1]) for line in errors}
    assert found == expected, out.stdout
    assert any('"Invoice" has no attribute "nope"' in line for line in errors)
