"""No function in ``src/posenc`` longer than :data:`LIMIT` lines, read from the source with ``ast``.

A function's length is its lines from ``def`` to its last line, decorators and docstring not
counted (a docstring is documentation, and a click command's is its ``--help``). A nested
function counts in its parent and on its own. The functions allowed past the limit are listed in
:data:`EXCEPTIONS` with the length they may not grow past and why (docs/architecture.md,
"Function length", says the same); an entry whose function is gone or back under the limit must
go, so the table stays the list of what is left to split.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "posenc"
LIMIT = 60

#: ``"module:qualified name" -> (lines it may not grow past, why it is longer than LIMIT)``.
EXCEPTIONS: dict[str, tuple[int, str]] = {
    "posenc.analysis.notes:markdown": (
        70,
        "mostly the fixed prose of docs/notes.md, line by line (a template); the logic is 20 lines",
    ),
}


def lengths(source: str, module: str = "m") -> dict[str, int]:
    """``{"module:qualified name": lines}`` of every function in ``source`` (see the module doc)."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert child.end_lineno is not None
                lines = child.end_lineno - child.lineno + 1
                first = child.body[0]
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)
                ):
                    assert first.end_lineno is not None
                    lines -= first.end_lineno - first.lineno + 1
                found[f"{module}:{prefix}{child.name}"] = lines
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(source), "")
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_lengths() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found.update(lengths(path.read_text(encoding="utf-8"), module_name(path)))
    return found


LENGTHS = package_lengths()


def test_the_count_leaves_out_decorators_and_the_docstring_and_counts_nested_functions():
    source = textwrap.dedent(
        '''
        @decorator
        def outer(x):
            """One
            docstring."""
            def inner():
                return 1
            return inner() + x

        class Holder:
            def method(self):
                pass
        '''
    )
    assert lengths(source) == {"m:outer": 4, "m:outer.inner": 2, "m:Holder.method": 2}


def test_no_function_is_longer_than_the_limit_unless_listed():
    too_long = {name: lines for name, lines in LENGTHS.items() if lines > LIMIT and name not in EXCEPTIONS}
    assert not too_long, (
        f"functions over {LIMIT} lines: {too_long}; split them into named steps (or, for a data "
        "table, list it in EXCEPTIONS with the reason)"
    )


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_a_listed_function_does_not_grow_and_is_still_too_long(name):
    allowed, why = EXCEPTIONS[name]
    assert why.strip(), f"{name}: give the reason it is longer than {LIMIT} lines"
    assert name in LENGTHS, f"{name} is gone (moved or renamed?): update EXCEPTIONS"
    lines = LENGTHS[name]
    assert lines <= allowed, f"{name} grew to {lines} lines (listed at {allowed}): split it"
    assert lines > LIMIT, f"{name} is {lines} lines now, within the limit: remove it from EXCEPTIONS"


def test_the_exceptions_are_the_ones_docs_architecture_lists():
    """docs/architecture.md lists every exception with its length, and no other."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Function length", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            rows[cells[0].strip("`")] = int(cells[1])
    assert rows == {name: allowed for name, (allowed, _) in EXCEPTIONS.items()}
