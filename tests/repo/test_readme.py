"""The README's encodings table is rendered from the registry; they must agree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import posenc
from posenc.registry import encodings_markdown

ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- encodings-table:start -->", "<!-- encodings-table:end -->"


def _script():
    spec = importlib.util.spec_from_file_location(
        "update_readme_table", ROOT / "scripts/update_readme_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_table_matches_registry():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split(START)[1].split(END)[0]
    assert block.strip() == encodings_markdown().strip(), (
        "README.md is out of date with the registry: run `python scripts/update_readme_table.py`"
    )


def test_table_has_one_row_per_encoding_with_kind_and_paper():
    rows = [line for line in encodings_markdown().splitlines()[2:] if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(posenc.ENCODINGS)
    for row, (name, cls) in zip(rows, posenc.ENCODINGS.items()):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[1] == cls.kind, name
        assert cls.paper.split(",")[0] in cells[3], name
        for field in cls.Config.field_names():
            assert field in cells[2], (name, field)


def test_update_script_is_idempotent_and_detects_drift():
    script = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    once = script.render(text)
    assert script.render(once) == once
    stale = text.replace(START, START + "\n| stale | row |", 1)
    assert script.render(stale) == once  # a stale table is replaced, the rest untouched
    assert once.split(START)[0] == text.split(START)[0] and once.split(END)[1] == text.split(END)[1]


def test_readme_tour_excerpt_counts_the_notes_verdicts_as_shipped():
    """The README quotes the tour's count of the notes' verdicts; it follows the measured
    verdicts (rerun scripts/update_notes_page.py, then copy the tour's line)."""
    from posenc.analysis import notes

    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    line = notes.summary_line(notes.measured_claims()).replace("`", "")
    assert f"All {line.replace(' claims:', ' claims of the five notes:', 1)}" in text


def test_the_extend_paragraph_states_no_time_without_a_shipped_idle_run():
    """The README's paragraph on posenc extend may give an estimate (said to be one), or a wall-clock
    measured on an idle machine that a shipped run.json holds; never a time that no shipped record has."""
    import json
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = " ".join(readme.split("`posenc extend` answers", 1)[1].split("\n\n", 1)[0].split())
    measured = set()  # the wall-clock of every shipped block's whole run on an idle machine
    for shipped in (ROOT / "benchmarks" / "records" / "extend").iterdir():
        if (shipped / "run.json").exists() and (shipped / "page.json").exists():
            run = json.loads((shipped / "run.json").read_text())
            if json.loads((shipped / "page.json").read_text())["idle"] and not run.get("cells_resumed"):
                measured.add(f"{run['wall_seconds'] / 60:.1f} min")
    assert "posenc extend" in paragraph and "estimated" in paragraph
    for said in re.finditer(r"(\d+(?:\.\d+)?)\s*(min|minutes|s)\b", paragraph):
        before = paragraph[max(0, said.start() - 40) : said.start()]
        assert "estimated" in before or said.group(0) in measured, (said.group(0), before)
