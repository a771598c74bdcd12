"""Docs match the code: every Python snippet in README.md and docs/*.md runs as written.

Fenced ``python`` blocks of one file run in order in one namespace (a later block may
use an earlier one's names). Inline spans that are a call of a ``posenc`` function with
literal arguments only, such as ``posenc.presets.build("gpt-j")``, are evaluated after
``import posenc``, as a reader would type them.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fenced_python(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def inline_calls(text: str) -> list[str]:
    """Inline code spans ``posenc.x.y(...)`` whose arguments are all literals."""
    calls = []
    for span in re.findall(r"`(posenc\.[\w.]+\([^`]*\))`", text):
        try:
            node = ast.parse(span, mode="eval").body
        except SyntaxError:
            continue
        args = [*node.args, *(k.value for k in node.keywords)] if isinstance(node, ast.Call) else None
        if args is not None and all(isinstance(a, ast.Constant) and a.value is not ... for a in args):
            calls.append(span)
    return calls


def test_the_docs_have_snippets_to_check():
    assert sum(len(fenced_python(p.read_text())) for p in DOCS) >= 1
    assert 'posenc.presets.build("gpt-j")' in inline_calls((ROOT / "README.md").read_text())


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_fenced_python_blocks_run(path):
    # the blocks run as one module would (a dataclass looks its module up in sys.modules), and
    # compile without this file's `from __future__ import annotations`, as a reader's file would
    module = types.ModuleType(f"docs_{path.stem}")
    sys.modules[module.__name__] = module
    try:
        for block in fenced_python(path.read_text()):
            exec(compile(block, f"{path.name} snippet", "exec", dont_inherit=True), module.__dict__)
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_inline_posenc_calls_work_after_import_posenc(path):
    import posenc

    for call in inline_calls(path.read_text()):
        eval(call, {"posenc": posenc})  # noqa: S307 - the docs' own literal calls
