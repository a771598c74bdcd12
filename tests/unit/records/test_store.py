"""The results store (posenc.records.store): a corrupt, malformed or oversized record is never read as a result; it is kept aside and its run done again, with one line said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from posenc.cli import main
from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import build_grid
from posenc.compare.profile import (
    get_profile,
)
from posenc.compare.runner import run_grid
from posenc.records.spec import RunSpec
from posenc.records.store import ResultStore, checksum
from posenc.results import tables
from posenc.results.report_section import render

SMOKE = get_profile("smoke")


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def _numbers(payload: dict) -> dict:
    return {"loss": payload["train"]["loss"], "eval": payload["eval"]}


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: "{not json",  # bad JSON
        lambda text: text.replace('"posenc.bench.run/1"', '"posenc.bench.run/0"'),  # wrong schema
        lambda text: text.replace('"exact_match": [', '"exact_match": [0.5, ', 1),  # checksum mismatch
        lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "result"}),  # missing key
    ],
)
def test_corrupt_record_is_detected_and_redone(tmp_path, damage):
    specs = smoke_specs(encodings=("nope",), tasks=("copy",))
    store = ResultStore(tmp_path)
    run_grid(specs, store, LocalExecutor(1), show_progress=False, log=lambda _: None)
    path = store.path_for(specs[0])
    good = path.read_text()
    path.write_text(damage(good))
    record, reason = store.load(specs[0])
    assert record is None and reason
    messages: list[str] = []
    outcome = run_grid(specs, store, LocalExecutor(1), show_progress=False, log=messages.append)
    assert outcome.redone and outcome.done == [specs[0].run_id]
    assert any("corrupt" in m for m in messages)
    redone = json.loads(path.read_text())
    assert _numbers(redone["result"]) == _numbers(json.loads(good)["result"])
    assert path.with_suffix(".json.corrupt").exists()  # kept aside, never trusted


def _eval(record: dict) -> dict:
    return record["result"]["eval"]


MALFORMED = {  # checksum-valid records another posenc version could have written under the same run id
    "eval is a string": lambda r: r["result"].update(eval="n/a"),
    "eval is empty": lambda r: r["result"].update(eval={}),
    "no exact_match": lambda r: _eval(r)["default"].pop("exact_match"),
    "exact_match too short": lambda r: _eval(r)["default"].update(exact_match=[0.5]),
    "exact_match holds text": lambda r: _eval(r)["default"]["exact_match"].__setitem__(0, "high"),
    "other lengths": lambda r: _eval(r)["default"].update(lengths=[1, 2, 3, 4, 5, 6, 7]),
    "no train loss": lambda r: r["result"]["train"].pop("loss"),
    "timing is a list": lambda r: r["result"].update(timing=[]),
    "no label": lambda r: r.pop("label"),
}


@pytest.fixture(scope="module")
def copy_record(tmp_path_factory):
    """One finished nope/copy run: (its spec, the record's text)."""
    spec = smoke_specs(encodings=("nope",), tasks=("copy",))[0]
    store = ResultStore(tmp_path_factory.mktemp("one"))
    run_grid([spec], store, LocalExecutor(1), show_progress=False, log=lambda _: None)
    return spec, store.path_for(spec).read_text()


def _plant_malformed(root, spec, text, damage) -> dict:
    """Write the record with ``damage`` applied and its checksum recomputed (so only the schema is wrong)."""
    record = json.loads(text)
    damage(record)
    record["checksum"] = checksum(record)
    path = ResultStore(root).path_for(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


@pytest.mark.parametrize("what", list(MALFORMED))
def test_checksum_valid_but_malformed_record_is_quarantined_and_redone(tmp_path, copy_record, what):
    """Found: such a record crashed compare and report (AttributeError/KeyError) on every rerun,
    or (eval: {}) silently dropped its seed from the table."""
    spec, good = copy_record
    _plant_malformed(tmp_path, spec, good, MALFORMED[what])
    store = ResultStore(tmp_path)
    record, reason = store.load(spec)
    assert record is None and reason, what
    assert store.records() == []  # never read as a result (and never crashes a reader)
    messages: list[str] = []
    outcome = run_grid([spec], store, LocalExecutor(1), show_progress=False, log=messages.append)
    assert outcome.done == [spec.run_id] and [r for r, _ in outcome.redone] == [spec.run_id]
    assert len([m for m in messages if "corrupt" in m]) == 1, messages  # one log line
    assert store.path_for(spec).with_suffix(".json.corrupt").exists()
    assert _numbers(json.loads(store.path_for(spec).read_text())["result"]) == _numbers(
        json.loads(good)["result"]
    )
    summary = tables.summarize(store.records())
    assert summary["rows"]["nope"]["copy:seeds"] == 1  # the seed is in the table, not dropped


def test_report_and_summaries_skip_a_malformed_record_with_one_warning(tmp_path, copy_record):
    spec, good = copy_record
    _plant_malformed(tmp_path, spec, good, MALFORMED["eval is a string"])
    warnings: list[str] = []
    assert ResultStore(tmp_path).records(warn=warnings.append) == []
    assert ResultStore(tmp_path).records(warn=warnings.append) == []  # the same file: said once
    assert len(warnings) == 1 and "result.eval" in warnings[0] and str(spec.run_id) in warnings[0]
    assert "<p>No finished runs" in render(tmp_path)  # the report section does not crash
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy",
                                       "--seeds", "0", "--no-report", "--format", "json", "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outcome"]["redone"] and data["summary"]["rows"]["nope"]["copy:seeds"] == 1


def test_a_huge_record_file_is_refused_unread(tmp_path, copy_record):
    """A file far larger than any record (here a sparse 2 GiB one) is corrupt, not loaded."""
    from posenc.records.files import MAX_RECORD_BYTES

    spec, _ = copy_record
    path = ResultStore(tmp_path).path_for(spec)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as handle:
        handle.truncate(max(2 << 30, MAX_RECORD_BYTES + 1))
    record, reason = ResultStore(tmp_path).load(spec)
    assert record is None and "larger than" in reason


def test_the_results_lock_can_be_taken_again_by_its_holder(tmp_path):
    from posenc.records.store import ResultStore

    store = ResultStore(tmp_path)
    with store.lock(), store.lock():  # would wait forever on a second flock of its own
        (tmp_path / "inside").write_text("x")
    assert Path(tmp_path / "inside").exists()
