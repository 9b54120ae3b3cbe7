"""The git tools on a real repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools_helpers import git

from fanloop.errors import ToolError
from fanloop.tools import GitCommitTool, GitDiffTool, GitLogTool, GitStatusTool


async def test_status(repo: Path) -> None:
    tool = GitStatusTool(root=repo)
    assert (await tool.run()).content == "## main\n"
    (repo / "README.md").write_text("changed\n")
    (repo / "new.txt").write_text("n\n")
    assert (await tool.run()).content == "## main\n M README.md\n?? new.txt\n"


async def test_diff_unstaged_and_staged(repo: Path) -> None:
    tool = GitDiffTool(root=repo)
    assert (await tool.run()).content == "(no unstaged changes)"
    (repo / "README.md").write_text("hello\nworld\n")
    unstaged = (await tool.run()).content
    assert "--- a/README.md\n+++ b/README.md\n" in unstaged
    assert unstaged.endswith(" hello\n+world\n")
    assert (await tool.run(staged=True)).content == "(no staged changes)"
    git(repo, "add", "README.md")
    assert (await tool.run(staged=True)).content == unstaged
    assert (await tool.run()).content == "(no unstaged changes)"
    assert (await tool.run(staged=True, paths=["other.txt"])).content == "(no staged changes)"


async def test_diff_is_bounded(repo: Path) -> None:
    (repo / "README.md").write_text("x\n" * 5000)
    text = (await GitDiffTool(root=repo, max_chars=500).run()).content
    assert "\n[git output truncated: showing 500 of " in text
    assert len(text) < 600


async def test_log(repo: Path) -> None:
    for i in range(3):
        (repo / f"f{i}").write_text(str(i))
        git(repo, "add", f"f{i}")
        git(repo, "commit", "-q", "-m", f"Add f{i}")
    lines = (await GitLogTool(root=repo).run()).content.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "Add f2",
        "Add f1",
        "Add f0",
        "Initial commit",
    ]
    assert lines[0].split()[2:4] == ["Test", "Author:"]
    assert len((await GitLogTool(root=repo).run(max_count=2)).content.splitlines()) == 2
    only = (await GitLogTool(root=repo).run(path="f1")).content
    assert only.endswith(": Add f1\n")
    assert only.count("\n") == 1


async def test_log_of_an_empty_repository(ws: Path) -> None:
    git(ws, "init", "-q", "-b", "main")
    assert (await GitLogTool(root=ws).run()).content == "(no commits yet)"


async def test_commit_stages_and_commits_only_the_given_files(repo: Path) -> None:
    (repo / "a.txt").write_text("a\n")
    (repo / "b.txt").write_text("b\n")
    (repo / "staged.txt").write_text("s\n")
    git(repo, "add", "staged.txt")  # staged earlier, not part of this commit
    (repo / "README.md").unlink()  # a deletion is committed too
    tool = GitCommitTool(root=repo)
    assert tool.dangerous
    assert tool.preview(files=["a.txt", "README.md"], message="Add a") == (
        "git commit of:\n  a.txt\n  README.md\nmessage:\nAdd a"
    )
    result = await tool.run(files=["a.txt", "README.md"], message="Add a, drop README")
    assert "Add a, drop README" in result.content
    assert result.metadata is not None
    assert result.metadata["commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "show", "--name-status", "--format=%s", "HEAD").split() == [
        "Add",
        "a,",
        "drop",
        "README",
        "D",
        "README.md",
        "A",
        "a.txt",
    ]
    assert git(repo, "status", "--porcelain=v1") == "A  staged.txt\n?? b.txt\n"


async def test_commit_errors(repo: Path, tmp_path: Path) -> None:
    tool = GitCommitTool(root=repo)
    with pytest.raises(ToolError, match="at least one file"):
        await tool.run(files=[], message="m")
    with pytest.raises(ToolError, match="message is empty"):
        await tool.run(files=["README.md"], message="  ")
    with pytest.raises(ToolError, match="outside the workspace"):
        await tool.run(files=["../outside/secret.txt"], message="m")
    with pytest.raises(ToolError, match="git commit failed"):
        await tool.run(files=["README.md"], message="nothing changed")


async def test_not_a_repository(ws: Path) -> None:
    with pytest.raises(ToolError, match="git status failed: fatal: not a git repository"):
        await GitStatusTool(root=ws).run()
