"""The budget account of a durable run tree, in PostgreSQL (see docs/durable.md).

These drive the account directly, as the steps of several workers would; the worker-process
tests (``test_durable_workers.py``) run whole trees on it.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from fanloop.durable._account import Account, Grant, account_database
from fanloop.limits import InputEstimate, Limits
from fanloop.providers import Usage

pytestmark = [pytest.mark.postgres]

MODEL = "gpt-4.1"


@pytest.fixture
async def account(dbos_database: str) -> Account:
    acct = Account(
        account_database(dbos_database), f"t-{uuid.uuid4().hex[:8]}", Limits(max_total_tokens=1_000)
    )
    await acct.open()
    return acct


async def reserve(acct: Account, rid: str, tokens: int = 600, **kw: Any) -> Any:
    options = {"release": None, "tool_calls": 0, "charge_key": rid, **kw}
    decided, _ = await acct.reserve(rid, InputEstimate(tokens, tokens), 50, MODEL, **options)
    return decided


async def sql(url: str, statement: str, *args: Any) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(statement, args)


async def test_a_call_that_does_not_fit_beside_another_waits_for_it(account: Account) -> None:
    assert isinstance(await reserve(account, "a"), Grant)
    with anyio.move_on_after(0.5) as waited:
        await reserve(account, "b")
    assert waited.cancelled_caught  # 600 + 600 do not fit in 1,000
    await account.charge("a", Usage(input_tokens=200, output_tokens=10), MODEL)
    with anyio.fail_after(5):
        assert isinstance(await reserve(account, "b"), Grant)  # 210 spent: room now
    state = await account.spent()
    assert state["usage"]["input_tokens"] == 200 and state["outstanding"] == 1


async def test_a_reservation_whose_lease_ran_out_holds_nothing(
    account: Account, dbos_database: str
) -> None:
    """A worker killed in a call stops renewing its lease: once it is past, the room is free
    (a recovered run settles it sooner)."""
    assert isinstance(await reserve(account, "dead"), Grant)
    with anyio.move_on_after(0.3) as waited:
        await reserve(account, "live")
    assert waited.cancelled_caught
    await sql(
        dbos_database,
        "UPDATE fanloop.budget_reservation SET expires = now() - interval '1 second' "
        "WHERE account = %s AND id = 'dead'",
        account.id,
    )
    with anyio.fail_after(5):
        assert isinstance(await reserve(account, "live"), Grant)
    assert (await account.spent())["outstanding"] == 1


async def test_a_reserve_step_run_again_gets_its_grant_back_and_counts_nothing_twice(
    account: Account,
) -> None:
    first = await reserve(account, "r", tool_calls=3)
    again = await reserve(account, "r", tool_calls=3)  # its worker died before the checkpoint
    assert isinstance(first, Grant) and isinstance(again, Grant)
    assert again.reservation.input_tokens == first.reservation.input_tokens
    state = await account.spent()
    assert state["tool_calls"] == 3 and state["outstanding"] == 1


async def test_the_first_call_of_a_kind_goes_alone_and_teaches_the_others(
    dbos_database: str,
) -> None:
    acct = Account(
        account_database(dbos_database),
        f"t-{uuid.uuid4().hex[:8]}",
        Limits(max_input_tokens=10_000),
    )
    await acct.open()
    first = InputEstimate(100, 100, 100, "kind-a")

    async def first_call(rid: str) -> Any:
        decided, _ = await acct.reserve(
            rid, first, 50, MODEL, release=None, tool_calls=0, charge_key=rid
        )
        return decided

    probe = await first_call("p")
    assert isinstance(probe, Grant) and probe.reservation.probe
    with anyio.move_on_after(0.3) as waited:
        await first_call("q")
    assert waited.cancelled_caught  # the probe has not reported yet
    await acct.charge("p", Usage(input_tokens=4_000), MODEL)  # 40 times its estimate
    with anyio.fail_after(5):
        taught = await first_call("q")
    assert isinstance(taught, Grant) and taught.reservation.input_tokens >= 4_000
    with anyio.move_on_after(0.3) as waited:
        await first_call("r")  # 4,000 spent and 4,000 held: it waits for the room held
    assert waited.cancelled_caught
    await acct.charge("q", Usage(input_tokens=4_000), MODEL)
    denied = await first_call("r")  # 8,000 spent: it can never fit
    assert not isinstance(denied, Grant) and denied[0] == "token_budget"


async def test_untrusted_numbers_read_back_from_the_account_are_cleaned(
    account: Account, dbos_database: str
) -> None:
    await sql(
        dbos_database,
        "UPDATE fanloop.budget_account SET input_tokens = -5000, cost_usd = 'NaN', "
        'shortfall = \'{"not json": 1, "[1,2]": "x"}\' WHERE id = %s',
        account.id,
    )
    decided = await reserve(account, "a")
    assert isinstance(decided, Grant)  # a negative count refunds nothing, junk is ignored
    state = await account.spent()
    assert state["usage"]["input_tokens"] == 0 and state["cost_usd"] == 0.0


async def test_charges_from_many_workers_at_once_all_count(account: Account) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(account.charge, None, Usage(input_tokens=7, output_tokens=3), MODEL)
    state = await account.spent()
    assert state["usage"]["input_tokens"] == 140 and state["usage"]["output_tokens"] == 60
