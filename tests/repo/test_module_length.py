"""No module in ``src/posenc`` longer than :data:`LIMIT` lines, unless docs/architecture.md lists it.

A module's length is its number of lines (``wc -l``). The modules allowed past the limit are the
rows between the ``long-modules`` markers of docs/architecture.md, each with the length it may
not grow past and why; an entry whose module is gone or back under the limit must go, so the table
stays the list of what is left to split.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "posenc"
LIMIT = 600


def allowed(text: str) -> dict[str, tuple[int, str]]:
    """``{module: (lines it may not grow past, why)}`` from the table between the markers."""
    block = text.split("<!-- long-modules:start -->")[1].split("<!-- long-modules:end -->")[0]
    found = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"^`([\w.]+)`$", cells[0]) if cells else []
        if len(cells) >= 3 and names and cells[1].isdigit():
            found[names[0]] = (int(cells[1]), cells[2])
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_lengths(package: Path = PACKAGE) -> dict[str, int]:
    return {
        module_name(path): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(package.rglob("*.py"))
    }


def problems(lengths: dict[str, int], listed: dict[str, tuple[int, str]]) -> list[str]:
    """Why the modules and the table disagree: a module past the limit it does not list (or past
    its listed length), an entry whose module is gone or under the limit, an entry without a why."""
    out = []
    for name, lines in sorted(lengths.items()):
        cap = listed.get(name, (LIMIT, ""))[0]
        if lines > cap:
            out.append(f"{name} has {lines} lines (limit {cap}): split it by its jobs, or list it with why")
    for name, (_, why) in sorted(listed.items()):
        if name not in lengths:
            out.append(f"{name} is listed but is no module of posenc")
        elif lengths[name] <= LIMIT:
            out.append(f"{name} is listed but has {lengths[name]} lines, within the limit: remove its row")
        if not why:
            out.append(f"{name} is listed without a reason")
    return out


def test_no_module_is_longer_than_the_limit_unless_listed_with_why():
    listed = allowed((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    found = problems(module_lengths(), listed)
    assert not found, "\n".join(found)


def test_the_rule_catches_what_it_forbids():
    """The check can fail: a long module not listed, one past its listed length, a stale entry."""
    table = "<!-- long-modules:start -->\n| `posenc.a` | 700 | a table |\n| `posenc.c` | 800 | gone |\n<!-- long-modules:end -->"
    listed = allowed(table)
    assert listed == {"posenc.a": (700, "a table"), "posenc.c": (800, "gone")}
    found = problems({"posenc.a": 701, "posenc.b": 601, "posenc.d": 600}, listed)
    assert any(p.startswith("posenc.a has 701 lines (limit 700)") for p in found), found
    assert any(p.startswith("posenc.b has 601 lines (limit 600)") for p in found), found
    assert any(p.startswith("posenc.c is listed but is no module") for p in found), found
    assert not any(p.startswith("posenc.d") for p in found), found
    assert problems({"posenc.a": 500}, listed)[0].startswith("posenc.a is listed but has 500 lines")
