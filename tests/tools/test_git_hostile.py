"""The git tools on hostile repositories: nothing from the repository runs, git stays in the
workspace, and what the model passes as a path is only ever a path inside it.

Each attack names a program that would create a marker file; a control run of plain git shows
the attack is live, and the tools must never create the marker.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tools_helpers import git

from fanloop.errors import ToolError
from fanloop.tools import GitCommitTool, GitDiffTool, GitLogTool, GitStatusTool

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "fsmonitor-watchman",
)


def evil_command(marker: Path) -> str:
    """A shell command that leaves ``marker`` behind and passes its input through."""
    return f"touch '{marker}'; cat"


def write_hooks(directory: Path, marker: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in HOOKS:
        hook = directory / name
        hook.write_text(f"#!/bin/sh\ntouch '{marker}'\n")
        hook.chmod(hook.stat().st_mode | stat.S_IXUSR)


def attributes(repo: Path, line: str) -> None:
    (repo / ".gitattributes").write_text(line + "\n")
    git(repo, "add", ".gitattributes")
    git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "attributes")


def plain_git(repo: Path, *args: str) -> None:
    """Run git the way a user would (the attack is live): errors are expected and ignored."""
    subprocess.run(["git", *args], cwd=repo, capture_output=True, check=False, timeout=30)


Setup = Callable[[Path, Path, Path], tuple[str, ...] | None]


def fsmonitor(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "core.fsmonitor", evil_command(marker))
    return ("status",)


def pagers(repo: Path, marker: Path, tmp: Path) -> None:
    for key in ("core.pager", "pager.status", "pager.diff", "pager.log", "pager.commit"):
        git(repo, "config", key, evil_command(marker))
    return None  # noqa: RET501 - git pages only onto a terminal: no control run without one


def external_diff(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "diff.external", evil_command(marker))
    return ("diff",)


def diff_driver_command(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "diff.evil.command", evil_command(marker))
    attributes(repo, "* diff=evil")
    return ("diff",)


def textconv(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "diff.evil.textconv", evil_command(marker))
    attributes(repo, "* diff=evil")
    return ("diff",)


def clean_smudge_filter(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "filter.evil.clean", evil_command(marker))
    git(repo, "config", "filter.evil.smudge", evil_command(marker))
    git(repo, "config", "filter.evil.required", "true")
    attributes(repo, "* filter=evil")
    return ("add", "--all")


def process_filter(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "filter.evil.process", evil_command(marker))
    attributes(repo, "*.md filter=evil")
    return ("add", "--all")


def included_filter(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    included = tmp / "included.cfg"
    included.write_text(f'[filter "inc"]\n\tclean = "{evil_command(marker)}"\n')
    git(repo, "config", "include.path", str(included))
    git(repo, "config", f"includeIf.gitdir:{repo}/.path", str(included))
    attributes(repo, "* filter=inc")
    return ("add", "--all")


def weird_driver_name(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "filter.a=b.c.clean", evil_command(marker))
    attributes(repo, "* filter=a=b.c")
    return ("add", "--all")


def binary_driver_name(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    (repo / ".gitattributes").write_bytes(b"* filter=\xff\xfe\n")
    git(repo, "add", ".gitattributes")
    git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "attributes")
    with (repo / ".git" / "config").open("ab") as config:  # a name that is not UTF-8
        config.write(b'[filter "\xff\xfe"]\n\tclean = ' + evil_command(marker).encode() + b"\n")
    return ("add", "--all")


def submodule_config(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    inner = tmp / "inner"
    inner.mkdir()
    git(inner, "init", "-q", "-b", "main")
    (inner / "f.txt").write_text("f\n")
    git(inner, "add", "f.txt")
    git(inner, "commit", "-q", "-m", "inner")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "sub")
    git(repo, "commit", "-q", "-m", "submodule")
    git(repo / "sub", "config", "core.fsmonitor", evil_command(marker))
    git(repo / "sub", "config", "filter.evil.clean", evil_command(marker))
    (repo / "sub" / ".gitattributes").write_text("* filter=evil\n")
    (repo / "sub" / "f.txt").write_text("changed in the submodule\n")
    return ("status",)


def hooks(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    write_hooks(repo / ".git" / "hooks", marker)
    return ("commit", "-q", "-a", "-m", "control")


def hooks_path(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    write_hooks(tmp / "evil-hooks", marker)
    git(repo, "config", "core.hooksPath", str(tmp / "evil-hooks"))
    return ("commit", "-q", "-a", "-m", "control")


def signing(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    program = tmp / "evil-gpg"  # run directly, not through the shell
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    program.chmod(0o755)
    for key in ("gpg.program", "gpg.openpgp.program", "gpg.ssh.program", "gpg.x509.program"):
        git(repo, "config", key, str(program))
    git(repo, "config", "commit.gpgSign", "true")
    git(repo, "config", "log.showSignature", "true")
    return ("commit", "-q", "-a", "-m", "control")


def editors(repo: Path, marker: Path, tmp: Path) -> tuple[str, ...]:
    git(repo, "config", "core.editor", evil_command(marker))
    git(repo, "config", "sequence.editor", evil_command(marker))
    return ("commit", "-q", "-a")


def network_helpers(repo: Path, marker: Path, tmp: Path) -> None:
    git(repo, "config", "core.sshCommand", evil_command(marker))
    git(repo, "config", "credential.helper", f"!{evil_command(marker)}")
    git(repo, "config", "core.askPass", evil_command(marker))
    git(repo, "config", "core.untrackedCache", "true")
    git(repo, "config", "remote.origin.url", "ssh://git@127.0.0.1:9/x")
    git(repo, "config", "remote.origin.promisor", "true")
    return None  # noqa: RET501 - these need a remote to be live


ATTACKS: dict[str, Setup] = {
    "fsmonitor": fsmonitor,
    "pagers": pagers,
    "external_diff": external_diff,
    "diff_driver_command": diff_driver_command,
    "textconv": textconv,
    "clean_smudge_filter": clean_smudge_filter,
    "process_filter": process_filter,
    "included_filter": included_filter,
    "weird_driver_name": weird_driver_name,
    "binary_driver_name": binary_driver_name,
    "submodule_config": submodule_config,
    "hooks": hooks,
    "hooks_path": hooks_path,
    "signing": signing,
    "editors": editors,
    "network_helpers": network_helpers,
}


async def use_every_tool(repo: Path, marker: Path) -> None:
    """Every tool, on changed, new and staged files: none may leave the marker."""
    (repo / "README.md").write_text("changed\n")
    (repo / "new.md").write_text("new\n")
    (repo / "staged.md").write_text("staged\n")
    git(
        repo,
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "filter.evil.required=false",
        "add",
        "staged.md",
    )
    marker.unlink(missing_ok=True)  # the setup's own git call is not under test
    status = (await GitStatusTool(root=repo).run()).content
    assert "README.md" in status
    assert "new.md" in status
    assert (await GitDiffTool(root=repo).run()).content.startswith("diff --git a/README.md")
    assert "staged.md" in (await GitDiffTool(root=repo).run(staged=True)).content
    assert "README.md" in (await GitDiffTool(root=repo).run(paths=["README.md"])).content
    assert "Initial commit" in (await GitLogTool(root=repo).run()).content
    await GitLogTool(root=repo).run(path="README.md")
    result = await GitCommitTool(root=repo).run(files=["README.md", "new.md"], message="Change")
    assert "Change" in result.content
    assert git(repo, "log", "-1", "--format=%s").strip() == "Change"
    assert not marker.exists(), "a program named by the repository ran"


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_nothing_the_repository_names_runs(repo: Path, tmp_path: Path, attack: str) -> None:
    marker = tmp_path / "marker"
    control = ATTACKS[attack](repo, marker, tmp_path)
    await use_every_tool(repo, marker)
    if control is not None:  # the same repository does run the program for plain git
        (repo / "README.md").write_text("control\n")
        plain_git(repo, *control)
        assert marker.exists(), f"the attack is not live: git {' '.join(control)} ran nothing"


async def test_the_hosts_own_filters_still_run_without_secrets(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A filter in the host's global config (how Git LFS installs itself) is the host's choice;
    # the repository cannot replace its command, and it runs without the host's secrets.
    dump = tmp_path / "filter-env"
    marker = tmp_path / "marker"
    Path(os.environ["GIT_CONFIG_GLOBAL"]).write_text(
        f'[filter "host"]\n\tclean = "env > \'{dump}\'; cat"\n'
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-hostsecret0123456789abcdef")
    monkeypatch.setenv("FANLOOP_TEST_PLAIN", "plain-value")
    attributes(repo, "*.txt filter=host")
    dump.unlink(missing_ok=True)
    (repo / "a.txt").write_text("a\n")
    await GitCommitTool(root=repo).run(files=["a.txt"], message="Add a")
    env = dump.read_text()
    assert "FANLOOP_TEST_PLAIN=plain-value" in env
    assert "hostsecret" not in env
    git(repo, "config", "filter.host.clean", evil_command(marker))
    dump.unlink()
    (repo / "b.txt").write_text("b\n")
    await GitCommitTool(root=repo).run(files=["b.txt"], message="Add b")
    assert dump.exists()
    assert not marker.exists()


# -- the repository stays inside the workspace ---------------------------------------------


def make_other_repo(tmp_path: Path) -> Path:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "trunk")
    (other / "private.txt").write_text("other's data\n")
    git(other, "add", "private.txt")
    git(other, "-c", "user.name=O", "-c", "user.email=o@x.invalid", "commit", "-q", "-m", "Other's")
    return other


async def test_a_gitdir_file_pointing_elsewhere_is_refused(ws: Path, tmp_path: Path) -> None:
    other = make_other_repo(tmp_path)
    (ws / ".git").write_text(f"gitdir: {other / '.git'}\n")
    (ws / "x.txt").write_text("x\n")
    for tool, kwargs in (
        (GitStatusTool(root=ws), {}),
        (GitDiffTool(root=ws), {}),
        (GitLogTool(root=ws), {}),
        (GitCommitTool(root=ws), {"files": ["x.txt"], "message": "m"}),
    ):
        with pytest.raises(ToolError, match=r"\.git points to a git directory outside"):
            await tool.run(**kwargs)
    assert git(other, "log", "--format=%s").strip() == "Other's"


async def test_a_git_symlink_pointing_elsewhere_is_refused(ws: Path, tmp_path: Path) -> None:
    other = make_other_repo(tmp_path)
    (ws / ".git").symlink_to(other / ".git")
    with pytest.raises(ToolError, match="outside the workspace"):
        await GitLogTool(root=ws).run()


async def test_a_linked_worktree_needs_allow_external_git_dir(repo: Path, tmp_path: Path) -> None:
    worktree = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(worktree))
    with pytest.raises(ToolError, match="outside the workspace"):
        await GitStatusTool(root=worktree).run()
    assert (await GitStatusTool(root=worktree, allow_external_git_dir=True).run()).content == (
        "## feature\n"
    )


@pytest.mark.parametrize("how", ["alternates", "ref_link", "head_link", "index_link"])
async def test_a_git_dir_borrowing_from_outside_is_refused(
    repo: Path, tmp_path: Path, how: str
) -> None:
    other = make_other_repo(tmp_path)
    dot_git = repo / ".git"
    if how == "alternates":
        (dot_git / "objects" / "info" / "alternates").write_text(f"{other / '.git' / 'objects'}\n")
    elif how == "ref_link":
        (dot_git / "refs" / "heads" / "main").unlink()
        (dot_git / "refs" / "heads" / "main").symlink_to(
            other / ".git" / "refs" / "heads" / "trunk"
        )
    elif how == "head_link":
        (dot_git / "HEAD").unlink()
        (dot_git / "HEAD").symlink_to(other / ".git" / "HEAD")
    else:
        (dot_git / "index").unlink()
        (dot_git / "index").symlink_to(other / ".git" / "index")
    for tool, kwargs in (
        (GitLogTool(root=repo), {}),
        (GitDiffTool(root=repo), {"staged": True}),
        (GitStatusTool(root=repo), {}),
    ):
        # (git itself refuses a HEAD that is a link to a file)
        with pytest.raises(ToolError, match=r"outside the workspace|not a git repository"):
            await tool.run(**kwargs)


async def test_core_worktree_outside_the_workspace_is_refused(repo: Path, tmp_path: Path) -> None:
    git(repo, "config", "core.worktree", str(tmp_path / "outside"))
    with pytest.raises(ToolError, match="does not contain the workspace"):
        await GitStatusTool(root=repo).run()
    with pytest.raises(ToolError, match="does not contain the workspace"):
        await GitCommitTool(root=repo).run(files=["README.md"], message="m")


async def test_core_worktree_above_the_workspace_is_limited_to_it(
    repo: Path, tmp_path: Path
) -> None:
    git(repo, "config", "core.worktree", str(tmp_path))  # holds outside/secret.txt
    status = (await GitStatusTool(root=repo).run()).content
    assert "secret" not in status
    assert "outside" not in status


async def test_host_git_variables_do_not_redirect_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = make_other_repo(tmp_path)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='touch {tmp_path}/m'")
    assert (await GitLogTool(root=repo).run()).content.endswith(": Initial commit\n")
    assert (await GitStatusTool(root=repo).run()).content == "## main\n"
    assert not (tmp_path / "m").exists()


async def test_a_bare_repository_as_workspace_is_refused(ws: Path) -> None:
    git(ws, "init", "-q", "--bare", ".")
    with pytest.raises(ToolError, match="git status failed"):
        await GitStatusTool(root=ws).run()


# -- a workspace inside a bigger repository -------------------------------------------------


@pytest.fixture
def nested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository ``big`` whose subdirectory ``big/ws`` is the workspace; returns ``big``."""
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "Test Author")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@example.invalid")
    big = tmp_path / "big"
    (big / "ws").mkdir(parents=True)
    git(big, "init", "-q", "-b", "main")
    (big / "top.txt").write_text("top\n")
    (big / "ws" / "inner.txt").write_text("inner\n")
    git(big, "add", ".")
    git(big, "commit", "-q", "-m", "Both")
    (big / "top.txt").write_text("top, changed: not the workspace's\n")
    (big / "top-new.txt").write_text("untracked outside\n")
    (big / "other-commit.txt").write_text("o\n")
    git(big, "add", "other-commit.txt")
    git(big, "commit", "-q", "-m", "Outside only")
    return big


async def test_status_diff_and_log_see_only_the_workspace(nested: Path) -> None:
    ws = nested / "ws"
    assert (await GitStatusTool(root=ws).run()).content == "## main\n"
    assert (await GitDiffTool(root=ws).run()).content == "(no unstaged changes)"
    log = (await GitLogTool(root=ws).run()).content
    assert log.endswith(": Both\n")
    assert "Outside only" not in log
    (ws / "inner.txt").write_text("inner, changed\n")
    (ws / "fresh.txt").write_text("f\n")
    assert (await GitStatusTool(root=ws).run()).content == ("## main\n M inner.txt\n?? fresh.txt\n")
    diff = (await GitDiffTool(root=ws).run()).content
    assert diff.startswith("diff --git a/inner.txt b/inner.txt\n")
    assert "top" not in diff


@pytest.mark.parametrize(
    "path",
    [
        ":(top)top.txt",
        ":/top.txt",
        ":/",
        ":(top)",
        ":(glob)**/top.txt",
        ":(icase)TOP.TXT",
        ":!inner.txt",
        ":(attr:-x)top.txt",
        ":(literal)../top.txt",
        "../top.txt",
        "*",
        "--all",
        "-a",
    ],
)
async def test_path_magic_and_options_never_reach_outside(nested: Path, path: str) -> None:
    ws = nested / "ws"
    (ws / "inner.txt").write_text("inner, changed\n")
    head = git(nested, "rev-parse", "HEAD").strip()
    with contextlib.suppress(ToolError):
        await GitCommitTool(root=ws).run(files=[path, "inner.txt"], message="m")
    changed = git(nested, "diff", "--name-only", head, "HEAD").split()
    assert "top.txt" not in changed
    assert "top-new.txt" not in changed
    assert set(changed) <= {"ws/inner.txt"}
    try:
        diff = (await GitDiffTool(root=ws).run(paths=[path])).content
    except ToolError:
        diff = ""
    assert "top" not in diff
    try:
        log = (await GitLogTool(root=ws).run(path=path)).content
    except ToolError:
        log = ""
    assert "Outside only" not in log


async def test_commit_commits_only_workspace_files(nested: Path) -> None:
    ws = nested / "ws"
    git(nested, "add", "top.txt")  # staged outside the workspace, must stay out
    (ws / "inner.txt").write_text("inner, changed\n")
    result = await GitCommitTool(root=ws).run(files=["."], message="Workspace only")
    assert result.metadata is not None
    assert git(nested, "show", "--name-only", "--format=", "HEAD").split() == ["ws/inner.txt"]
    assert git(nested, "status", "--porcelain=v1", "--", "top.txt") == "M  top.txt\n"


async def test_options_as_paths_are_paths(repo: Path, tmp_path: Path) -> None:
    target = tmp_path / "written-by-git"
    for path in (f"--output={target}", "--ext-diff", "-p"):
        assert (await GitDiffTool(root=repo).run(paths=[path])).content == ("(no unstaged changes)")
        assert (await GitLogTool(root=repo).run(path=path)).content == "(no commits)"
    assert not target.exists()
    with pytest.raises(ToolError, match="did not match any files"):
        await GitCommitTool(root=repo).run(files=["--all"], message="--amend")
    message = "--amend\n\n-m x"
    (repo / "README.md").write_text("changed\n")
    await GitCommitTool(root=repo).run(files=["README.md"], message=message)
    assert git(repo, "log", "-1", "--format=%B").strip() == message
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"


async def test_hostile_messages_and_file_lists(repo: Path) -> None:
    tool = GitCommitTool(root=repo)
    with pytest.raises(ToolError, match="NUL byte"):
        await tool.run(files=["README.md"], message="a\x00b")
    with pytest.raises(ToolError, match="too long"):
        await tool.run(files=["README.md"], message="x" * 200_000)
    with pytest.raises(ToolError, match="Too many files"):
        await tool.run(files=[f"f{i}" for i in range(5000)], message="m")
    with pytest.raises(ToolError, match="NUL byte"):
        await GitDiffTool(root=repo).run(paths=["a\x00b"])


async def test_status_paths_are_quoted_like_git(repo: Path) -> None:
    (repo / 'quo"te').write_text("q\n")
    (repo / "new\nline").write_text("n\n")
    (repo / "ünï cödé").write_text("u\n")
    git(repo, "mv", "README.md", "READ ME.md")
    assert (await GitStatusTool(root=repo).run()).content == (
        '## main\nR  README.md -> "READ ME.md"\n?? "new\\nline"\n?? "quo\\"te"\n?? "ünï cödé"\n'
    )
