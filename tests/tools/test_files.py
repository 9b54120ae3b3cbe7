"""The file tools and the workspace boundary, on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fanloop.errors import ToolError
from fanloop.tools import (
    DeleteFileTool,
    EditFileTool,
    GlobTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    Workspace,
    WriteFileTool,
)

# -- the workspace boundary ----------------------------------------------------------------


def test_resolve_inside(ws: Path) -> None:
    (ws / "a").mkdir()
    w = Workspace(ws)
    assert w.resolve("a/b.txt") == ws.resolve() / "a" / "b.txt"
    assert w.resolve("a/../a/b.txt") == ws.resolve() / "a" / "b.txt"
    assert w.resolve(str(ws / "a")) == ws.resolve() / "a"  # absolute, but inside
    assert w.resolve(".") == ws.resolve()


@pytest.mark.parametrize("path", ["../outside/secret.txt", "a/../../outside", "..", "/etc/passwd"])
def test_resolve_refuses_escapes(ws: Path, path: str) -> None:
    with pytest.raises(ToolError, match="outside the workspace root"):
        Workspace(ws).resolve(path)


def test_resolve_refuses_symlink_escape(ws: Path) -> None:
    (ws / "link").symlink_to(ws.parent / "outside")
    (ws / "file_link").symlink_to(ws.parent / "outside" / "secret.txt")
    for path in ("link/secret.txt", "file_link", "link"):
        with pytest.raises(ToolError, match="through a symbolic link outside the workspace"):
            Workspace(ws).resolve(path)


def test_resolve_allows_symlink_inside(ws: Path) -> None:
    (ws / "real.txt").write_text("x")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    assert Workspace(ws).resolve("alias.txt") == (ws / "real.txt").resolve()


@pytest.mark.parametrize("path", ["", "   ", "a\x00b"])
def test_resolve_rejects_malformed(ws: Path, path: str) -> None:
    with pytest.raises(ToolError):
        Workspace(ws).resolve(path)


def test_default_root_is_cwd_at_call_time(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = Workspace()
    monkeypatch.chdir(ws)
    assert w.root == ws.resolve()
    monkeypatch.chdir(ws.parent)
    assert w.root == ws.parent.resolve()


# -- read_file -----------------------------------------------------------------------------


async def test_read_whole_file(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    result = await ReadFileTool(root=ws, read_cache=False).run(path="a.txt")
    assert result.content == "one\ntwo\nthree\n"
    assert not result.is_error


async def test_read_line_range(ws: Path) -> None:
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    tool = ReadFileTool(root=ws, read_cache=False)
    result = await tool.run(path="a.txt", offset=3, limit=2)
    assert result.content == "line 3\nline 4\n[lines 3-4 of 10 in a.txt; pass offset=5 to read on]"
    tail = await tool.run(path="a.txt", offset=9)
    assert tail.content == "line 9\nline 10\n[lines 9-10 of 10 in a.txt]"


async def test_read_cuts_long_output_at_a_line(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"{i:04d}\n" for i in range(1000)))  # 5 chars a line
    result = await ReadFileTool(root=ws, read_cache=False, max_chars=50).run(path="big.txt")
    assert result.content.startswith("0000\n0001\n")
    assert "[lines 1-10 of 1000 in big.txt; output cut at 50 characters; pass offset=11" in (
        result.content
    )


async def test_read_errors(ws: Path) -> None:
    tool = ReadFileTool(root=ws, read_cache=False)
    (ws / "d").mkdir()
    (ws / "bin").write_bytes(b"\x00\x01\x02binary")
    (ws / "a.txt").write_text("x\n")
    with pytest.raises(ToolError, match=r"File not found: nope\.txt"):
        await tool.run(path="nope.txt")
    with pytest.raises(ToolError, match="is a directory"):
        await tool.run(path="d")
    with pytest.raises(ToolError, match="binary file"):
        await tool.run(path="bin")
    with pytest.raises(ToolError, match=r"past the end of a\.txt, which has 1 line\."):
        await tool.run(path="a.txt", offset=5)
    with pytest.raises(ToolError, match="must be at least 1"):
        await tool.run(path="a.txt", offset=0)
    with pytest.raises(ToolError, match="must be an integer"):
        await tool.run(path="a.txt", limit="ten")
    with pytest.raises(ToolError, match="outside the workspace"):
        await tool.run(path="../outside/secret.txt")


async def test_read_empty_file(ws: Path) -> None:
    (ws / "empty").write_text("")
    assert (await ReadFileTool(root=ws, read_cache=False).run(path="empty")).content == (
        "[empty is empty]"
    )


async def test_read_refuses_symlink_escape(ws: Path) -> None:
    (ws / "s").symlink_to(ws.parent / "outside" / "secret.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        await ReadFileTool(root=ws, read_cache=False).run(path="s")


# -- write_file ----------------------------------------------------------------------------


async def test_write_creates_and_overwrites(ws: Path) -> None:
    tool = WriteFileTool(root=ws, read_cache=False)
    result = await tool.run(path="sub/dir/new.txt", content="a\nb\n")
    assert result.content == "Created sub/dir/new.txt (2 lines, 4 bytes)."
    assert (ws / "sub/dir/new.txt").read_text() == "a\nb\n"
    result = await tool.run(path="sub/dir/new.txt", content="c")
    assert result.content == "Overwrote sub/dir/new.txt (1 line, 1 byte)."
    assert (ws / "sub/dir/new.txt").read_text() == "c"


async def test_write_keeps_crlf(ws: Path) -> None:
    await WriteFileTool(root=ws, read_cache=False).run(path="w.txt", content="a\r\nb\r\n")
    assert (ws / "w.txt").read_bytes() == b"a\r\nb\r\n"


def test_write_preview_is_a_unified_diff(ws: Path) -> None:
    tool = WriteFileTool(root=ws, read_cache=False)
    assert tool.preview(path="n.txt", content="hello\n") == (
        "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+hello\n"
    )
    (ws / "n.txt").write_text("hello\nold\n")
    assert tool.preview(path="n.txt", content="hello\nnew\n") == (
        "--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,2 @@\n hello\n-old\n+new\n"
    )
    assert "outside the workspace" in tool.preview(path="../x", content="")


async def test_write_refuses_escapes(ws: Path) -> None:
    tool = WriteFileTool(root=ws, read_cache=False)
    (ws / "out").symlink_to(ws.parent / "outside")
    with pytest.raises(ToolError, match="outside the workspace"):
        await tool.run(path="../outside/x.txt", content="no")
    with pytest.raises(ToolError, match="symbolic link"):
        await tool.run(path="out/x.txt", content="no")
    with pytest.raises(ToolError, match="symbolic link"):
        await tool.run(path="out/secret.txt", content="overwritten")
    assert sorted(os.listdir(ws.parent / "outside")) == ["secret.txt"]
    assert (ws.parent / "outside" / "secret.txt").read_text() == "top secret\n"


async def test_write_to_directory_fails(ws: Path) -> None:
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await WriteFileTool(root=ws, read_cache=False).run(path="d", content="x")


# -- edit_file -----------------------------------------------------------------------------


async def test_edit_replaces_a_unique_substring(ws: Path) -> None:
    (ws / "e.py").write_text("def f():\n    return 1\n")
    tool = EditFileTool(root=ws, read_cache=False)
    preview = tool.preview(path="e.py", old_string="return 1", new_string="return 2")
    assert preview == (
        "--- a/e.py\n+++ b/e.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
    )
    result = await tool.run(path="e.py", old_string="return 1", new_string="return 2")
    assert result.content == "Edited e.py: replaced 1 occurrence."
    assert (ws / "e.py").read_text() == "def f():\n    return 2\n"


async def test_edit_errors(ws: Path) -> None:
    (ws / "e.txt").write_text("a = 1\nb = 1\nc = 1\n")
    tool = EditFileTool(root=ws, read_cache=False)
    with pytest.raises(ToolError, match=r"occurs 3 times in e\.txt \(starting on lines 1, 2, 3\)"):
        await tool.run(path="e.txt", old_string="= 1", new_string="= 2")
    with pytest.raises(ToolError, match=r"old_string was not found in e\.txt"):
        await tool.run(path="e.txt", old_string="d = 1", new_string="d = 2")
    with pytest.raises(ToolError, match="old_string is empty"):
        await tool.run(path="e.txt", old_string="", new_string="x")
    with pytest.raises(ToolError, match="are the same"):
        await tool.run(path="e.txt", old_string="a", new_string="a")
    with pytest.raises(ToolError, match="File not found"):
        await tool.run(path="none.txt", old_string="a", new_string="b")
    with pytest.raises(ToolError, match="Missing required argument 'new_string'"):
        await tool.run(path="e.txt", old_string="a")
    assert "would fail: old_string occurs 3 times" in tool.preview(
        path="e.txt", old_string="= 1", new_string="= 2"
    )
    assert (ws / "e.txt").read_text() == "a = 1\nb = 1\nc = 1\n"


async def test_edit_replace_all(ws: Path) -> None:
    (ws / "e.txt").write_text("a = 1\nb = 1\n")
    result = await EditFileTool(root=ws, read_cache=False).run(
        path="e.txt", old_string="= 1", new_string="= 2", replace_all=True
    )
    assert result.content == "Edited e.txt: replaced 2 occurrences."
    assert (ws / "e.txt").read_text() == "a = 2\nb = 2\n"


async def test_edit_hints_at_whitespace_mismatch(ws: Path) -> None:
    (ws / "e.py").write_text("class A:\n    def f(self):\n        pass\n")
    with pytest.raises(
        ToolError, match="differs only in whitespace or indentation starts on line 2"
    ):
        await EditFileTool(root=ws, read_cache=False).run(
            path="e.py", old_string="def f(self):\n    pass", new_string="x"
        )


async def test_edit_crlf_file_with_lf_old_string(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await EditFileTool(root=ws, read_cache=False).run(
        path="w.txt", old_string="one\ntwo", new_string="1\n2"
    )
    assert (ws / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


# -- delete_file ---------------------------------------------------------------------------


async def test_delete_file_with_preview(ws: Path) -> None:
    (ws / "gone.txt").write_text("bye\n")
    tool = DeleteFileTool(root=ws, read_cache=False)
    assert tool.preview(path="gone.txt") == "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    assert (await tool.run(path="gone.txt")).content == "Deleted gone.txt."
    assert not (ws / "gone.txt").exists()
    with pytest.raises(ToolError, match="File not found"):
        await tool.run(path="gone.txt")


async def test_delete_refuses_directories_and_escapes(ws: Path) -> None:
    (ws / "d").mkdir()
    tool = DeleteFileTool(root=ws, read_cache=False)
    with pytest.raises(ToolError, match="is a directory"):
        await tool.run(path="d")
    (ws / "out").symlink_to(ws.parent / "outside" / "secret.txt")
    # A link pointing out is inside itself: it goes, its target stays.
    assert tool.preview(path="out").startswith("delete the symbolic link out -> ")
    assert (await tool.run(path="out")).content == "Deleted out."
    assert not (ws / "out").is_symlink()
    with pytest.raises(ToolError, match="outside the workspace"):
        await tool.run(path="../outside/secret.txt")
    assert (ws.parent / "outside" / "secret.txt").exists()
    assert "outside the workspace" in tool.preview(path="../outside/secret.txt")


async def test_delete_symlink_removes_the_link_only(ws: Path) -> None:
    (ws / "target.txt").write_text("keep\n")
    (ws / "alias").symlink_to("target.txt")
    tool = DeleteFileTool(root=ws, read_cache=False)
    assert tool.preview(path="alias") == "delete the symbolic link alias -> target.txt"
    await tool.run(path="alias")
    assert not (ws / "alias").is_symlink()
    assert (ws / "target.txt").read_text() == "keep\n"


# -- list_dir, glob, grep ------------------------------------------------------------------


async def test_list_dir(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "b.txt").write_text("12345")
    (ws / "a.txt").write_text("")
    (ws / "ln").symlink_to("a.txt")
    tool = ListDirTool(root=ws)
    assert (await tool.run()).content == "./\n  src/\n  a.txt  (0 B)\n  b.txt  (5 B)\n  ln -> a.txt"
    assert (await tool.run(path="src")).content == "[src is empty]"
    with pytest.raises(ToolError, match="is a file"):
        await tool.run(path="a.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        await tool.run(path="..")


async def test_list_dir_is_bounded(ws: Path) -> None:
    for i in range(30):
        (ws / f"f{i:02d}").write_text("")
    text = (await ListDirTool(root=ws, max_entries=5).run()).content
    assert text.splitlines()[-1] == "[listing cut at 5 of 30 entries]"
    assert len(text.splitlines()) == 7


async def test_glob(ws: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "m.py").write_text("")
    (ws / "src" / "top.py").write_text("")
    (ws / "README.md").write_text("")
    (ws / ".git" / "objects").mkdir(parents=True)
    (ws / ".git" / "hook.py").write_text("")
    (ws / "escape").symlink_to(ws.parent / "outside")
    tool = GlobTool(root=ws)
    assert (await tool.run(pattern="**/*.py")).content == "src/pkg/m.py\nsrc/top.py"
    assert (await tool.run(pattern="*.py", path="src")).content == "src/top.py"
    assert (await tool.run(pattern="*.txt")).content == "No files match '*.txt'."
    assert "secret" not in (await tool.run(pattern="**/*")).content
    with pytest.raises(ToolError, match=r"must not contain '\.\.'"):
        await tool.run(pattern="../*")
    with pytest.raises(ToolError, match="must be relative"):
        await tool.run(pattern="/etc/*")


async def test_glob_is_bounded(ws: Path) -> None:
    for i in range(12):
        (ws / f"f{i:02d}.txt").write_text("")
    text = (await GlobTool(root=ws, max_results=5).run(pattern="*.txt")).content
    assert text.splitlines()[-1] == "[12 matches; showing the first 5]"


async def test_grep(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("import os\ndef Main():\n    pass\n")
    (ws / "src" / "b.txt").write_text("main course\n")
    (ws / "blob.bin").write_bytes(b"\x00main\x00")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("main\n")
    (ws / "escape").symlink_to(ws.parent / "outside" / "secret.txt")
    tool = GrepTool(root=ws)
    assert (await tool.run(pattern="main")).content == "src/b.txt:1: main course"
    assert (await tool.run(pattern="main", ignore_case=True)).content == (
        "src/a.py:2: def Main():\nsrc/b.txt:1: main course"
    )
    assert (await tool.run(pattern="main", ignore_case=True, include="*.py")).content == (
        "src/a.py:2: def Main():"
    )
    assert (await tool.run(pattern="os", path="src/a.py")).content == "src/a.py:1: import os"
    assert (await tool.run(pattern="secret")).content.startswith("No matches for /secret/")
    with pytest.raises(ToolError, match="Invalid regular expression"):
        await tool.run(pattern="(")
    with pytest.raises(ToolError, match="outside the workspace"):
        await tool.run(pattern="x", path="../outside")


async def test_grep_is_bounded(ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * 50 + "x" * 1000 + " hit\n")
    text = (await GrepTool(root=ws).run(pattern="hit", max_matches=3)).content
    assert text.splitlines() == [
        "many.txt:1: hit",
        "many.txt:2: hit",
        "many.txt:3: hit",
        "[stopped at 3 matches; narrow the pattern, path or include]",
    ]
    long_line = (await GrepTool(root=ws).run(pattern="x hit")).content
    assert long_line.endswith(" [line cut]")
    assert len(long_line) < 400
    cut = (await GrepTool(root=ws, max_chars=40).run(pattern="hit")).content
    assert cut.endswith("[output cut at 40 characters; narrow the search]")


async def test_pipes_are_refused_not_opened(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "a.txt").write_text("needle\n")
    with pytest.raises(ToolError, match="not a regular file"):
        await ReadFileTool(root=ws, read_cache=False).run(path="pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        await WriteFileTool(root=ws, read_cache=False).run(path="pipe", content="x")
    with pytest.raises(ToolError, match="not a regular file"):
        await EditFileTool(root=ws, read_cache=False).run(
            path="pipe", old_string="a", new_string="b"
        )
    assert (await GrepTool(root=ws).run(pattern="needle")).content == "a.txt:1: needle"
