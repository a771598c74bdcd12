"""Unit test files mirror the package's files, as docs/architecture.md ("Tests") states.

The rule: ``tests/unit/<path>/test_<module>.py`` tests ``src/posenc/<path>/<module>.py``, and a
package's ``__init__`` is tested by ``test_<package>.py`` inside the package's own folder
(``tests/unit/compare/test_compare.py`` tests ``posenc.compare``; ``tests/unit/test_posenc.py`` tests
``posenc`` itself). A test file that names no module is allowed only when it is listed between the
``test-files`` markers of docs/architecture.md, with why; an entry whose file is gone, or that names a
module after all, must go. Every folder of ``tests/unit`` is a package (an ``__init__.py``), so that
files of the same name in two folders (``tests/unit/reference/test_relative.py`` beside
``tests/unit/encoding/test_relative.py``: the NumPy references mirror ``posenc.encoding``) import as
two modules.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"
PACKAGE = ROOT / "src" / "posenc"


def allowed(text: str) -> dict[str, str]:
    """``{test file relative to tests/unit: why}`` from the table between the ``test-files`` markers."""
    block = text.split("<!-- test-files:start -->")[1].split("<!-- test-files:end -->")[0]
    found = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"^`tests/unit/([\w/]+\.py)`$", cells[0]) if cells else []
        if len(cells) >= 2 and names:
            found[names[0]] = cells[1]
    return found


def module_named_by(test: Path, unit: Path = UNIT, package: Path = PACKAGE) -> str | None:
    """The module ``test`` (a ``test_*.py`` under ``unit``) names by the rule, or None."""
    rel = test.relative_to(unit)
    folder, name = rel.parent.parts, rel.stem.removeprefix("test_")
    if (package.joinpath(*folder) / f"{name}.py").is_file():
        return ".".join(("posenc", *folder, name))
    if folder and folder[-1] == name and (package.joinpath(*folder) / "__init__.py").is_file():
        return ".".join(("posenc", *folder))
    if not folder and name == "posenc":
        return "posenc"
    return None


def problems(unit: Path, package: Path, listed: dict[str, str]) -> list[str]:
    """Why the test files and the allow-list disagree with the rule."""
    out = []
    tests = sorted(unit.rglob("test_*.py"))
    for test in tests:
        rel = test.relative_to(unit).as_posix()
        if module_named_by(test, unit, package) is None and rel not in listed:
            out.append(
                f"tests/unit/{rel} names no module of posenc: name it test_<module>.py after the module it "
                "tests (beside it), split it by module, or list it in docs/architecture.md with why"
            )
    present = {t.relative_to(unit).as_posix(): t for t in tests}
    for rel, why in sorted(listed.items()):
        if rel not in present:
            out.append(f"tests/unit/{rel} is listed but is no test file")
        elif (module := module_named_by(present[rel], unit, package)) is not None:
            out.append(f"tests/unit/{rel} is listed but names {module}: remove its row")
        if not why:
            out.append(f"tests/unit/{rel} is listed without a reason")
    for folder in sorted(p for p in [unit, *unit.rglob("*")] if p.is_dir() and p.name != "__pycache__"):
        if not (folder / "__init__.py").is_file():
            out.append(f"{folder.relative_to(unit.parent)} has no __init__.py")
    return out


def test_every_unit_test_file_names_the_module_it_tests_unless_listed_with_why():
    listed = allowed((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    found = problems(UNIT, PACKAGE, listed)
    assert not found, "\n".join(found)


def test_the_rule_catches_what_it_forbids(tmp_path):
    """The check can fail: a file naming no module, a stale or explained-away entry, a folder that is
    no package; and it accepts a module's file, a package's file in its folder and the top level's."""
    package, unit = tmp_path / "src" / "posenc", tmp_path / "tests" / "unit"
    for path in ("__init__.py", "registry.py", "compare/__init__.py", "compare/grid.py"):
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text("")
    for path in ("test_posenc.py", "test_registry.py", "compare/test_compare.py", "compare/test_grid.py",
                 "compare/test_everything.py", "compare/test_concern.py", "nn/test_model.py"):  # fmt: skip
        (unit / path).parent.mkdir(parents=True, exist_ok=True)
        (unit / path).write_text("")
    for folder in (unit, unit / "compare"):
        (folder / "__init__.py").write_text("")
    assert [
        module_named_by(unit / p, unit, package) for p in ("test_posenc.py", "compare/test_compare.py")
    ] == [
        "posenc",
        "posenc.compare",
    ]
    table = (
        "<!-- test-files:start -->\n| file | why |\n|---|---|\n| `tests/unit/compare/test_concern.py` | a concern |\n"
        "| `tests/unit/compare/test_grid.py` | stale |\n| `tests/unit/gone/test_x.py` | gone |\n"
        "<!-- test-files:end -->"
    )
    listed = allowed(table)
    assert listed == {
        "compare/test_concern.py": "a concern",
        "compare/test_grid.py": "stale",
        "gone/test_x.py": "gone",
    }
    found = problems(unit, package, listed)
    assert any(p.startswith("tests/unit/compare/test_everything.py names no module") for p in found), found
    assert any(p.startswith("tests/unit/nn/test_model.py names no module") for p in found), found
    assert any(
        p.startswith("tests/unit/compare/test_grid.py is listed but names posenc.compare.grid") for p in found
    )
    assert any(p.startswith("tests/unit/gone/test_x.py is listed but is no test file") for p in found), found
    assert any(p == "unit/nn has no __init__.py" for p in found), found
    assert not any("test_concern" in p or "test_posenc" in p or "test_registry" in p for p in found), found
