"""How the package's modules stand on each other: the version in a leaf module, and the import
circles that function-level imports used to hide, cut by moving the shared piece lower."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fanloop
from fanloop import _version
from fanloop.providers import _endpoint

SRC = Path(fanloop.__file__).parent
PYPROJECT = SRC.parent.parent / "pyproject.toml"


def test_the_version_lives_in_a_leaf_module() -> None:
    assert fanloop.__version__ == _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", fanloop.__version__)
    assert f"fanloop/{fanloop.__version__}" == _endpoint._USER_AGENT
    tree = ast.parse((SRC / "_version.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_the_build_reads_the_version_from_the_leaf_module() -> None:
    text = PYPROJECT.read_text()
    assert 'dynamic = ["version"]' in text
    assert 'path = "src/fanloop/_version.py"' in text


# -- import circles ---------------------------------------------------------------------------


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The fanloop modules ``path`` imports when it runs, at the top or inside a function
    (not under ``if TYPE_CHECKING``), with the packages each import runs on the way."""
    name, package = _module(path)
    base = name.split(".") if package else name.split(".")[:-1]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            start = base[: len(base) - node.level + 1] if node.level else []
            module = ".".join([*start, *([node.module] if node.module else [])])
            targets = [
                f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            parts = target.split(".")
            for i in range(2, len(parts) + 1):  # the packages on the way, not fanloop itself
                step = ".".join(parts[:i])
                if step != name and not name.startswith(step + "."):
                    found.add(step)
        stack.extend(ast.iter_child_nodes(node))
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    paths = {_module(p)[0]: p for p in SRC.rglob("*.py")}
    return {m: _imports(p, set(paths)) - {m} for m, p in paths.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """For each module that some chain of imports leads back to, one such chain."""
    found = []
    for start in sorted(graph):
        seen: set[str] = set()
        chains = [[start]]
        while chains:
            chain = chains.pop()
            if start in graph[chain[-1]]:
                found.append([*chain, start])
                break
            for nxt in sorted(graph[chain[-1]] - seen):
                seen.add(nxt)
                chains.append([*chain, nxt])
    return found


def test_no_module_imports_itself_back_round_a_circle() -> None:
    # Imports inside functions count too: ``Agent`` makes the ``delegate`` and ``as_tool()``
    # tools, and those tools make sub-agents with the class of the agent that runs them
    # (``Agent._subagent_class``), so fanloop._delegate does not import fanloop._agent.
    circles = _circles(_graph())
    assert not circles, " -> ".join(circles[0])


def test_the_check_sees_imports_inside_functions() -> None:
    graph = _graph()
    assert "fanloop._delegate" in graph["fanloop._agent_config"]  # only inside a function
    graph["fanloop._delegate"].add("fanloop._agent")  # an import back would close a circle
    assert _circles(graph)
