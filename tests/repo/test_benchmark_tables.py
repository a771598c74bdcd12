"""The benchmark tables in README.md and docs/benchmark.md are generated, never typed."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from posenc import compare
from posenc.records.spec import BENCHMARK_VERSION

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "update_benchmark_tables", ROOT / "scripts" / "update_benchmark_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("tables")
    compare.compare("smoke", encodings=("nope",), out=out, show_progress=False, log=lambda _: None,
                  command="posenc compare --profile smoke --encodings nope")  # fmt: skip
    return out


def test_a_block_is_rendered_from_the_records_and_run_info(results):
    script = _script()
    text = script.render(results, with_claims=True)
    first = text.splitlines()[0]
    assert first.startswith("`posenc compare --profile smoke --encodings nope`: 6 runs, seeds 0, 1, 2")
    assert f"benchmark version {BENCHMARK_VERSION}" in first and "s wall end to end" in first
    # smoke trains copy on n <= 6 (rows of 14 tokens) and tests n in {4, 6, 9, 12, 24} (10, 14, 20, 26
    # and 50 tokens): no length in the 1.25x bucket
    assert (
        "| encoding | copy in | copy 1.5x | copy 2x | copy 4x | copy prefix 1.5x | copy prefix 2x | copy prefix 4x "
        "| copy tf-tok 1.5x | copy tf-tok 2x | copy tf-tok 4x | LM bpb@L |" in text
    )
    assert "| nope |" + " n.c. |" * 10 in text  # smoke's copy runs do not converge
    assert "| source | claim | paper | ours | verdict |" in text
    assert "| source |" not in script.render(results, with_claims=False)


def test_replace_and_check(results, tmp_path, monkeypatch):
    script = _script()
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- compare-quick:start -->\nold\n<!-- compare-quick:end -->\noutro\n")
    monkeypatch.setattr(script, "FILES", {doc: False})
    assert script.main(["--results", str(results), "--block", "quick", "--check"]) == 1
    assert script.main(["--results", str(results), "--block", "quick"]) == 0
    text = doc.read_text()
    assert text.startswith("intro\n<!-- compare-quick:start -->\n`posenc compare") and text.endswith(
        "end -->\noutro\n"
    )
    assert script.main(["--results", str(results), "--block", "quick", "--check"]) == 0  # idempotent
    doc.write_text("no markers\n<!-- compare-quick:start -->\n")
    with pytest.raises(SystemExit, match="expected one"):
        script.main(["--results", str(results), "--block", "quick"])


@pytest.mark.parametrize(
    ("path", "blocks"),
    [
        ("README.md", ("quick",)),
        ("docs/benchmark.md", ("quick", "standard", "notes", "paper-nope-cpu", "paper-alibi-cpu")),
        ("docs/multiaxis.md", ("grid",)),
    ],
)
def test_the_shipped_tables_name_the_benchmark_version_of_their_records(path, blocks):
    """Each shipped table names the benchmark version its records were written under, and one of an
    earlier version than this posenc runs says so (published as that version's results, not re-run):
    a table never passes for a run of semantics it was not made with."""
    text = (ROOT / path).read_text(encoding="utf-8")
    for block in blocks:
        body = text.split(f"<!-- compare-{block}:start -->")[1].split(f"<!-- compare-{block}:end -->")[0]
        if body.strip("\n") == _script().withdrawn(block).strip("\n"):
            continue  # no table stands there (tests/repo/test_published_tables.py checks it has no records)
        header = body.strip().splitlines()[0]
        version = int(re.search(r"benchmark version (\d+)", header).group(1))
        records, _ = _script().shipped_records.load(block)
        assert version == records[0]["spec"]["benchmark"], (path, block, header)
        if version == BENCHMARK_VERSION:
            assert re.search(rf"benchmark version {BENCHMARK_VERSION};", header), (path, block, header)
        else:
            assert f"published before version {BENCHMARK_VERSION}, not re-run under it" in header, (
                path,
                block,
            )
        assert "| encoding |" in body and "mean [95% interval]" in body


def test_the_tuning_block_shows_every_candidate(monkeypatch):
    from posenc.compare import tuning

    candidates = [
        {
            "lr": 1e-3,
            "metric": "valid_exact_match",
            "converged": True,
            "steps_to_converge": 450,
            "final": 0.996,
        },
        {
            "lr": 4e-3,
            "metric": "valid_exact_match",
            "converged": False,
            "steps_to_converge": None,
            "final": 0.5,
        },
    ]
    entry = {"profiles": ["quick", "standard"], "label": "rope", "task": "copy", "lr": 1e-3,
             "why": "converged in the fewest steps (450)", "candidates": candidates}  # fmt: skip
    table = {"commands": ["python scripts/ship_tuning.py --profile quick"], "entries": {"k" * 16: entry}}
    monkeypatch.setattr(tuning, "shipped_table", lambda: table)
    text = _script().render_tuning()
    assert "| quick, standard | copy | rope | 0.001 | 0.001: 450 steps; 0.004: n.c. (50%) |" in text


def test_the_docs_show_an_absolute_out_directory_by_its_name():
    shown = _script().shown_command
    assert (
        shown("posenc compare --profile notes --out /home/me/runs/notes")
        == "posenc compare --profile notes --out notes"
    )
    assert shown("posenc compare --out results-quick") == "posenc compare --out results-quick"
