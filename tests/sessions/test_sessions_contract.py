"""The SessionStore contract: every store (memory, SQLite, PostgreSQL) must pass every test here."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence

import anyio
import pytest

from fanloop.errors import FanloopError
from fanloop.messages import (
    Message,
    Origin,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from fanloop.sessions import (
    EffectClaim,
    EffectConflict,
    EffectReceipt,
    EffectStatus,
    Session,
    SessionConflict,
    SessionError,
    SessionNotFound,
    SessionStore,
    arguments_hash,
)

Reopen = Callable[[], Awaitable[SessionStore]]

CALL = ToolCallPart(id="call_1", name="write_file", arguments={"path": "a.txt", "text": "hi"})
RESULT = ToolResultPart(call_id="call_1", content="wrote 2 bytes")


def conversation() -> list[Message]:
    """A short conversation using every kind of part."""
    return [
        Message.user("write hi to a.txt"),
        Message(
            role="assistant",
            content=(ThinkingPart(text="easy", signature="sig=="), TextPart(text="ok"), CALL),
            origin=Origin(provider="anthropic", api="messages", model="m", raw={"id": "x"}),
        ),
        Message.tool_results([RESULT]),
        Message.assistant("done"),
    ]


async def fresh(reopen: Reopen, session_id: str) -> Session:
    """The session as a fresh store (another process) sees it."""
    return await (await reopen()).load(session_id)


def test_stores_implement_the_protocol(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)


async def test_open_creates_then_loads(store: SessionStore) -> None:
    session = await store.open("s1")
    assert session.id == "s1"
    assert session.messages == ()
    assert session.store is store
    await session.append(Message.user("hi"))

    again = await store.open("s1")
    assert again.messages == (Message.user("hi"),)
    assert (await store.load("s1")).messages == again.messages


async def test_open_without_id_makes_a_new_random_one(store: SessionStore) -> None:
    a, b = await store.open(), await store.open()
    assert a.id != b.id
    assert {a.id, b.id} <= {info.id for info in await store.list()}


async def test_empty_id_is_refused(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="empty"):
        await store.open_record("")


async def test_missing_session_raises_session_not_found(store: SessionStore) -> None:
    with pytest.raises(SessionNotFound) as caught:
        await store.load("nope")
    assert isinstance(caught.value, KeyError)
    assert isinstance(caught.value, FanloopError)
    assert caught.value.session_id == "nope"
    assert "nope" in str(caught.value)
    with pytest.raises(SessionNotFound):
        await store.delete("nope")
    with pytest.raises(SessionNotFound):
        await store.append_messages("nope", 0, [Message.user("x")])
    with pytest.raises(SessionNotFound):
        await store.get_receipt("nope", "c")


async def test_append_returns_indices_and_persists(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("s")
    indices = [await session.append(m) for m in conversation()]
    assert indices == [0, 1, 2, 3]
    assert session.messages == tuple(conversation())
    assert isinstance(session.messages, tuple)
    assert (await fresh(reopen, "s")).messages == tuple(conversation())


async def test_extend_appends_all(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("s")
    await session.append(Message.user("first"))
    await session.extend(conversation())
    await session.extend([])
    assert session.messages == (Message.user("first"), *conversation())
    assert (await fresh(reopen, "s")).messages == session.messages
    assert await session.append(Message.user("next")) == 5


async def test_a_stale_writer_gets_a_conflict_not_an_interleaving(store: SessionStore) -> None:
    one = await store.open("s")
    two = await store.open("s")
    await one.append(Message.user("from one"))
    with pytest.raises(SessionConflict) as caught:
        await two.append(Message.user("from two"))
    assert caught.value.session_id == "s"
    assert two.messages == ()
    await two.reload()
    assert await two.append(Message.user("from two")) == 1
    assert (await store.load("s")).messages == (Message.user("from one"), Message.user("from two"))


async def test_replace_swaps_the_whole_history(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("s")
    await session.extend(conversation())
    summary = [Message.user("summary of the earlier conversation"), Message.assistant("noted")]
    await session.replace(summary)
    assert session.messages == tuple(summary)
    assert await session.append(Message.user("go on")) == 2
    stored = await fresh(reopen, "s")
    assert stored.messages == (*summary, Message.user("go on"))
    assert [i.message_count for i in await store.list() if i.id == "s"] == [3]
    await session.replace([])
    assert (await fresh(reopen, "s")).messages == ()


async def test_metadata_merges_and_persists(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("s")
    await session.set_metadata(title="Support #42", tags=("a", "b"))
    await session.set_metadata(owner="kim")
    assert session.metadata == {"title": "Support #42", "tags": ["a", "b"], "owner": "kim"}
    session.metadata["title"] = "not persisted"
    assert session.metadata["title"] == "Support #42"
    await session.set_metadata(owner=None)
    assert (await fresh(reopen, "s")).metadata == {"title": "Support #42", "tags": ["a", "b"]}
    [info] = await store.list()
    assert info.title == "Support #42"
    with pytest.raises(TypeError):
        await session.set_metadata(bad=object())


async def test_list_is_newest_first_with_counts(store: SessionStore) -> None:
    old = await store.open("old")
    new = await store.open("new")
    await new.append(Message.user("x"))
    await old.extend([Message.user("a"), Message.user("b")])  # now the most recently updated
    await old.begin_effect(turn=1, call=CALL)
    infos = await store.list()
    assert [i.id for i in infos] == ["old", "new"]
    assert [i.message_count for i in infos] == [2, 1]
    assert [i.open_effects for i in infos] == [1, 0]
    assert [i.title for i in infos] == [None, None]
    assert infos[0].created_at <= infos[0].updated_at


async def test_delete_removes_messages_and_receipts(store: SessionStore) -> None:
    session = await store.open("s")
    await session.append(Message.user("x"))
    await session.begin_effect(turn=1, call=CALL)
    await store.open("other")
    await store.delete("s")
    assert [i.id for i in await store.list()] == ["other"]
    with pytest.raises(SessionNotFound):
        await store.load("s")
    with pytest.raises(SessionNotFound):
        await session.append(Message.user("y"))
    assert (await store.open("s")).messages == ()  # a new, empty session under the old id
    assert await (await store.load("s")).effects() == []


async def test_closed_store_refuses_work(store: SessionStore) -> None:
    await store.open("s")
    await store.aclose()
    with pytest.raises(SessionError, match="closed"):
        await store.open("s")


async def test_concurrent_appends_through_one_session_keep_every_message(
    store: SessionStore, reopen: Reopen
) -> None:
    session = await store.open("s")
    indices: list[int] = []

    async def add(i: int) -> None:
        indices.append(await session.append(Message.user(f"m{i}")))

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(add, i)
    assert sorted(indices) == list(range(30))
    stored = (await fresh(reopen, "s")).messages
    assert stored == session.messages
    assert sorted(m.text for m in stored) == sorted(f"m{i}" for i in range(30))


async def test_concurrent_runs_on_many_sessions(store: SessionStore, reopen: Reopen) -> None:
    async def run(name: str) -> None:
        session = await store.open(name)
        for i in range(15):
            await session.append(Message.user(f"{name}:{i}"))
        await session.begin_effect(turn=1, call=CALL)
        await session.commit_effect(CALL.id, RESULT)

    async with anyio.create_task_group() as tg:
        for n in range(12):
            tg.start_soon(run, f"s{n}")
    again = await reopen()
    for n in range(12):
        session = await again.load(f"s{n}")
        assert [m.text for m in session.messages] == [f"s{n}:{i}" for i in range(15)]
        assert [r.status for r in await session.effects()] == [EffectStatus.COMMITTED]


async def test_cancelled_append_still_lands_whole(store: SessionStore) -> None:
    """A caller cancelled mid-write never leaves the Session object out of step with the store."""
    entered, release = anyio.Event(), anyio.Event()

    class Slow:
        """A third-party-style store that wraps another and stalls one write."""

        def __init__(self, inner: SessionStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        async def append_messages(self, sid: str, start: int, messages: Sequence[Message]) -> None:
            entered.set()
            await release.wait()
            await self.inner.append_messages(sid, start, messages)

    session = Session(Slow(store), await store.open_record("s"))  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.append, Message.user("x"))
        await entered.wait()
        tg.cancel_scope.cancel()
        release.set()
    assert session.messages == (Message.user("x"),)
    assert (await store.load("s")).messages == session.messages
    assert await session.append(Message.user("y")) == 1


# -- tool-effect receipts ----------------------------------------------------------------


@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024], ids=["short", "staged"])
async def test_receipt_writes_return_what_the_store_holds(
    store: SessionStore, reopen: Reopen, size: int
) -> None:
    # Each write returns the receipt the store now holds: the one given when it was written,
    # else the one already there. A store that returned the given receipt without writing it
    # would let two workers both believe they won.
    await store.open("s")
    first = EffectReceipt(
        session_id="s",
        call_id="c",
        turn=1,
        tool="write_file",
        arguments_hash="0" * 64,
        status=EffectStatus.STARTED,
        result=None,
        started_at=1.0,
        finished_at=None,
        resolution_note=None,
        attempt="a" * 32,
    )
    assert await store.add_receipt(first) == first
    rival = dataclasses.replace(first, attempt="b" * 32, turn=2)
    assert await store.add_receipt(rival) == first
    done = dataclasses.replace(
        first,
        status=EffectStatus.COMMITTED,
        result=ToolResultPart(call_id="c", content="x" * size),
        finished_at=2.0,
    )
    assert await store.update_receipt(done, expected=EffectStatus.STARTED) == done
    late = dataclasses.replace(
        rival, status=EffectStatus.COMMITTED, result=ToolResultPart(call_id="c", content="late")
    )
    assert await store.update_receipt(late, expected=EffectStatus.STARTED) == done
    gone = dataclasses.replace(done, call_id="never-started")
    assert await store.update_receipt(gone, expected=EffectStatus.STARTED) is None
    again = await reopen()
    assert await again.get_receipt("s", "c") == done
    assert await again.get_receipt("s", "never-started") is None


async def test_begin_effect_writes_a_started_receipt(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("s")
    receipt = await session.begin_effect(turn=3, call=CALL)
    assert receipt == EffectReceipt(
        session_id="s",
        call_id="call_1",
        turn=3,
        tool="write_file",
        arguments_hash=arguments_hash(CALL.arguments),
        status=EffectStatus.STARTED,
        result=None,
        started_at=receipt.started_at,
        finished_at=None,
        resolution_note=None,
        attempt=receipt.attempt,
    )
    assert len(receipt.arguments_hash) == 64
    assert receipt.attempt is not None and len(receipt.attempt) == 32
    stored = await fresh(reopen, "s")
    assert await stored.effect("call_1") == receipt
    assert await stored.effects() == [receipt]
    assert await stored.effect("other") is None


async def test_claim_effect_has_exactly_one_winner(store: SessionStore, reopen: Reopen) -> None:
    await store.open("s")
    # Ten claimers, each through a store of its own where the store allows (as processes
    # would), all at once: exactly one may run the call, and all see the winner's receipt.
    sessions = [await (await reopen()).load("s") for _ in range(10)]
    claims: list[EffectClaim] = []

    async def claim(session: Session) -> None:
        claims.append(await session.claim_effect(turn=1, call=CALL))

    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(claim, session)
    winners = [c for c in claims if c.won]
    assert len(winners) == 1
    assert {c.receipt for c in claims} == {winners[0].receipt}
    assert winners[0].receipt.attempt is not None
    again = await sessions[0].claim_effect(turn=1, call=CALL)
    assert again == EffectClaim(False, winners[0].receipt)
    assert await sessions[0].begin_effect(turn=1, call=CALL) == winners[0].receipt


async def test_set_metadata_if_changes_only_what_it_expected(
    store: SessionStore, reopen: Reopen
) -> None:
    session = await store.open("s")
    await session.set_metadata(lock={"owner": None}, title="t")
    assert not await session.set_metadata_if("lock", {"owner": "other"}, lock={"owner": "me"})
    assert session.metadata == {"lock": {"owner": None}, "title": "t"}
    assert await session.set_metadata_if("lock", {"owner": None}, lock={"owner": "me"}, x=1)
    assert session.metadata == {"lock": {"owner": "me"}, "title": "t", "x": 1}
    assert await session.set_metadata_if("absent", None, absent="now", x=None)
    assert (await fresh(reopen, "s")).metadata == {
        "lock": {"owner": "me"},
        "title": "t",
        "absent": "now",
    }
    # A stale copy learns what is stored when it loses.
    stale = await fresh(reopen, "s")
    assert await session.set_metadata_if("lock", {"owner": "me"}, lock=None)
    assert not await stale.set_metadata_if("lock", {"owner": "me"}, lock={"owner": "stale"})
    assert "lock" not in stale.metadata


async def test_set_metadata_if_has_exactly_one_winner(store: SessionStore, reopen: Reopen) -> None:
    await store.open("s")
    sessions = [await (await reopen()).load("s") for _ in range(10)]
    won: list[int] = []

    async def claim(n: int, session: Session) -> None:
        if await session.set_metadata_if("owner", None, owner=n):
            won.append(n)

    async with anyio.create_task_group() as tg:
        for n, session in enumerate(sessions):
            tg.start_soon(claim, n, session)
    assert len(won) == 1
    assert (await fresh(reopen, "s")).metadata == {"owner": won[0]}


async def test_begin_effect_again_with_the_same_call_returns_the_receipt(
    store: SessionStore,
) -> None:
    session = await store.open("s")
    first = await session.begin_effect(turn=1, call=CALL)
    same = ToolCallPart(id=CALL.id, name=CALL.name, arguments={"text": "hi", "path": "a.txt"})
    assert await session.begin_effect(turn=2, call=same) == first
    committed = await session.commit_effect(CALL.id, RESULT)
    assert await session.begin_effect(turn=1, call=CALL) == committed
    assert len(await session.effects()) == 1


@pytest.mark.parametrize(
    "call",
    [
        ToolCallPart(id="call_1", name="write_file", arguments={"path": "b.txt", "text": "hi"}),
        ToolCallPart(id="call_1", name="delete_file", arguments=CALL.arguments),
    ],
    ids=["other-arguments", "other-tool"],
)
async def test_same_call_id_with_other_content_is_rejected(
    store: SessionStore, call: ToolCallPart
) -> None:
    session = await store.open("s")
    first = await session.begin_effect(turn=1, call=CALL)
    with pytest.raises(EffectConflict, match="call_1") as caught:
        await session.begin_effect(turn=1, call=call)
    assert isinstance(caught.value, ValueError)
    assert (caught.value.session_id, caught.value.call_id) == ("s", "call_1")
    assert await session.effects() == [first]


async def test_commit_effect_records_the_result(store: SessionStore, reopen: Reopen) -> None:
    session = await store.open("s")
    started = await session.begin_effect(turn=1, call=CALL)
    committed = await session.commit_effect(CALL.id, RESULT)
    assert committed.status is EffectStatus.COMMITTED
    assert committed.result == RESULT
    assert committed.finished_at is not None
    assert committed.finished_at >= started.started_at
    assert committed.started_at == started.started_at
    assert await session.commit_effect(CALL.id, RESULT) == committed  # harmless twice
    assert await (await fresh(reopen, "s")).effect(CALL.id) == committed
    assert await session.effects(EffectStatus.STARTED) == []
    assert await session.effects(EffectStatus.COMMITTED) == [committed]


async def test_commit_effect_refuses_what_it_cannot_do(store: SessionStore) -> None:
    session = await store.open("s")
    with pytest.raises(EffectConflict, match="no effect receipt"):
        await session.commit_effect(CALL.id, RESULT)
    await session.begin_effect(turn=1, call=CALL)
    with pytest.raises(ValueError, match="call_2"):
        await session.commit_effect(CALL.id, ToolResultPart(call_id="call_2", content="x"))
    await session.commit_effect(CALL.id, RESULT)
    with pytest.raises(EffectConflict, match="committed"):
        await session.commit_effect(CALL.id, ToolResultPart(call_id=CALL.id, content="other"))
    with pytest.raises(EffectConflict, match="committed"):
        await session.resolve_effect(CALL.id, applied=True)


@pytest.mark.parametrize("applied", [True, False])
async def test_resolve_effect_keeps_the_evidence(
    store: SessionStore, reopen: Reopen, applied: bool
) -> None:
    session = await store.open("s")
    started = await session.begin_effect(turn=2, call=CALL)
    resolved = await session.resolve_effect(CALL.id, applied=applied, note="checked the disk")
    status = EffectStatus.RESOLVED_APPLIED if applied else EffectStatus.RESOLVED_NOT_APPLIED
    assert resolved.status is status
    assert resolved.resolution_note == "checked the disk"
    assert resolved.finished_at is not None
    assert resolved.result is None
    # everything the receipt recorded before stays
    assert (resolved.turn, resolved.tool, resolved.arguments_hash, resolved.started_at) == (
        started.turn,
        started.tool,
        started.arguments_hash,
        started.started_at,
    )
    again = await fresh(reopen, "s")
    assert await again.effects() == [resolved]
    assert await again.effects(status) == [resolved]
    assert await again.effects(EffectStatus.STARTED) == []
    assert await session.resolve_effect(CALL.id, applied=applied, note="checked the disk") == (
        resolved
    )
    with pytest.raises(EffectConflict, match="resolved"):
        await session.resolve_effect(CALL.id, applied=not applied)
    with pytest.raises(EffectConflict):
        await session.commit_effect(CALL.id, RESULT)
    with pytest.raises(EffectConflict, match="no effect receipt"):
        await session.resolve_effect("unknown", applied=True)


async def test_effects_are_listed_oldest_first(store: SessionStore) -> None:
    session = await store.open("s")
    calls = [ToolCallPart(id=f"c{i}", name="t", arguments={"i": i}) for i in range(5)]
    for call in calls:
        await session.begin_effect(turn=1, call=call)
    await session.commit_effect("c2", ToolResultPart(call_id="c2", content="ok"))
    await session.resolve_effect("c0", applied=False)
    assert [r.call_id for r in await session.effects()] == ["c0", "c1", "c2", "c3", "c4"]
    assert [r.call_id for r in await session.effects(EffectStatus.STARTED)] == ["c1", "c3", "c4"]


async def test_receipts_belong_to_their_session(store: SessionStore) -> None:
    a, b = await store.open("a"), await store.open("b")
    await a.begin_effect(turn=1, call=CALL)
    other = ToolCallPart(id=CALL.id, name="other_tool", arguments={})
    assert (await b.begin_effect(turn=1, call=other)).tool == "other_tool"
    assert [r.tool for r in await a.effects()] == ["write_file"]
