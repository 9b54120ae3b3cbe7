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
