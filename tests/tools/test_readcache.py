"""The read cache: repeated reads of unchanged files, force, invalidation and scopes."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tools_helpers import run_context

from fanloop.tools import (
    DeleteFileTool,
    EditFileTool,
    ReadCache,
    ReadFileTool,
    WriteFileTool,
    default_db_path,
)
from fanloop.tools._readcache import cache_scope

NOTICE = "is unchanged since you last read it"


async def test_second_read_gets_a_notice_and_force_gets_the_content(
    ws: Path, cache: ReadCache
) -> None:
    (ws / "a.txt").write_text("content\n")
    tool = ReadFileTool(root=ws, read_cache=cache)
    with run_context(session_id="s1"):
        assert (await tool.run(path="a.txt")).content == "content\n"
        again = await tool.run(path="a.txt")
        assert NOTICE in again.content
        assert "force=true" in again.content
        assert again.metadata == {"cached": True}
        assert (await tool.run(path="a.txt", force=True)).content == "content\n"
        assert NOTICE in (await tool.run(path="a.txt")).content


async def test_the_range_is_part_of_the_key(ws: Path, cache: ReadCache) -> None:
    (ws / "a.txt").write_text("1\n2\n3\n")
    tool = ReadFileTool(root=ws, read_cache=cache)
    with run_context(session_id="s1"):
        await tool.run(path="a.txt", offset=1, limit=1)
        assert NOTICE in (await tool.run(path="a.txt", offset=1, limit=1)).content
        assert (await tool.run(path="a.txt", offset=2, limit=1)).content.startswith("2\n")
        assert (await tool.run(path="a.txt")).content == "1\n2\n3\n"
        assert "(lines 2-2)" in (await tool.run(path="a.txt", offset=2, limit=1)).content


async def test_a_change_on_disk_is_seen(ws: Path, cache: ReadCache) -> None:
    (ws / "a.txt").write_text("v1\n")
    tool = ReadFileTool(root=ws, read_cache=cache)
    with run_context(session_id="s1"):
        await tool.run(path="a.txt")
        (ws / "a.txt").write_text("v2\n")  # changed behind the tools' back
        assert (await tool.run(path="a.txt")).content == "v2\n"


async def test_writes_edits_and_deletes_invalidate(ws: Path, cache: ReadCache) -> None:
    (ws / "a.txt").write_text("same\n")
    read = ReadFileTool(root=ws, read_cache=cache)
    write = WriteFileTool(root=ws, read_cache=cache)
    edit = EditFileTool(root=ws, read_cache=cache)
    delete = DeleteFileTool(root=ws, read_cache=cache)
    with run_context(session_id="s1"):
        await read.run(path="a.txt")
        await write.run(path="a.txt", content="same\n")  # identical content, still a write
        assert (await read.run(path="a.txt")).content == "same\n"
        await edit.run(path="a.txt", old_string="same", new_string="new")
        await edit.run(path="a.txt", old_string="new", new_string="same")
        assert (await read.run(path="a.txt")).content == "same\n"
        await delete.run(path="a.txt")
        (ws / "a.txt").write_text("same\n")
        assert (await read.run(path="a.txt")).content == "same\n"
    ops = [op for _, _, op in cache.accesses(str((ws / "a.txt").resolve()))]
    assert ops == ["read", "write", "read", "edit", "edit", "read", "delete", "read"]


async def test_scopes(ws: Path, cache: ReadCache) -> None:
    (ws / "a.txt").write_text("x\n")
    tool = ReadFileTool(root=ws, read_cache=cache)
    with run_context(session_id="s1"):
        await tool.run(path="a.txt")
    with run_context(session_id="s2"):  # another conversation has not seen it
        assert (await tool.run(path="a.txt")).content == "x\n"
    with run_context(session_id="s1", run_id="run-2"):  # the same session, a later run
        assert NOTICE in (await tool.run(path="a.txt")).content
    with run_context(session_id="s1", run_id="sub-run", depth=1):  # a sub-agent starts fresh
        assert (await tool.run(path="a.txt")).content == "x\n"
    with run_context(run_id="r9"):  # no session: scoped to the run
        assert cache_scope() == "run:r9"
        assert (await tool.run(path="a.txt")).content == "x\n"
        assert NOTICE in (await tool.run(path="a.txt")).content
    assert cache_scope() == "global"  # outside any run
    assert (await tool.run(path="a.txt")).content == "x\n"
    assert NOTICE in (await tool.run(path="a.txt")).content


async def test_the_table_is_file_access(ws: Path, tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    (ws / "a.txt").write_text("x\n")
    await ReadFileTool(root=ws, read_cache=ReadCache(db)).run(path="a.txt", offset=1, limit=5)
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            'SELECT session_key, path, op, "offset", "limit", length(content_hash) FROM file_access'
        ).fetchall()
    assert rows == [("global", str((ws / "a.txt").resolve()), "read", 1, 5, 64)]


async def test_default_cache_lives_under_fanloop_home(ws: Path) -> None:
    (ws / "a.txt").write_text("x\n")
    tool = ReadFileTool(root=ws)  # the shared default cache
    await tool.run(path="a.txt")
    assert NOTICE in (await tool.run(path="a.txt")).content
    assert default_db_path() == Path(os.environ["FANLOOP_HOME"]) / "fanloop.db"
    assert default_db_path().is_file()


async def test_an_unusable_cache_does_not_break_reads(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where the cache directory should be")
    (ws / "a.txt").write_text("x\n")
    tool = ReadFileTool(root=ws, read_cache=ReadCache(tmp_path / "blocker" / "c.db"))
    assert (await tool.run(path="a.txt")).content == "x\n"
    assert (await tool.run(path="a.txt")).content == "x\n"
