"""Every Python example in docs/ runs (a page's blocks share one namespace, in order).

A block preceded by the line ``<!-- no-test -->`` is shown but not run (e.g. one that needs a
real API key). Blocks may use top-level ``await``: a page that does runs all its blocks in one
event loop.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any

import anyio
import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"(<!-- no-test -->\s*)?```python\n(.*?)```", re.S)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "```python" in p.read_text())


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up
    namespace: dict[str, Any] = module.__dict__
    blocks = [
        compile(m.group(2), f"{page.name}[{n}]", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for n, m in enumerate(BLOCK.finditer(page.read_text()), 1)
        if not m.group(1)
    ]
    if not any(b.co_flags & inspect.CO_COROUTINE for b in blocks):
        for block in blocks:
            exec(block, namespace)
        return

    async def run_all() -> None:
        for block in blocks:
            outcome = eval(block, namespace)
            if inspect.iscoroutine(outcome):
                await outcome

    anyio.run(run_all)
