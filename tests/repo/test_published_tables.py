"""Every published benchmark table regenerates, byte for byte, from the records shipped with it.

``benchmarks/records/BLOCK/`` holds the records of the run each table in README.md and docs/*.md
shows (``scripts/shipped_records.py``); the first tests here render every block from them and
compare with the docs. The others check the mechanism on a tiny run of their own: shipping,
checking, and failing when a table is edited by hand or a record changes.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from posenc import compare
from posenc.compare.profile import get_profile
from posenc.records.store import checksum

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TABLES = _script("update_benchmark_tables")
NOTES_PAGE = _script("update_notes_page")
shipped = sys.modules["shipped_records"]  # imported by the scripts, from next to them


def stale_files(block: str, files: dict[Path, bool]) -> list[str]:
    """The files whose ``block`` differs from what the shipped records give (NotShipped when none)."""
    records, info = shipped.load(block)
    summary = TABLES.tables.summarize(records, **TABLES.tables.declared(info))
    stale, found = [], 0
    for path, with_claims in files.items():
        text = path.read_text(encoding="utf-8")
        name = f"compare-{block}"
        if TABLES.markers(name)[0] not in text:
            continue
        found += 1
        body = TABLES.render_records(
            records, info, with_claims=TABLES.claims_for(block, with_claims), summary=summary
        )
        if TABLES.splice(text, name, body, path) != text:
            stale.append(path.name)
    assert found, f"no file has the {block} block"
    return stale


def _block_body(path: Path, block: str) -> str | None:
    """The text between the block's markers in ``path`` (None when it has no such block)."""
    start, end = TABLES.markers(f"compare-{block}")
    text = path.read_text(encoding="utf-8")
    if start not in text:
        return None
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n")


def test_a_block_without_records_is_withdrawn_not_left_standing(tmp_path, monkeypatch):
    """A block whose records are not shipped either says so (--withdraw) or fails the test above."""
    page = tmp_path / "page.md"
    start, end = TABLES.markers("compare-standard")
    page.write_text(f"intro\n{start}\n| old | table |\n{end}\n", encoding="utf-8")
    monkeypatch.setattr(TABLES, "FILES", {page: True})
    assert _block_body(page, "standard") == "| old | table |"
    assert TABLES.main(["--block", "standard", "--withdraw"]) == 0
    body = _block_body(page, "standard")
    assert body == TABLES.withdrawn("standard").strip("\n") and "posenc compare --profile standard" in body
    assert page.read_text(encoding="utf-8").startswith("intro\n")


def _shipped_runs(block: str) -> int:
    try:
        return len(json.loads((shipped.block_dir(block) / "grid.json").read_text())["run_ids"])
    except (OSError, ValueError, KeyError):
        return 0


def _published(block: str):
    # summarising takes ~0.15 s of CPU a run: a block of many runs is slow
    return pytest.param(block, marks=[pytest.mark.slow] if _shipped_runs(block) > 40 else [])


@pytest.mark.parametrize("block", [_published(b) for b in TABLES.RUN_BLOCKS])
def test_the_published_block_is_what_its_shipped_records_give(block):
    try:
        stale = stale_files(block, TABLES.FILES)
    except shipped.NotShipped as exc:
        # no records: the block must say it is not published, never show an older run's numbers
        withdrawn = [
            path.name
            for path in TABLES.FILES
            if _block_body(path, block) not in (None, TABLES.withdrawn(block).strip("\n"))
        ]
        if withdrawn:
            pytest.fail(f"{exc} (or withdraw it: --block {block} --withdraw)", pytrace=False)
        return
    assert not stale, (
        f"the {block} block in {', '.join(stale)} is not what the records in "
        f"{shipped.shown(shipped.block_dir(block))} give: regenerate it with "
        f"python scripts/update_benchmark_tables.py --block {block}"
    )


def test_the_tuning_block_is_the_shipped_learning_rates():
    """docs/benchmark.md's learning-rate table renders posenc.compare's shipped choices: a new
    choice shipped without regenerating it fails here."""
    assert TABLES.main(["--block", "tuning", "--check"]) == 0, (
        "the tuning block is not the shipped learning rates: regenerate it with "
        "python scripts/update_benchmark_tables.py --block tuning"
    )


def test_the_notes_verdicts_are_what_the_shipped_notes_records_give():
    try:
        records, info = shipped.load(NOTES_PAGE.BLOCK)
    except shipped.NotShipped as exc:
        pytest.fail(str(exc), pytrace=False)
    assert NOTES_PAGE.measurements(records, info) == NOTES_PAGE.MEASURED.read_text(encoding="utf-8"), (
        f"{NOTES_PAGE.MEASURED.name} is not what the shipped notes records give: "
        "run python scripts/update_notes_page.py"
    )


# ---------------------------------------------------------------------------
# The mechanism, on a tiny run of its own.
# ---------------------------------------------------------------------------

PROFILE = dataclasses.replace(get_profile("smoke"), encodings=("nope",), tasks=("copy",))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A run of PROFILE (3 runs), then a run of another grid into the same directory: its
    ``run.json`` and ``grid.json`` are the second run's, the first's is kept as ``first.json``."""
    out = tmp_path_factory.mktemp("published")
    quiet = {"show_progress": False, "log": lambda _: None}
    compare.compare(PROFILE, out=out, command=f"posenc compare --profile smoke --out {out}", **quiet)
    shutil.copy(out / "run.json", out / "first.json")
    compare.compare(PROFILE, seeds=(3,), out=out, command="posenc compare --seeds 3", **quiet)
    return out


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """An empty shipped tree and a doc with a quick block (where the scripts look)."""
    monkeypatch.setattr(shipped, "SHIPPED", tmp_path / "records")
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- compare-quick:start -->\nold\n<!-- compare-quick:end -->\noutro\n")
    monkeypatch.setattr(TABLES, "FILES", {doc: True})
    return doc


def _ship(results):
    return shipped.export(results, "quick", profile=PROFILE, run_info=results / "first.json")


def test_shipping_takes_the_grids_records_without_weights(results, tree):
    folder = _ship(results)
    files = sorted(folder.rglob("*.json.gz"))
    grid = json.loads((folder / "grid.json").read_text())
    assert len(files) == 3 and len(grid["run_ids"]) == 3  # the seed-3 run of the same directory is not
    assert not list(folder.rglob("*.pt")) and len(list(results.rglob("*.pt"))) == 4
    for path in files:  # each the record as written, byte for byte; it still names its weights
        original = results / path.relative_to(folder).with_suffix("")
        assert gzip.decompress(path.read_bytes()) == original.read_bytes()
        assert "weights" in json.loads(original.read_text())
    info = json.loads((folder / "run.json").read_text())
    assert info["command"] == f"posenc compare --profile smoke --out {results.name}"  # no machine's path
    first = [p.read_bytes() for p in files]
    _ship(results)  # shipping again gives the same bytes (git keeps one copy of a record in two blocks)
    assert [p.read_bytes() for p in sorted(folder.rglob("*.json.gz"))] == first


def test_shipping_refuses_another_runs_description(results, tree):
    with pytest.raises(SystemExit, match="describes a run of 1 run"):  # run.json is the seed-3 run's
        shipped.export(results, "quick", profile=PROFILE)
    with pytest.raises(SystemExit, match="a run of profile 'smoke', not 'quick'"):
        shipped.export(results, "quick", run_info=results / "first.json")
    with pytest.raises(SystemExit, match="not found"):
        shipped.export(results, "quick", profile=PROFILE, run_info=results / "nothing.json")


def test_ship_then_check_from_the_shipped_records_alone(results, tree, monkeypatch, tmp_path):
    folder = _ship(results)
    assert TABLES.main(["--block", "quick", "--check"]) == 1  # "old" is not the table
    assert TABLES.main(["--block", "quick"]) == 0
    text = tree.read_text()
    assert text.startswith("intro\n<!-- compare-quick:start -->\n`posenc compare --profile smoke --out ")
    assert TABLES.main(["--block", "quick", "--check"]) == 0
    # the shipped records give the table a run directory of that grid alone gives
    records, info = shipped.load("quick")
    alone = tmp_path / "alone"
    for path in folder.rglob("*.json.gz"):
        target = alone / path.relative_to(folder).with_suffix("")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.decompress(path.read_bytes()))
    shutil.copy(results / "first.json", alone / "run.json")
    assert TABLES.render(alone, with_claims=True) == TABLES.render_records(records, info, with_claims=True)
    # and reading them never loads weights
    import torch

    def no_weights(*args, **kwargs):
        raise AssertionError("weights loaded")

    monkeypatch.setattr(torch, "load", no_weights)
    assert stale_files("quick", TABLES.FILES) == []


def test_a_table_edited_by_hand_fails_the_check(results, tree):
    _ship(results)
    TABLES.main(["--block", "quick"])
    text = tree.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| nope |"))
    tree.write_text(text.replace(row, row.replace("| nope |", "| nope  |", 1)))
    assert stale_files("quick", TABLES.FILES) == ["doc.md"]
    assert TABLES.main(["--block", "quick", "--check"]) == 1


def _change(path: Path, change, *, seal: bool = True) -> None:
    data = json.loads(gzip.decompress(path.read_bytes()))
    change(data)
    if seal:
        data["checksum"] = checksum(data)
    path.write_bytes(gzip.compress(json.dumps(data).encode()))


def test_a_changed_record_fails_the_check(results, tree):
    folder = _ship(results)
    TABLES.main(["--block", "quick"])
    first = sorted(folder.rglob("*.json.gz"))[0]

    def faster(data):
        data["result"]["timing"]["steps_per_second"] *= 2

    _change(first, faster)  # sealed again: a valid record, another table
    assert stale_files("quick", TABLES.FILES) == ["doc.md"]
    assert TABLES.main(["--block", "quick", "--check"]) == 1
    _change(first, faster, seal=False)  # not sealed: refused, naming the file
    with pytest.raises(shipped.NotShipped, match=f"{first.name}: not a valid record \\(checksum mismatch\\)"):
        TABLES.main(["--block", "quick", "--check"])


def test_missing_records_are_named_never_skipped(results, tree):
    with pytest.raises(shipped.NotShipped, match="no records shipped for the quick block"):
        stale_files("quick", TABLES.FILES)
    folder = _ship(results)
    sorted(folder.rglob("*.json.gz"))[0].unlink()
    with pytest.raises(shipped.NotShipped, match="1 of the grid's 3 runs missing"):
        TABLES.main(["--block", "quick", "--check"])


def test_the_claims_verdicts_are_counted_by_label(results, tree):
    rows = [{"verdict": v} for v in ("agrees", "inconclusive", "not reproduced at this scale", "agrees")]
    assert TABLES.verdict_counts(rows) == (
        "Verdicts of the 4 claims: agrees 2, disagrees 0, inconclusive 1, not reproduced at this scale 1."
    )
    _ship(results)
    records, info = shipped.load("quick")
    text = TABLES.render_records(records, info, with_claims=True)
    count = text.split("\n\n| source |")[0].rsplit("\n", 1)[-1]
    rows = TABLES.claims.claims(records)
    assert count == f"{TABLES.verdict_counts(rows)} {TABLES.claims.caption(rows)}"
    assert "corrected together by Holm's method" in count
    assert "Verdicts of" not in TABLES.render_records(records, info, with_claims=False)


def test_the_notes_verdicts_are_measured_from_the_shipped_notes_records(results, tree, monkeypatch, tmp_path):
    measured = tmp_path / "notes_measured.json"
    monkeypatch.setattr(NOTES_PAGE, "MEASURED", measured)
    monkeypatch.setattr(NOTES_PAGE, "PAGE", tmp_path / "notes.md")
    monkeypatch.setattr(NOTES_PAGE.notes, "markdown", lambda: "the page\n")
    with pytest.raises(shipped.NotShipped, match="notes block"):
        NOTES_PAGE.main(["--check"])
    shipped.export(results, "notes", profile=PROFILE, run_info=results / "first.json")
    assert NOTES_PAGE.main([]) == 0
    data = json.loads(measured.read_text())
    assert data["command"] == f"posenc compare --profile smoke --out {results.name}"
    assert NOTES_PAGE.main(["--check"]) == 0
    measured.write_text(measured.read_text().replace("posenc compare", "posenc  compare"))
    assert NOTES_PAGE.main(["--check"]) == 1


EXTEND_PAGE = _script("update_extend_page")


def _extend_blocks() -> list[str]:
    text = EXTEND_PAGE.PAGE.read_text()
    return [part.split(":start -->")[0] for part in text.split("<!-- extend-")[1:] if ":start -->" in part]


@pytest.mark.parametrize(
    "block",
    sorted(
        {*_extend_blocks(), *(p.name for p in EXTEND_PAGE.SHIPPED.iterdir() if (p / "summary.json").exists())}
    ),
)
def test_the_extend_page_is_what_its_shipped_summaries_give(block):
    """docs/extend.md's measured blocks: provenance, tables, caption and what the records decide
    rendered from the run's shipped summary.json (every number the tables show, per document and
    per prompt) and run.json; a block whose run is not published yet says so and names its command."""
    text = EXTEND_PAGE.PAGE.read_text()
    assert EXTEND_PAGE.markers(block)[0] in text
    assert EXTEND_PAGE.render(text, block) == text, (
        f"run: python scripts/update_extend_page.py --block {block}"
    )


def test_every_extend_block_ships_what_it_is_made_from():
    """A block shows a shipped run, or (one a published run fills, not run yet) says that it is not
    published and how it is: never numbers from nowhere."""
    text = EXTEND_PAGE.PAGE.read_text()
    blocks = _extend_blocks()
    missing = [b for b in blocks if not (EXTEND_PAGE.SHIPPED / b / "summary.json").exists()]
    assert blocks and not [b for b in missing if b not in EXTEND_PAGE.PUBLISH], missing
    for block in missing:
        start, end = EXTEND_PAGE.markers(block)
        shown = text.split(start, 1)[1].split(end, 1)[0]
        assert shown.strip() == EXTEND_PAGE.pending(block) and "|" not in shown, block


def test_the_extend_page_reads_the_first_releases_run_no_further_than_it_goes():
    """The first release's run (two slices of Python's documentation, one prompt per passkey cell):
    plain RoPE's intervals at 8,192 and 16,384 tokens overlap (its rise is not shown), NTK-aware x2's
    cost interval lies above 1 but over two documents only, and the page says both, no more."""
    summary = json.loads((EXTEND_PAGE.SHIPPED / "more" / "summary.json").read_text())
    assert summary["documents"] == 2 and summary["model"]["text"]["source"] == "python-docs"
    none = summary["perplexity"]["none"]
    assert none["16384"]["low"] < none["8192"]["high"]  # overlap: no rise shown
    ntk = summary["inside"]["ntk x2"]
    assert ntk["low"] > 1.0
    assert all(cell["prompts"] == 1 for row in summary["passkey"].values() for cell in row.values())
    text = EXTEND_PAGE.PAGE.read_text()
    assert "intervals apart" not in text and "established, unlike" not in text
    assert "overlap: its rise past the context is not shown" in " ".join(text.split())


def _decided(summary: dict, measure: str, length: int, first: str, second: str) -> bool:
    (test,) = [t for t in summary["tests"] if (t["measure"], t["length"], {t["first"], t["second"]})
               == (measure, length, {first, second})]  # fmt: skip
    return bool(test["decided"])


def test_the_extend_page_reads_the_thorough_run_no_further_than_it_goes():
    """The prose above the thorough block: every count, cost and verdict it states is what the shipped
    summary holds (passkey counts and McNemar verdicts past the context, perplexity verdicts at 12,288,
    costs inside the context, no perplexity effective length shown to hold, the RULER-style floor)."""
    summary = json.loads((EXTEND_PAGE.SHIPPED / "thorough" / "summary.json").read_text())
    assert summary["documents"] == 10 and max(summary["lengths"]) == 12288
    passkey = {name: row["passkey"] for name, row in summary["retrieval"].items()}
    counts = {name: (cells["4096"]["correct"], cells["12288"]["correct"]) for name, cells in passkey.items()}
    assert counts == {"none": (17, 0), "ntk x2": (12, 18), "yarn x2": (17, 20), "yarn-dynamic": (17, 11)}
    for other in ("ntk x2", "yarn x2", "yarn-dynamic"):
        assert _decided(summary, "passkey", 12288, "none", other)
        assert _decided(summary, "perplexity", 12288, "none", other)
    assert _decided(summary, "passkey", 12288, "yarn x2", "yarn-dynamic")
    ratios = [t["ratio"] for t in summary["tests"] if t["measure"] == "perplexity" and t["length"] == 12288
              and t["first"] == "none"]  # fmt: skip
    assert len(ratios) == 3 and all(1.06 <= round(r, 2) <= 1.08 for r in ratios)
    inside = {name: [round(100 * (row[k] - 1), 1) for k in ("value", "low", "high")]
              for name, row in summary["inside"].items()}  # fmt: skip
    assert inside["ntk x2"] == [1.7, 1.3, 2.1] and inside["yarn x2"] == [2.9, 2.6, 3.2]
    assert inside["yarn-dynamic"] == [0.0, 0.0, 0.0]
    effective = summary["effective"]
    assert all(
        row["perplexity"]["low"] == 1024 and row["perplexity"]["length"] == 12288
        for row in effective.values()
    )
    assert effective["none"]["passkey"]["high"] == 4096
    assert all(effective[name]["passkey"]["low"] is None for name in ("ntk x2", "yarn x2", "yarn-dynamic"))
    floor = {name: [row[task]["4096"]["correct"] for task in ("multivalue", "variables", "frequent")]
             for name, row in summary["retrieval"].items()}  # fmt: skip
    assert all(counts_ == [0, 0, 0] for counts_ in floor.values())
    assert sorted(row["multikey"]["4096"]["correct"] for row in summary["retrieval"].values()) == [1, 2, 4, 4]
    text = " ".join(EXTEND_PAGE.PAGE.read_text().split())
    for words in ("0 of 20, against 17 of 20 at 4,096", "YaRN x2 finds 20 of 20, NTK-aware x2 18 and dynamic YaRN 11",
                  "6-8% higher under plain RoPE", "NTK-aware x2 costs 1.7% [1.3, 2.1]", "YaRN x2 2.9% [2.6, 3.2]",
                  "Not decided: effective context lengths", "multi-key 1-4 of 5"):  # fmt: skip
        assert words in text, words


def test_every_test_the_extend_page_names_is_a_test_of_the_suite():
    """A claim on docs/extend.md names the test that supports it (``tests/...py::test_name``), and the
    verdicts a summary writes name theirs (posenc.extend.summary.METHOD_TESTS): each is a test
    function of that file, so a renamed or removed test cannot leave a claim citing nothing."""
    import ast
    import re

    from posenc.extend.summary import METHOD_TESTS

    text = EXTEND_PAGE.PAGE.read_text()
    named = set(re.findall(r"(tests/[\w/]+\.py)::(test_\w+)", text))
    named |= {tuple(v.split("::")) for v in METHOD_TESTS.values()}
    assert len(named) >= 15, named
    root = EXTEND_PAGE.ROOT
    for path, name in sorted(named):
        assert (root / path).is_file(), path
        tree = ast.parse((root / path).read_text())
        functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in functions, f"{path}::{name}"


def _extend_run(tmp_path, **run) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    info = {"protocol": "smollm2", "cells_done": 6, "cells_resumed": 0, "cells_failed": 0, **run}
    (out / "run.json").write_text(json.dumps(info))
    return out


@pytest.mark.parametrize(
    ("block", "run", "said"),
    [
        ("results", {"cells_resumed": 4}, "4 resumed cell(s)"),
        ("results", {"cells_failed": 1}, "1 failed cell(s)"),
        ("results", {"protocol": "thorough"}, "ran 'thorough'"),
        ("thorough", {}, "ran 'smollm2'"),
    ],
)
def test_a_published_extend_block_takes_only_a_whole_run_of_its_protocol(
    tmp_path, monkeypatch, block, run, said
):
    """The default's and thorough's blocks show one timed run that ran every cell itself: a run that
    resumed or failed a cell, or ran another protocol, is refused before anything is copied."""
    monkeypatch.setattr(EXTEND_PAGE, "SHIPPED", tmp_path / "shipped")
    out = _extend_run(tmp_path, **run)
    with pytest.raises(SystemExit, match=re.escape(said)):
        EXTEND_PAGE.ship(out, block, idle=True)
    assert not (tmp_path / "shipped").exists()
    (out / "run.json").unlink()
    with pytest.raises(SystemExit, match="no summary.json and run.json"):
        EXTEND_PAGE.publishable(out, block)


def test_a_whole_run_of_the_default_is_shipped_with_its_idle_mark(tmp_path, monkeypatch):
    monkeypatch.setattr(EXTEND_PAGE, "SHIPPED", tmp_path / "shipped")
    monkeypatch.setattr(EXTEND_PAGE, "PAGE", tmp_path / "docs" / "extend.md")
    shipped = EXTEND_PAGE.ship(_extend_run(tmp_path), "results", idle=True)
    assert json.loads((shipped / "run.json").read_text())["cells_done"] == 6
    assert json.loads((shipped / "page.json").read_text()) == {"idle": True}


def test_a_whole_thorough_run_renders_its_retrieval_effective_lengths_and_verdicts(tmp_path, monkeypatch):
    """What the lead's published run will be rendered from: a summary of this release's layout
    (retrieval cells of 20 prompts, effective context lengths, the corrected tests), shipped and
    rendered into the page's thorough block with its provenance, tables, verdicts naming their
    tests and figures; the block then checks against its shipped files."""
    pytest.importorskip("scipy")
    from tests.unit.extend.test_summary_text import _collapse

    summary = _collapse()
    summary["model"] = {
        "label": "tiny",
        "text": {"source": "shakespeare", "documents": 4, "sha256": "ab" * 32},
    }
    out = _extend_run(tmp_path, protocol="thorough", cells_done=12, wall_seconds=600.0, estimated_seconds=540)
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "figures").mkdir()
    (out / "figures" / "passkey.png").write_bytes(b"\x89PNG")
    page = tmp_path / "docs" / "extend.md"
    page.parent.mkdir()
    start, end = EXTEND_PAGE.markers("thorough")
    page.write_text(f"# page\n\n{start}\n{EXTEND_PAGE.pending('thorough')}\n{end}\n\nafter\n")
    monkeypatch.setattr(EXTEND_PAGE, "SHIPPED", tmp_path / "shipped")
    monkeypatch.setattr(EXTEND_PAGE, "PAGE", page)
    EXTEND_PAGE.ship(out, "thorough", idle=True)
    text = EXTEND_PAGE.render(page.read_text(), "thorough")
    block = text.split(start, 1)[1].split(end, 1)[0]
    assert "Not published yet" not in block and text.endswith("after\n")
    assert "12 cells run and 0 resumed; wall-clock 10.0 min" in block and "otherwise idle machine" in block
    assert "| yarn x4 | 20/20 [0.83, 1.00] | 2/20 [0.01, 0.32] |" in block
    assert "**Effective context length (tokens) [95% interval]**" in block
    assert "`tests/unit/extend/test_evidence.py::" in block
    assert "![passkey](extend/thorough/passkey.png)" in block
    page.write_text(text)
    assert EXTEND_PAGE.render(page.read_text(), "thorough") == page.read_text()
