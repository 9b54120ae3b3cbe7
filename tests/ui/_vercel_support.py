"""Helpers of the Vercel AI UI message stream tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ui_helpers import run_node


def user(text: str, message_id: str = "u1") -> dict[str, Any]:
    """A ``useChat`` user message."""
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def read_with_ai(
    node_modules: Path, url: str, body: Any, *, pkg: str = "ai", message: Any = None
) -> dict[str, Any]:
    """POST ``body`` to ``url`` from Node and read the stream with the ``ai`` package
    (``pkg="ai-v5"``: SDK v5); the report of ``node/vercel_check.cjs``."""
    plan = {"pkg": pkg, "url": url, "body": body, "message": message}
    out = run_node(node_modules, "vercel_check.cjs", json.dumps(plan))
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report
