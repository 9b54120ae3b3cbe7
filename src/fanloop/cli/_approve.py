"""``fanloop sessions approve ID CALL_ID... [--deny [REASON]]``: answer deferred calls.

A run started with ``--defer`` (or any ``confirm`` that returned :data:`~fanloop.DEFER`) left
its batch parked in the session. This answers the waiting calls — every one of them, named
one by one or with ``--all`` — and runs on: the rest of the batch, then the loop, rendered as
``sessions resume`` renders. The parked turn's model call is not made again, and no call that
already finished runs again.
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack

from .._approvals import check_not_answered
from ..errors import ApprovalConflict
from ..sessions import Session, pending_approvals
from ._app import (
    EXIT_CONFIG,
    CommandError,
    Console,
    Interrupts,
    build_setup,
    close_provider,
    execute,
    exit_code_for,
    make_provider,
    open_mcp,
    report_awaiting,
    run_command,
    to_stderr,
)
from ._render import plural
from ._sessions import existing_store, load_session
from ._terminal import safe

__all__ = ["cmd_approve"]

DENIED = "User declined to run this tool."


def _answer(deny: str | bool | None) -> bool | str:
    """``--deny`` absent: approve; ``--deny``: decline; ``--deny REASON``: decline, telling
    the model why."""
    if deny is None:
        return True
    if deny is True or not str(deny).strip():
        return False
    return f"{DENIED} Reason: {deny}"


def approvals_for(session: Session, args: argparse.Namespace) -> dict[str, bool | str]:
    """The answers the options give, checked against what the session waits for.

    Raises:
        CommandError: nothing waits, a call id that does not wait, or a waiting call left
            unanswered (exit code 1); nothing is changed.
    """
    pending = pending_approvals(session)
    if not pending:
        try:
            check_not_answered(session, args.call_ids)
        except ApprovalConflict as exc:
            raise CommandError(safe(str(exc))) from None
        raise CommandError(safe(f"session {session.id} has no calls waiting for approval"))
    waiting = {p.call_id: p for p in pending}
    listed = ", ".join(f"{p.call_id} ({p.name})" for p in pending)
    ids = list(waiting) if args.all else list(dict.fromkeys(args.call_ids))
    unknown = [i for i in ids if i not in waiting]
    if unknown:
        raise CommandError(
            safe(
                f"no call {unknown[0]!r} waits for approval in session {session.id}; "
                f"waiting: {listed}"
            )
        )
    missing = [i for i in waiting if i not in ids]
    if missing:
        raise CommandError(
            safe(
                f"session {session.id} has {plural(len(waiting), 'call')} waiting for approval "
                f"and each needs an answer; missing: {', '.join(missing)} (name them too, or "
                "pass --all)"
            )
        )
    answer = _answer(args.deny)
    return dict.fromkeys(ids, answer)


async def cmd_approve(args: argparse.Namespace, console: Console) -> int:
    """Answer the calls a session waits for, then run on; returns the exit code."""
    if args.all and args.call_ids:
        raise CommandError("give CALL_IDs or --all, not both", EXIT_CONFIG)
    if not args.all and not args.call_ids:
        swallowed = isinstance(args.deny, str)  # `approve ID --deny CALL_ID`
        raise CommandError(
            f"name the CALL_ID to answer (see: fanloop sessions pending {args.id}), or pass "
            "--all" + ("; put --deny [REASON] after the CALL_IDs" if swallowed else ""),
            EXIT_CONFIG,
        )
    store = existing_store(args)
    async with AsyncExitStack() as stack:
        if store is not None:
            stack.push_async_callback(store.aclose)
        session = await load_session(store, args, args.id)
        approvals = approvals_for(session, args)  # before anything else: a bad id changes nothing
        provider = make_provider(args.provider, args.model)
        stack.push_async_callback(close_provider, provider)
        setup = build_setup(
            args,
            console,
            provider=provider,
            session_id=session.id,
            extra_tools=await open_mcp(args, stack),
        )
        say = console.info if not args.json else to_stderr(console)
        names = {p.call_id: p.name for p in pending_approvals(session)}
        for call_id, answer in approvals.items():
            verdict = "approved" if answer is True else "denied"
            say(safe(f"{verdict} {call_id} ({names[call_id]}) in session {session.id}; running on"))

        async def body(interrupts: Interrupts) -> int:
            try:
                outcome = await execute(
                    lambda: setup.agent.resume(session, approvals=approvals),
                    setup.view,
                    interrupts,
                    console,
                )
            except ApprovalConflict as exc:  # another `approve` (or a web page) got there first
                raise CommandError(safe(str(exc))) from None
            report_awaiting(outcome, console, session, args)
            return exit_code_for(outcome)

        return await run_command(body, console)
    raise AssertionError("unreachable")  # pragma: no cover
