"""``fanloop sessions list | show | pending | effects | resolve-effect`` (``resume`` lives in
``_app``, ``approve`` in ``_approve``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

from ..messages import TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from ..sessions import (
    EffectConflict,
    EffectReceipt,
    PostgresStore,
    Session,
    SessionNotFound,
    SQLiteStore,
    pending_approvals,
)
from ._app import (
    CommandError,
    Console,
    approve_options,
    is_postgres,
    make_store,
    store_label,
    store_target,
)
from ._render import approve_hints, format_call, plural
from ._terminal import safe, safe_lines

__all__ = [
    "cmd_effects",
    "cmd_list",
    "cmd_pending",
    "cmd_resolve",
    "cmd_show",
    "existing_store",
    "load_session",
]

_MAX_PREVIEW_LINES = 60


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


Store = SQLiteStore | PostgresStore


def existing_store(args: argparse.Namespace) -> Store | None:
    """The session store (``--store``, ``$FANLOOP_STORE`` or under ``--root``); ``None``
    when it is a SQLite file that was never created (looking does not create it)."""
    target = store_target(args)
    if not is_postgres(target) and not os.path.exists(os.path.expanduser(target)):
        return None
    return make_store(target)


def _json_line(console: Console, data: Any) -> None:
    console.out.write(json.dumps(data, default=str, ensure_ascii=False) + "\n")


async def load_session(store: Store | None, args: argparse.Namespace, session_id: str) -> Session:
    """The session ``session_id``.

    Raises:
        CommandError: there is no such session (or no store at all).
    """
    if store is None:
        raise CommandError(f"no session {session_id!r}: {store_target(args)} does not exist")
    try:
        return await store.load(session_id)
    except SessionNotFound:
        raise CommandError(f"no session {session_id!r} in {store_label(store)}") from None


async def cmd_list(args: argparse.Namespace, console: Console) -> int:
    """Every session, the most recently updated first."""
    store = existing_store(args)
    if store is None:
        if not args.json:
            console.info(f"no sessions yet ({store_target(args)} does not exist)")
        return 0
    try:
        infos = await store.list()
    finally:
        await store.aclose()
    if args.json:
        for info in infos:
            _json_line(console, dataclasses.asdict(info))
        return 0
    if not infos:
        console.info("no sessions yet")
        return 0
    s = console.style
    width = max(len("ID"), *(len(i.id) for i in infos))
    console.out.write(s.bold(f"{'ID':<{width}}  {'UPDATED':<16}  MSGS  OPEN  TITLE") + "\n")
    for info in infos:
        open_effects = s.yellow(f"{info.open_effects:>4}") if info.open_effects else f"{0:>4}"
        console.out.write(
            f"{info.id:<{width}}  {_when(info.updated_at):<16}  {info.message_count:>4}  "
            f"{open_effects}  {info.title or ''}\n"
        )
    return 0


async def cmd_show(args: argparse.Namespace, console: Console) -> int:
    """A session's conversation: prompts, answers, tool calls and their results."""
    store = existing_store(args)
    try:
        session = await load_session(store, args, args.id)
        receipts = await session.effects()
    finally:
        if store is not None:
            await store.aclose()
    if args.json:
        for message in session.messages:
            _json_line(console, message.model_dump(mode="json"))
        return 0
    s = console.style
    out = console.out
    title = session.metadata.get("title")
    out.write(s.bold(f"session {session.id}") + (f" — {safe(str(title))}" if title else "") + "\n")
    out.write(
        s.dim(f"created {_when(session.created_at)} · {plural(len(session.messages), 'message')}")
        + "\n\n"
    )
    for message in session.messages:
        for part in message.content:
            if isinstance(part, TextPart):
                who = s.green("you") if message.role == "user" else s.cyan("assistant")
                out.write(f"{who}: {safe(part.text)}\n")
            elif isinstance(part, ThinkingPart):
                out.write(s.dim(f"(thinking) {safe(part.text)}") + "\n")
            elif isinstance(part, ToolCallPart):
                label = format_call(part.name, part.arguments)
                out.write(f"  → {label}" + s.dim(f"  [{safe(part.id)}]") + "\n")
            elif isinstance(part, ToolResultPart):
                mark = s.red("✗") if part.is_error else s.green("←")
                lines = part.content.splitlines() or [""]
                more = f" … (+{plural(len(lines) - 3, 'line')})" if len(lines) > 3 else ""
                body = safe(" ⏎ ".join(x.strip() for x in lines[:3]))
                out.write(f"  {mark} {s.dim(body[:200] + more)}\n")
    open_receipts = [r for r in receipts if r.status == "started"]
    if open_receipts:
        unknown = plural(len(open_receipts), "effect")
        out.write("\n" + s.yellow(f"{unknown} with an unknown outcome:") + "\n")
        for r in open_receipts:
            out.write(
                safe(f"  {r.call_id}  {r.tool}  (see: fanloop sessions effects {session.id})")
                + "\n"
            )
    pending = pending_approvals(session)
    if pending:
        out.write("\n" + s.yellow(f"{plural(len(pending), 'call')} waiting for approval:") + "\n")
        for text in approve_hints(pending, session.id, approve_options(args)):
            out.write(text + "\n")
    return 0


async def cmd_pending(args: argparse.Namespace, console: Console) -> int:
    """The calls waiting for a person's approval: of one session, or of every session."""
    store = existing_store(args)
    sessions: list[Session] = []
    try:
        if args.id is not None:
            sessions.append(await load_session(store, args, args.id))
        elif store is not None:
            for info in await store.list():
                try:
                    session = await store.load(info.id)
                except SessionNotFound:
                    continue  # deleted while we looked
                if pending_approvals(session):
                    sessions.append(session)
    finally:
        if store is not None:
            await store.aclose()
    rows = [(session, p) for session in sessions for p in pending_approvals(session)]
    if args.json:
        for session, p in rows:
            _json_line(console, {"session_id": session.id, "tool": p.name, **p.to_json()})
        return 0
    if not rows:
        console.info(
            f"no calls waiting for approval in session {args.id}"
            if args.id
            else "no calls waiting for approval"
        )
        return 0
    s = console.style
    out = console.out
    for session in sessions:
        for p in pending_approvals(session):
            out.write(s.bold(safe(f"session {session.id} · call {p.call_id} · {p.name}")) + "\n")
            lines = safe_lines(p.preview)
            for text in lines[:_MAX_PREVIEW_LINES]:
                out.write(f"  │ {text}\n")
            if len(lines) > _MAX_PREVIEW_LINES:
                more = plural(len(lines) - _MAX_PREVIEW_LINES, "more line")
                out.write(s.dim(f"  │ … {more} (--json shows them all)") + "\n")
        hints = approve_hints(pending_approvals(session), session.id, approve_options(args))
        for text in hints[-2:]:
            out.write(s.dim(text.strip()) + "\n")
        out.write("\n")
    return 0


def _receipt_row(r: EffectReceipt) -> dict[str, Any]:
    return {
        "session_id": r.session_id,
        "call_id": r.call_id,
        "tool": r.tool,
        "status": str(r.status),
        "turn": r.turn,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "note": r.resolution_note,
    }


async def cmd_effects(args: argparse.Namespace, console: Console) -> int:
    """The tool-effect receipts of one session, or the open ones of every session."""
    store = existing_store(args)
    receipts: list[EffectReceipt] = []
    try:
        if args.id is not None:
            session = await load_session(store, args, args.id)
            receipts = await session.effects()
        elif store is not None:
            for info in await store.list():
                if info.open_effects:
                    session = await store.load(info.id)
                    receipts += [r for r in await session.effects() if r.status == "started"]
    finally:
        if store is not None:
            await store.aclose()
    if args.json:
        for r in receipts:
            _json_line(console, _receipt_row(r))
        return 0
    if not receipts:
        console.info(f"no effect receipts in session {args.id}" if args.id else "no open effects")
        return 0
    s = console.style
    out = console.out
    out.write(
        s.bold(f"{'SESSION':<16}  {'CALL ID':<24}  {'TOOL':<12}  {'STATUS':<20}  STARTED") + "\n"
    )
    for r in receipts:
        status = str(r.status)
        shown = s.yellow(f"{status:<20}") if status == "started" else f"{status:<20}"
        note = f"  note: {r.resolution_note}" if r.resolution_note else ""
        out.write(
            f"{r.session_id:<16}  {r.call_id:<24}  {r.tool:<12}  {shown}  "
            f"{_when(r.started_at)}{note}\n"
        )
    if any(r.status == "started" for r in receipts):
        out.write(
            s.dim(
                "started = the tool may or may not have taken effect. Check, then record it: "
                "fanloop sessions resolve-effect SESSION CALL_ID --applied|--not-applied"
            )
            + "\n"
        )
    return 0


async def cmd_resolve(args: argparse.Namespace, console: Console) -> int:
    """Record an operator's finding on a receipt left ``started``."""
    store = existing_store(args)
    try:
        session = await load_session(store, args, args.id)
        try:
            receipt = await session.resolve_effect(
                args.call_id, applied=args.applied, note=args.note
            )
        except EffectConflict as exc:
            raise CommandError(str(exc)) from None
    finally:
        if store is not None:
            await store.aclose()
    outcome = "applied" if args.applied else "not applied"
    console.out.write(
        f"resolved {receipt.call_id} ({receipt.tool}) in session {session.id} as {outcome}; "
        f"`fanloop sessions resume {session.id}` continues it\n"
    )
    return 0
