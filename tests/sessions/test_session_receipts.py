"""Effect receipts against a store that races, loses writes or is cancelled mid-write.

The store contract tests (``test_sessions_contract.py``) run every store; these use an
in-memory store with one seam opened, to reach the paths only a race or a cancellation takes.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest
from structlog.testing import capture_logs

from fanloop.messages import ToolCallPart, ToolResultPart
from fanloop.sessions import EffectConflict, EffectReceipt, EffectStatus, MemoryStore, Session
from fanloop.sessions import arguments_hash as hash_of

CALL = ToolCallPart(id="call_1", name="write_file", arguments={"path": "a.txt", "text": "hi"})
RESULT = ToolResultPart(call_id="call_1", content="wrote 2 bytes")


class HeldStore(MemoryStore):
    """A store whose receipt writes wait for ``release`` once ``entered`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def _hold(self) -> None:
        self.entered.set()
        await self.release.wait()

    async def add_receipt(self, receipt: EffectReceipt) -> EffectReceipt:
        await self._hold()
        return await super().add_receipt(receipt)

    async def update_receipt(
        self, receipt: EffectReceipt, *, expected: EffectStatus
    ) -> EffectReceipt | None:
        await self._hold()
        return await super().update_receipt(receipt, expected=expected)


async def _cancelled_mid_write(store: HeldStore, write: object) -> None:
    """Run ``write`` and cancel it while the store is writing; the write must still land."""
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)  # type: ignore[arg-type]
            await store.entered.wait()
            scope.cancel()
            store.release.set()


async def test_a_cancelled_begin_still_leaves_its_receipt() -> None:
    store = HeldStore()
    store.release.set()
    session = await store.open("s")
    store.release = anyio.Event()
    await _cancelled_mid_write(store, lambda: session.begin_effect(turn=1, call=CALL))
    receipt = await session.effect(CALL.id)
    assert receipt is not None and receipt.status is EffectStatus.STARTED


@pytest.mark.parametrize("move", ["commit", "resolve"])
async def test_a_cancelled_commit_or_resolve_still_lands(move: str) -> None:
    store = HeldStore()
    store.release.set()
    session = await store.open("s")
    await session.begin_effect(turn=1, call=CALL)
    store.entered, store.release = anyio.Event(), anyio.Event()
    if move == "commit":
        await _cancelled_mid_write(store, lambda: session.commit_effect(CALL.id, RESULT))
        expected = EffectStatus.COMMITTED
    else:
        await _cancelled_mid_write(store, lambda: session.resolve_effect(CALL.id, applied=True))
        expected = EffectStatus.RESOLVED_APPLIED
    receipt = await session.effect(CALL.id)
    assert receipt is not None and receipt.status is expected


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (ToolCallPart(id="call_1", name="write_file", arguments={"path": "b.txt"}), "arguments"),
        (ToolCallPart(id="call_1", name="delete_file", arguments=CALL.arguments), "tool"),
    ],
)
async def test_a_readmitted_call_id_names_what_differs(call: ToolCallPart, what: str) -> None:
    session = await MemoryStore().open("s")
    await session.begin_effect(turn=1, call=CALL)
    with pytest.raises(EffectConflict) as caught:
        await session.begin_effect(turn=1, call=call)
    assert str(caught.value) == (
        f"call 'call_1' was admitted before with other {what} "
        f"(write_file, arguments hash {hash_of(CALL.arguments)[:12]}); "
        "a call id cannot be re-admitted with different content"
    )


async def test_refused_moves_say_which_and_name_the_call() -> None:
    session = await MemoryStore().open("s")
    with pytest.raises(EffectConflict) as missing:
        await session.resolve_effect("call_9", applied=True)
    assert str(missing.value) == "no effect receipt for call 'call_9'"
    assert (missing.value.session_id, missing.value.call_id) == ("s", "call_9")
    await session.begin_effect(turn=1, call=CALL)
    await session.commit_effect(CALL.id, RESULT)
    other = ToolResultPart(call_id=CALL.id, content="other")
    for move, attempt in [
        ("commit", lambda: session.commit_effect(CALL.id, other)),
        ("resolve", lambda: session.resolve_effect(CALL.id, applied=False)),
    ]:
        with pytest.raises(EffectConflict) as caught:
            await attempt()
        assert str(caught.value) == (
            f"cannot {move} the receipt for call 'call_1': it is committed"
        )
        assert (caught.value.session_id, caught.value.call_id) == ("s", "call_1")


async def _move(session: Session, move: str) -> EffectReceipt:
    if move == "commit":
        return await session.commit_effect(CALL.id, RESULT)
    return await session.resolve_effect(CALL.id, applied=True)


class RacingStore(MemoryStore):
    """A store where another process moves (``moved``) or deletes (``None``) the receipt
    between the session's read and its write."""

    def __init__(self, other: EffectStatus | None) -> None:
        super().__init__()
        self.other = other

    async def update_receipt(
        self, receipt: EffectReceipt, *, expected: EffectStatus
    ) -> EffectReceipt | None:
        if self.other is None:
            return None
        return dataclasses.replace(receipt, status=self.other, result=None)


@pytest.mark.parametrize("move", ["commit", "resolve"])
async def test_a_receipt_moved_by_another_process_is_a_conflict(move: str) -> None:
    session = await RacingStore(EffectStatus.RESOLVED_NOT_APPLIED).open("s")
    await session.begin_effect(turn=1, call=CALL)
    with pytest.raises(EffectConflict) as caught:
        await _move(session, move)
    assert str(caught.value) == (
        "cannot update the receipt for call 'call_1': it is resolved_not_applied"
    )
    assert (caught.value.session_id, caught.value.call_id) == ("s", "call_1")


@pytest.mark.parametrize("move", ["commit", "resolve"])
async def test_a_write_the_store_did_not_keep_is_a_conflict(move: str) -> None:
    session = await RacingStore(None).open("s")
    await session.begin_effect(turn=1, call=CALL)
    with pytest.raises(EffectConflict) as caught:
        await _move(session, move)
    assert str(caught.value) == "the store did not record the receipt for call 'call_1'"
    assert (caught.value.session_id, caught.value.call_id) == ("s", "call_1")


@pytest.mark.parametrize("applied", [True, False])
async def test_resolving_is_logged_with_the_call_and_the_outcome(applied: bool) -> None:
    session = await MemoryStore().open("s")
    await session.begin_effect(turn=1, call=CALL)
    with capture_logs() as logs:
        await session.resolve_effect(CALL.id, applied=applied, note="checked")
    status = "resolved_applied" if applied else "resolved_not_applied"
    assert [e for e in logs if e["event"] == "session_effect_resolved"] == [
        {
            "event": "session_effect_resolved",
            "log_level": "info",
            "session_id": "s",
            "tool_call_id": "call_1",
            "tool": "write_file",
            "status": status,
        }
    ]
