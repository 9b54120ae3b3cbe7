"""remember, the memory file, and the memory prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from fanloop.errors import ToolError
from fanloop.tools import MEMORY_FILE, RememberTool, load_memory, memory_prompt


async def test_remember_appends_to_the_memory_file(ws: Path) -> None:
    tool = RememberTool(root=ws)
    assert not tool.dangerous
    assert (await tool.run(note="Use pytest, not unittest.")).content == (
        "Remembered (saved to .fanloop/memory.md): Use pytest, not unittest."
    )
    await tool.run(note="  Tabs\nfor Makefiles   ")
    text = (ws / MEMORY_FILE).read_text()
    assert text.startswith("# fanloop memory\n")
    assert text.endswith("\n- Use pytest, not unittest.\n- Tabs for Makefiles\n")
    assert load_memory(ws) == text


async def test_remember_does_not_repeat_itself(ws: Path) -> None:
    tool = RememberTool(root=ws)
    await tool.run(note="Be brief.")
    assert (await tool.run(note="Be   brief.")).content == "Already remembered: Be brief."
    assert (ws / MEMORY_FILE).read_text().count("Be brief.") == 1


async def test_remember_bad_input(ws: Path) -> None:
    tool = RememberTool(root=ws, max_note_chars=10)
    with pytest.raises(ToolError, match="The note is empty"):
        await tool.run(note="   ")
    with pytest.raises(ToolError, match="keep it under 10"):
        await tool.run(note="a much longer note")
    assert not (ws / ".fanloop").exists()


async def test_remember_refuses_a_memory_dir_linked_outside(ws: Path) -> None:
    (ws / ".fanloop").symlink_to(ws.parent / "outside")
    with pytest.raises(ToolError, match="symbolic link"):
        await RememberTool(root=ws).run(note="x")
    assert load_memory(ws) == ""


async def test_memory_prompt(ws: Path) -> None:
    assert load_memory(ws) == ""
    assert memory_prompt(ws) is None
    await RememberTool(root=ws).run(note="Answer in French.")
    prompt = memory_prompt(ws)
    assert prompt is not None
    assert prompt.startswith("The user asked you to remember")
    assert prompt.endswith("- Answer in French.")


async def test_memory_prompt_keeps_the_newest_notes(ws: Path) -> None:
    tool = RememberTool(root=ws)
    for i in range(50):
        await tool.run(note=f"note number {i:02d}")
    prompt = memory_prompt(ws, max_chars=100)
    assert prompt is not None
    assert "[older notes omitted]" in prompt
    assert prompt.endswith("- note number 49")
    assert "note number 00" not in prompt


def test_memory_follows_the_current_directory(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (ws / ".fanloop").mkdir()
    (ws / MEMORY_FILE).write_text("- hand-written note\n")
    monkeypatch.chdir(ws)
    assert memory_prompt() is not None
    assert load_memory() == "- hand-written note\n"
