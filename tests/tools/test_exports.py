"""The built-in tool set: names, dangerous flags and schemas as docs/tools.md lists them, and
the exports."""

from __future__ import annotations

from pathlib import Path

import pytest

import fanloop.tools
from fanloop.errors import ToolError
from fanloop.tools import (
    DEFAULT_TOOLS,
    READ_ONLY_TOOLS,
    ReadFileTool,
    RememberTool,
    Tool,
    default_tools,
    read_only_tools,
)

SEED_003 = {  # name: dangerous
    "read_file": False,
    "write_file": True,
    "edit_file": True,
    "delete_file": True,
    "list_dir": False,
    "glob": False,
    "grep": False,
    "bash": True,
    "web_fetch": False,
    "http_request": True,
    "git_status": False,
    "git_diff": False,
    "git_log": False,
    "git_commit": True,
    "env": False,
    "sql_schema": False,
    "sql_query": False,
}
READ_ONLY = [
    "read_file",
    "list_dir",
    "glob",
    "grep",
    "web_fetch",
    "git_status",
    "git_diff",
    "git_log",
    "sql_schema",
    "sql_query",
]


def test_default_tools_match_the_seed() -> None:
    assert isinstance(DEFAULT_TOOLS, tuple)
    assert {t.name: t.dangerous for t in DEFAULT_TOOLS} == SEED_003
    assert len(DEFAULT_TOOLS) == len(SEED_003)


def test_read_only_tools_are_the_seed_subset() -> None:
    assert isinstance(READ_ONLY_TOOLS, tuple)
    assert [t.name for t in READ_ONLY_TOOLS] == READ_ONLY
    assert not any(t.dangerous for t in READ_ONLY_TOOLS)
    assert all(any(t is d for d in DEFAULT_TOOLS) for t in READ_ONLY_TOOLS)


def test_remember_is_not_a_default_tool() -> None:
    assert "remember" not in {t.name for t in DEFAULT_TOOLS}
    assert RememberTool().name == "remember"
    assert not RememberTool.dangerous


@pytest.mark.parametrize("tool", [*DEFAULT_TOOLS, RememberTool()], ids=lambda t: t.name)
def test_schemas_are_honest(tool: Tool) -> None:
    schema = tool.schema()
    assert schema["name"] == tool.name
    assert len(schema["description"]) > 30
    params = schema["parameters"]
    assert params["type"] == "object"
    assert params.get("additionalProperties") is False
    assert set(params.get("required", ())) <= set(params["properties"])
    for name, prop in params["properties"].items():
        assert prop.get("description"), f"{tool.name}.{name} has no description"
    assert tool.spec().name == tool.name


def test_validation_rejects_unknown_and_mistyped_arguments() -> None:
    read = ReadFileTool()
    with pytest.raises(ToolError, match="'file' was unexpected"):
        read.validate({"file": "a.txt"})
    with pytest.raises(ToolError, match="limit: '5' is not of type 'integer'"):
        read.validate({"path": "a.txt", "limit": "5"})
    assert read.validate({"path": "a.txt", "force": True}) == {"path": "a.txt", "force": True}


async def test_default_tools_builds_fresh_instances_for_a_root(ws: Path) -> None:
    tools = default_tools(root=ws, read_cache=False)
    assert [t.name for t in tools] == [t.name for t in DEFAULT_TOOLS]
    assert not any(t is d for t in tools for d in DEFAULT_TOOLS)
    (ws / "x.txt").write_text("hi\n")
    by_name = {t.name: t for t in tools}
    assert (await by_name["read_file"].run(path="x.txt")).content == "hi\n"
    assert [t.name for t in read_only_tools(root=ws)] == READ_ONLY


async def test_default_instances_follow_the_current_directory(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ws)
    (ws / "here.txt").write_text("here\n")
    read = next(t for t in DEFAULT_TOOLS if t.name == "read_file")
    assert (await read.run(path="here.txt")).content == "here\n"


def test_all_is_sorted_and_complete() -> None:
    exported = fanloop.tools.__all__
    assert sorted(exported, key=lambda n: (not n.isupper(), n)) == exported
    for name in exported:
        assert hasattr(fanloop.tools, name)
