"""The file tools against a hostile model and hostile files (issue #10).

Catastrophic patterns, huge trees, symbolic links out and in loops, links swapped in between
the check and the open, and huge files: every case ends within the tool's timeout or the run's
deadline, keeps the event loop ticking, never touches a file outside the workspace, and keeps
memory within the tools' caps.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import pytest
import regex

from fanloop import Agent, Limits, TerminationReason
from fanloop.errors import ToolError
from fanloop.messages import ToolResultPart
from fanloop.testing import ScriptedProvider, call, reply
from fanloop.tools import (
    DeleteFileTool,
    EditFileTool,
    GlobTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    Tool,
    WriteFileTool,
    _grep,
)
from fanloop.tools._blocking import Stop
from fanloop.tools._fsafe import Budget, walk
from heartbeat import Stopwatch, cpu_seconds, heartbeat

SECRET = "top secret\n"


def results(messages: tuple[object, ...]) -> list[ToolResultPart]:
    return [
        part
        for message in messages
        for part in getattr(message, "content", ())
        if isinstance(part, ToolResultPart)
    ]


async def run_one(tool: Tool, limits: Limits | None = None, **arguments: Any) -> tuple[Any, float]:
    """One scripted call of ``tool`` in a real agent run; the run and its duration (the
    process's own: what a busy machine adds is left out, see ``heartbeat.Stopwatch``)."""
    model = ScriptedProvider([reply(tool_calls=[call(tool.name, **arguments)]), "Done."])
    watch = Stopwatch()
    result = await Agent(model, tools=[tool], limits=limits or Limits()).run("go")
    return result, watch.own


# -- catastrophic patterns -----------------------------------------------------------------

CATASTROPHIC = [
    ("(a|aa)+$", "a" * 60 + "b"),  # exponential even for the regex engine
    ("(a+)+$", "a" * 40 + "b"),
    ("(x+x+)+y", "x" * 40),
    ("^(\\w+\\s?)*$", "word " * 12 + "!"),
]


@pytest.mark.parametrize(("pattern", "line"), CATASTROPHIC)
async def test_a_catastrophic_pattern_ends_with_the_tool_timeout(
    ws: Path, pattern: str, line: str
) -> None:
    (ws / "hostile.txt").write_text((line + "\n") * 200)
    grep = GrepTool(root=ws)
    grep.timeout = 1.0
    async with heartbeat() as beat:
        result, took = await run_one(grep, pattern=pattern)
    assert beat.max_stall < 0.1, beat
    assert took < 2.5
    assert result.termination_reason == TerminationReason.COMPLETED
    (answer,) = results(result.messages)
    if pattern == "(a|aa)+$":
        assert "timed out" in answer.content


async def test_the_search_gives_its_partial_matches_marked(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "a.txt").write_text("needle aab\n" * 3 + ("a" * 60 + "b\n") * 100)
    monkeypatch.setattr(_grep, "_LINE_SECONDS", 0.1)  # the time one search of a line may take
    with anyio.fail_after(5):
        text = (await GrepTool(root=ws).run(pattern="needle|(a|aa)+$")).content
    assert text.startswith("a.txt:1: needle aab\na.txt:2: needle aab\na.txt:3: needle aab\n")
    assert "the search stopped: the pattern took over 0.1 s on each of 5 lines" in text
    monkeypatch.setattr(_grep, "_MAX_SLOW_LINES", 10**6)  # hopeless lines are skipped on
    started = time.monotonic()
    with anyio.fail_after(2.0):  # a caller deadline: the partial result comes back before it
        text = (await GrepTool(root=ws).run(pattern="needle|(a|aa)+$")).content
    assert time.monotonic() - started < 2.0
    assert "a.txt:1: needle aab" in text
    assert "timed out" in text
    assert "the matches shown are partial" in text


async def test_a_catastrophic_pattern_ends_with_the_run_deadline(ws: Path) -> None:
    (ws / "hostile.txt").write_text(("a" * 60 + "b\n") * 500)
    async with heartbeat() as beat:
        result, took = await run_one(
            GrepTool(root=ws, time_budget=60), Limits(timeout=1.0), pattern="(a|aa)+$"
        )
    assert beat.max_stall < 0.1, beat
    assert took < 2.5
    if result.termination_reason == TerminationReason.COMPLETED:  # it answered just in time
        assert "timed out" in results(result.messages)[0].content
    else:
        assert result.termination_reason == TerminationReason.DEADLINE


class SignallingStop(Stop):
    """A stop that tells when the work first looked at it."""

    def __init__(self) -> None:
        super().__init__()
        self.looked = threading.Event()

    @property
    def stopped(self) -> bool:
        self.looked.set()
        return super().stopped


def test_a_stopped_search_ends_soon(ws: Path) -> None:
    """The worker thread itself ends soon after its caller gives up (not only the caller)."""
    (ws / "hostile.txt").write_text(("a" * 60 + "b\n") * 100)
    stop = SignallingStop()
    done = threading.Event()
    tool = GrepTool(time_budget=60)
    watch: list[Stopwatch] = []

    def search() -> None:
        try:
            tool._grep(stop, "(a|aa)+$", False, ".", ws.resolve(), None, 10)
        finally:
            watch[0].mark()  # this thread's waits for a CPU, read while it lives
            done.set()

    thread = threading.Thread(target=search)
    thread.start()
    assert stop.looked.wait(10)  # the search has started its hopeless work
    watch.append(Stopwatch())
    stop.set()
    assert done.wait(10)  # left running, the search would go on for its 60 s budget
    assert watch[0].own < 1.5, watch  # one search of a line: 0.5 s at most
    thread.join()


@pytest.mark.parametrize(
    "pattern",
    ["a{4294967294}", "(?:a{1000}){1000}", "(?:(?:x{50}){100}y){100}", "(?:a|b){20000}"],
)
async def test_patterns_that_would_compile_huge_are_refused(ws: Path, pattern: str) -> None:
    (ws / "a.txt").write_text("a\n")
    with pytest.raises(ToolError, match="repeats too much"):
        await GrepTool(root=ws).run(pattern=pattern)


async def test_long_and_unsupported_patterns_are_refused(ws: Path) -> None:
    grep = GrepTool(root=ws)
    with pytest.raises(ToolError, match="at most 1,000 are allowed"):
        await grep.run(pattern="a" * 1001)
    with pytest.raises(ToolError, match="verbose mode"):
        await grep.run(pattern="(?x)a # comment")
    with pytest.raises(ToolError, match="nests groups"):
        await grep.run(pattern="(" * 150 + "a" + ")" * 150)
    with pytest.raises(ToolError, match="at most 1,000 are allowed"):
        await GlobTool(root=ws).run(pattern="*" * 1001)
    with pytest.raises(ToolError, match="more than 64 path components"):
        await GlobTool(root=ws).run(pattern="*/" * 100)
    (ws / "a").mkdir()
    (ws / "a" / "b.py").write_text("")
    assert (await GlobTool(root=ws).run(pattern="**/" * 300 + "*.py")).content == "a/b.py"


async def test_grep_keeps_its_semantics_on_the_new_engine(ws: Path) -> None:
    (ws / "a.txt").write_text("alpha\r\nbeta gamma\n\nALPHA\nend")
    grep = GrepTool(root=ws)
    assert (await grep.run(pattern="^a")).content == "a.txt:1: alpha"
    assert (await grep.run(pattern="a$")).content == "a.txt:1: alpha\na.txt:2: beta gamma"
    assert (await grep.run(pattern="^$")).content == "a.txt:3: "
    assert (await grep.run(pattern=r"\Aend\Z")).content == "a.txt:5: end"
    assert (await grep.run(pattern="(?<=beta )gam")).content == "a.txt:2: beta gamma"
    assert (await grep.run(pattern="alpha", ignore_case=True)).content == (
        "a.txt:1: alpha\na.txt:4: ALPHA"
    )
    assert (await grep.run(pattern="a\nb")).content.startswith("No matches")  # line by line


@pytest.mark.parametrize(
    "pattern",
    [
        "foo",
        "^b",
        "a$",
        r"\d{3}",
        "x|y$",
        "^$",
        "(?i)FOO",
        r"\bq\w*",
        "z\\s",
        ".{70}",
        "(?<=a )b",
        r"o\Z",
    ],
)
async def test_grep_finds_what_a_line_by_line_search_finds(ws: Path, pattern: str) -> None:
    """Blocks of lines are tried at once first: the lines found are exactly those of a plain
    line-by-line search, over block boundaries, CRLF endings and long lines."""
    rng = random.Random(pattern)
    words = ["foo", "bar", "baz", "qux", "x", "y", "a", "b", "123", "FOO", "", "z "]
    lines = [
        " ".join(rng.choice(words) for _ in range(rng.randrange(0, 30))) for _ in range(12_000)
    ]
    ends = ["\n", "\r\n"]
    (ws / "f.txt").write_text("".join(line + rng.choice(ends) for line in lines), newline="")
    rx = regex.compile(pattern)
    expected = [i for i, line in enumerate(lines, 1) if rx.search(line)]
    grep = GrepTool(root=ws, max_chars=10**8, max_matches=10**6)
    text = (await grep.run(pattern=pattern)).content
    found = [int(row.split(":")[1]) for row in text.splitlines() if row.startswith("f.txt:")]
    assert found == expected


# -- walks: huge trees, links out, loops -----------------------------------------------------


async def test_glob_over_a_huge_tree_ends_with_the_tool_timeout() -> None:
    glob = GlobTool(root="/", max_visited=10**9, max_results=10)
    glob.timeout = 0.5
    async with heartbeat() as beat:
        result, took = await run_one(glob, pattern="**/no-such-name-*.zzz")
    assert beat.max_stall < 0.1, beat
    assert took < 2.0
    (answer,) = results(result.messages)
    assert "timed out" in answer.content


async def test_grep_over_a_huge_tree_ends_with_the_run_deadline() -> None:
    grep = GrepTool(root="/usr", max_visited=10**9, time_budget=60)
    async with heartbeat() as beat:
        _, took = await run_one(grep, Limits(timeout=1.0), pattern="no such text: zq9x")
    assert beat.max_stall < 0.1, beat
    assert took < 2.5


async def test_walks_visit_a_bounded_number_of_entries(ws: Path) -> None:
    for i in range(60):
        (ws / f"f{i:02d}.txt").write_text("hit\n")
    text = (await GlobTool(root=ws, max_visited=20).run(pattern="*.txt")).content
    assert text.endswith("[stopped after visiting 20 entries; the results are incomplete]")
    text = (await GrepTool(root=ws, max_visited=20).run(pattern="hit")).content
    assert text.endswith("[stopped after visiting 20 entries; the results are incomplete]")
    text = (await ListDirTool(root=ws, max_visited=20, max_entries=5).run()).content
    assert text.endswith("[listing cut at 5 of more than 20 entries]")


def test_a_walk_checks_its_stop_between_entries(ws: Path) -> None:
    for i in range(50):
        (ws / f"d{i}").mkdir()
    stop = Stop()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        budget = Budget(stop)
        seen = 0
        for _ in walk(fd, budget):
            seen += 1
            stop.set()
        assert seen == 1
        assert budget.reason == "stopped"
    finally:
        os.close(fd)


@pytest.fixture
def linked(ws: Path, tmp_path: Path) -> Path:
    """A workspace with links out (to a directory, to a file, to /usr), links in, and loops."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir()
    (outside / "deep" / "leak.py").write_text("needle outside\n")
    (ws / "src").mkdir()
    (ws / "src" / "mod.py").write_text("needle inside\n")
    (ws / "out_dir").symlink_to(outside)
    (ws / "out_file.py").symlink_to(outside / "deep" / "leak.py")
    (ws / "usr").symlink_to("/usr")
    (ws / "alias.py").symlink_to("src/mod.py")
    (ws / "src_again").symlink_to("src")
    (ws / "loop").symlink_to("loop")
    (ws / "ring_a").symlink_to("ring_b")
    (ws / "ring_b").symlink_to("ring_a")
    (ws / "src" / "up").symlink_to("..")
    return ws


async def test_glob_stays_inside_and_survives_loops(linked: Path) -> None:
    text = (await GlobTool(root=linked).run(pattern="**/*")).content
    assert text.splitlines() == [
        "alias.py",
        "loop",  # a loop is inside, and it is only a name
        "ring_a",
        "ring_b",
        "src/",
        "src/mod.py",
        "src/up/",  # links in are listed, never entered
        "src_again/",
    ]
    assert (await GlobTool(root=linked).run(pattern="usr/**/*")).content.startswith("No files")
    text = (await GlobTool(root=linked).run(pattern="**/*.py")).content
    assert text == "alias.py\nsrc/mod.py"


async def test_grep_stays_inside_and_survives_loops(linked: Path) -> None:
    text = (await GrepTool(root=linked).run(pattern="needle")).content
    assert text == "alias.py:1: needle inside\nsrc/mod.py:1: needle inside"
    with pytest.raises(ToolError, match="outside the workspace"):
        await GrepTool(root=linked).run(pattern="needle", path="out_dir")
    with pytest.raises(ToolError, match="Cannot resolve"):
        await GrepTool(root=linked).run(pattern="needle", path="loop")


async def test_list_dir_shows_links_without_following(linked: Path) -> None:
    text = (await ListDirTool(root=linked).run()).content
    assert "  out_dir -> " in text
    assert "  usr -> /usr" in text
    assert len(text.splitlines()) == 1 + len(os.listdir(linked))  # nothing from beyond a link


# -- links swapped in between the check and the open --------------------------------------


@contextmanager
def swapping(swap: Callable[[], None]) -> Iterator[None]:
    """Run ``swap`` over and over in a thread, with fine-grained thread switching."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with suppress(OSError):
                swap()

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(before)


def file_swapper(ws: Path, outside_file: Path) -> Callable[[], None]:
    """``ws/f`` becomes a symbolic link to ``outside_file``, then a real file, and so on."""

    def swap() -> None:
        tmp = ws / ".swap"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(outside_file)
        os.replace(tmp, ws / "f")
        tmp.write_text("inside f\n")
        os.replace(tmp, ws / "f")

    return swap


def dir_swapper(ws: Path, outside_dir: Path) -> Callable[[], None]:
    """``ws/d`` becomes a symbolic link to ``outside_dir``, then the real directory again."""
    (ws / "d.link").symlink_to(outside_dir)

    def swap() -> None:
        os.rename(ws / "d", ws / "d.real")
        os.rename(ws / "d.link", ws / "d")
        os.rename(ws / "d", ws / "d.link")
        os.rename(ws / "d.real", ws / "d")

    return swap


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """An outside directory holding ``x.txt`` and ``secret.txt``."""
    outside = tmp_path / "outside"
    (outside / "x.txt").write_text(SECRET)
    return outside


def outside_state(outside: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(outside.iterdir())}


async def attempt(fn: Any, **kwargs: Any) -> str:
    try:
        return str((await fn(**kwargs)).content)
    except ToolError as exc:
        return str(exc)


async def test_reads_never_follow_a_link_swapped_in(ws: Path, target: Path) -> None:
    (ws / "f").write_text("inside f\n")
    (ws / "d").mkdir()
    (ws / "d" / "x.txt").write_text("inside x\n")
    read = ReadFileTool(root=ws, read_cache=False)
    grep = GrepTool(root=ws)
    seen: list[str] = []
    with swapping(file_swapper(ws, target / "secret.txt")):
        for _ in range(150):
            seen.append(await attempt(read.run, path="f"))
            seen.append(await attempt(grep.run, pattern="secret|inside"))
    with swapping(dir_swapper(ws, target)):
        for _ in range(150):
            seen.append(await attempt(read.run, path="d/x.txt"))
            seen.append(await attempt(grep.run, pattern="secret|inside", path="d"))
    assert not [s for s in seen if "top secret" in s]
    assert {"inside f\n", "inside x\n"} <= set(seen)  # the race was run, not always refused


async def test_writes_never_follow_a_link_swapped_in(ws: Path, target: Path) -> None:
    (ws / "f").write_text("inside f\n")
    (ws / "d").mkdir()
    (ws / "d" / "x.txt").write_text("inside x\n")
    before = outside_state(target)
    write = WriteFileTool(root=ws, read_cache=False)
    edit = EditFileTool(root=ws, read_cache=False)
    delete = DeleteFileTool(root=ws, read_cache=False)
    with swapping(file_swapper(ws, target / "secret.txt")):
        for i in range(100):
            await attempt(write.run, path="f", content=f"written {i}\n")
            await attempt(edit.run, path="f", old_string="top", new_string="HACKED")
    with swapping(dir_swapper(ws, target)):
        for i in range(100):
            await attempt(write.run, path="d/x.txt", content=f"written {i}\n")
            await attempt(write.run, path="d/new.txt", content="new\n")
            await attempt(edit.run, path="d/x.txt", old_string="top", new_string="HACKED")
            await attempt(delete.run, path="d/x.txt")
            await attempt(delete.run, path="d/new.txt")
    assert outside_state(target) == before


# -- delete_file and links -----------------------------------------------------------------


async def test_delete_removes_links_never_their_targets(ws: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    (ws / "inside.txt").write_text("keep\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "out").symlink_to(secret)
    (ws / "to_inside").symlink_to("inside.txt")
    (ws / "dangling").symlink_to(tmp_path / "nowhere")
    (ws / "to_dir").symlink_to(tmp_path / "outside")
    delete = DeleteFileTool(root=ws, read_cache=False)
    with pytest.raises(ToolError, match="outside the workspace"):
        await delete.run(path="to_dir/secret.txt")  # through the link: outside
    for name in ("sub/out", "to_inside", "dangling", "to_dir"):
        assert delete.preview(path=name).startswith(f"delete the symbolic link {name} -> ")
        assert (await delete.run(path=name)).content == f"Deleted {name}."
        assert not (ws / name).is_symlink()
    assert secret.read_text() == SECRET
    assert (ws / "inside.txt").read_text() == "keep\n"
    assert (tmp_path / "outside").is_dir()
    with pytest.raises(ToolError, match="workspace root itself"):
        await delete.run(path="sub/..")


async def test_writes_replace_hard_links_instead_of_writing_through(
    ws: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    os.link(secret, ws / "hard")
    (ws / "hard").chmod(0o640)
    await WriteFileTool(root=ws, read_cache=False).run(path="hard", content="mine\n")
    os.link(secret, ws / "hard2")
    await EditFileTool(root=ws, read_cache=False).run(
        path="hard2", old_string="top", new_string="my"
    )
    assert secret.read_text() == SECRET
    assert (ws / "hard").read_text() == "mine\n"
    assert (ws / "hard").stat().st_mode & 0o777 == 0o640  # the permission bits carry over
    assert (ws / "hard2").read_text() == "my secret\n"
    assert sorted(p.name for p in ws.iterdir()) == ["hard", "hard2"]  # no temporary left


# -- memory: huge files and lines ------------------------------------------------------------


def one_line_file(path: Path, megabytes: int) -> None:
    """A file of one line of ``megabytes`` MB, written in a few large writes."""
    chunk = b"x" * (8 << 20)
    with path.open("wb") as fh:
        for _ in range(megabytes // 8):
            fh.write(chunk)
        fh.write(b"\nsecond line needle\n")


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    """The peak of Python allocations in the block (all threads), in bytes."""
    out: list[int] = []
    tracemalloc.start()
    try:
        yield out
        out.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


async def test_read_file_of_a_huge_line_stays_small(ws: Path) -> None:
    one_line_file(ws / "big.txt", 200)
    read = ReadFileTool(root=ws, read_cache=False)
    with peak_memory() as peak:
        whole = (await read.run(path="big.txt")).content
        ranged = (await read.run(path="big.txt", offset=1, limit=1)).content
        second = (await read.run(path="big.txt", offset=2)).content
    assert peak[0] < 4_000_000, peak  # the old code held the 200 MB line several times over
    assert whole.startswith("x" * 50_000 + "\n[lines 1-1 of 2 in big.txt; output cut at 50,000")
    assert ranged.startswith("x" * 50_000 + "\n[lines 1-1 of 2")
    assert second == "second line needle\n[lines 2-2 of 2 in big.txt]"


async def test_grep_of_a_huge_line_stays_small(ws: Path) -> None:
    one_line_file(ws / "big.txt", 200)
    grep = GrepTool(root=ws, max_file_bytes=1 << 30)
    with peak_memory() as peak:
        text = (await grep.run(pattern="needle")).content
    assert peak[0] < 16_000_000, peak
    assert text == (
        "big.txt:2: second line needle\n"
        "[1 line longer than 1,000,000 bytes searched in their start only]"
    )
    text = (await GrepTool(root=ws).run(pattern="needle")).content
    assert text.startswith("No matches for /needle/ in 0 files searched.")
    assert "1 file over 5,000,000 bytes skipped" in text


async def test_edit_file_refuses_a_file_over_its_cap(ws: Path) -> None:
    one_line_file(ws / "big.txt", 16)
    edit = EditFileTool(root=ws, read_cache=False, max_file_bytes=1_000_000)
    with peak_memory() as peak, pytest.raises(ToolError, match="edits files up to 1,000,000"):
        await edit.run(path="big.txt", old_string="needle", new_string="pin")
    assert peak[0] < 2_000_000, peak
    assert "would fail" in edit.preview(path="big.txt", old_string="needle", new_string="pin")
    (ws / "small.txt").write_text("a\n" * 1000)
    with pytest.raises(ToolError, match="over the 1,000,000 edit_file allows"):
        await edit.run(path="small.txt", old_string="a", new_string="b" * 2000, replace_all=True)


def test_previews_stay_fast_on_hostile_content(ws: Path) -> None:
    """Previews run on the event loop: a diff that difflib would take a minute on is bounded."""
    (ws / "rep.txt").write_text("".join(f"{i % 150}\n" for i in range(20_000)))
    content = "".join(f"{(i * 7) % 150}\n" for i in range(20_000))
    write = WriteFileTool(root=ws, read_cache=False)
    assert cpu_seconds(lambda: write.preview(path="rep.txt", content=content)) < 0.5
    preview = write.preview(path="rep.txt", content=content)
    assert preview.startswith("--- a/rep.txt\n+++ b/rep.txt\n@@ -1,20000 +1,20000 @@\n")
    assert preview.endswith("[diff cut at 20,000 characters]\n")
    (ws / "same.txt").write_text("x\n" * 100_000)
    edit = EditFileTool(root=ws, read_cache=False)
    missing = {"path": "same.txt", "old_string": "x\n" * 5000 + "y", "new_string": "z"}
    assert cpu_seconds(lambda: edit.preview(**missing)) < 0.5
    assert "old_string was not found" in edit.preview(**missing)


# -- the workspace root and the read cache -------------------------------------------------


async def test_the_default_root_is_the_cwd_at_call_time(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "a.txt").write_text("in ws\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("in other\n")
    read = ReadFileTool(read_cache=False)
    monkeypatch.chdir(ws)
    assert (await read.run(path="a.txt")).content == "in ws\n"
    monkeypatch.chdir(other)
    assert (await read.run(path="a.txt")).content == "in other\n"
    await WriteFileTool(read_cache=False).run(path="b/c.txt", content="c\n")
    assert (other / "b" / "c.txt").read_text() == "c\n"
    assert (await GlobTool().run(pattern="**/*.txt")).content == "a.txt\nb/c.txt"
