"""Learning-rate choice per encoding: in-distribution validation only, recorded, never test lengths."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from posenc import compare
from posenc.compare import tuning
from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.runner import run_grid
from posenc.compare.work import tune_execute
from posenc.records.spec import BENCHMARK_VERSION
from posenc.records.store import ResultStore
from posenc.tasks import synthetic, task_registry, text

SMOKE = dataclasses.replace(get_profile("smoke"), lr_grid=(1e-3, 3e-3))


def _specs(**narrow):
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def _forbid_test_data(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an evaluation set was read while choosing a learning rate")

    monkeypatch.setattr(synthetic, "eval_batch", refuse)
    monkeypatch.setattr(task_registry, "eval_batch", refuse)
    monkeypatch.setattr(text, "nonoverlapping_windows", refuse)
    monkeypatch.setattr(text, "lastk_windows", refuse)


@pytest.mark.parametrize("task", ["copy", "lm"])
def test_a_candidate_never_reads_an_evaluation_set(monkeypatch, task):
    (spec,) = _specs(encodings=("nope",), tasks=(task,))
    _forbid_test_data(monkeypatch)
    for candidate in tuning.candidates(spec, SMOKE.lr_grid):
        result = tune_execute(candidate)
        # the held-out checks and which classes ran (result.code), nothing of an evaluation
        assert set(result) == {"lr", "train", "code"} and result["lr"] == candidate.train.lr


def test_the_choice_does_not_depend_on_the_evaluation_lengths(tmp_path):
    other = dataclasses.replace(SMOKE, eval=dataclasses.replace(SMOKE.eval, lengths=(3, 30, 60), samples=4))
    a = build_grid(SMOKE, encodings=("nope",), tasks=("copy",), seeds=(0,)).specs[0]
    b = build_grid(other, encodings=("nope",), tasks=("copy",), seeds=(0,)).specs[0]
    assert a.run_id != b.run_id  # different benchmarks ...
    assert tuning.tuning_key(a) == tuning.tuning_key(b)  # ... the same choice
    assert [c.run_id for c in tuning.candidates(a, (1e-3, 3e-3))] == [
        c.run_id for c in tuning.candidates(b, (1e-3, 3e-3))
    ]
    assert all(
        c.eval == tuning.TUNE_EVAL and c.seed == tuning.TUNE_SEED for c in tuning.candidates(a, (1e-3,))
    )
    # Nor on the seed being evaluated: every seed shares one choice.
    assert tuning.tuning_key(a) == tuning.tuning_key(dataclasses.replace(a, seed=7))


def _result(lr, converged, steps, values, metric="valid_exact_match"):
    return {"lr": lr, "train": {"converged": converged, "steps_to_converge": steps if converged else None,
                                "steps": steps, "checks": {"step": list(range(len(values))), metric: values}}}  # fmt: skip


def test_selection_rules():
    # Tasks: fewest steps among converged candidates, whatever their final numbers.
    lr, why = tuning.select([_result(1e-3, True, 400, [0.5, 1.0]), _result(2e-3, True, 200, [0.99]),
                             _result(4e-3, False, 600, [0.98])])  # fmt: skip
    assert lr == 2e-3 and "fewest steps" in why
    # None converged: the highest final held-out exact match.
    lr, _ = tuning.select([_result(1e-3, False, 600, [0.2, 0.4]), _result(2e-3, False, 600, [0.6, 0.5])])
    assert lr == 2e-3
    # LM: the lowest held-out loss reached.
    lr, _ = tuning.select([_result(1e-3, False, 600, [3.0, 2.5], "valid_loss"),
                           _result(2e-3, True, 300, [3.0, 2.6], "valid_loss")])  # fmt: skip
    assert lr == 1e-3


def test_compare_tunes_caches_and_records_the_choice(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "shipped_table", lambda: {"entries": {}})
    result = compare.compare(SMOKE, encodings=("nope",), tasks=("copy",), seeds=(0, 1), out=tmp_path,
                           show_progress=False, log=lambda _: None)  # fmt: skip
    assert not result.outcome.failed
    records = ResultStore(tmp_path).records()
    assert len(records) == 2 and len({r["spec"]["train"]["lr"] for r in records}) == 1
    assert all(r["spec"]["train"]["lr"] in SMOKE.lr_grid for r in records)
    assert all("in-distribution validation" in r["spec"]["lr_source"] for r in records)
    cached = ResultStore(tmp_path / "tuning", problem=tuning.tune_problem).records()
    assert sorted(r["spec"]["train"]["lr"] for r in cached) == sorted(SMOKE.lr_grid)
    assert result.tuning is not None and len(result.tuning.done) == len(SMOKE.lr_grid)
    # A second invocation reuses the cached candidates (nothing tuned again).
    again = compare.compare(SMOKE, encodings=("nope",), tasks=("copy",), seeds=(0, 1), out=tmp_path,
                          show_progress=False, log=lambda _: None)  # fmt: skip
    assert again.tuning is None and len(again.outcome.skipped) == 2


def test_shipped_choices_are_used_and_named(tmp_path, monkeypatch):
    (spec,) = _specs(encodings=("nope",), tasks=("copy",))
    key = tuning.tuning_key(spec)
    entry = {"label": "nope", "task": "copy", "lr": 3e-3, "why": "a test", "candidates": []}
    monkeypatch.setattr(tuning, "shipped_table", lambda: {"command": "x", "entries": {key: entry}})
    compare.compare(SMOKE, encodings=("nope",), tasks=("copy",), seeds=(0,), out=tmp_path,
                  show_progress=False, log=lambda _: None)  # fmt: skip
    (record,) = ResultStore(tmp_path).records()
    assert record["spec"]["train"]["lr"] == 3e-3 and "shipped" in record["spec"]["lr_source"]
    assert not (tmp_path / "tuning" / "runs").exists()


def test_the_shipped_table_matches_the_profiles_it_names():
    table = tuning.shipped_table()
    for key, entry in table["entries"].items():
        assert entry["profiles"] and len(key) == 16
        for name in entry["profiles"]:
            assert entry["lr"] in get_profile(name).lr_grid
        assert entry["lr"] in {c["lr"] for c in entry["candidates"]}


def _published_version(name: str) -> int:
    """The benchmark version docs/benchmark.md publishes the profile's table under."""
    text = (Path(__file__).parents[3] / "docs" / "benchmark.md").read_text(encoding="utf-8")
    command = "`posenc compare`:" if name == "quick" else f"`posenc compare --profile {name} --out {name}`:"
    found = re.search(re.escape(command) + r"[^\n]*?benchmark version (\d+)", text)
    assert found, f"docs/benchmark.md publishes no table of {name}"
    return int(found.group(1))


@pytest.mark.parametrize("name", ["quick", "standard", "notes"])
def test_every_choice_quick_standard_and_notes_need_is_shipped(name):
    """A fresh clone's posenc compare never tunes the default profile: every tuning key of its
    grid has a shipped choice, listed under this profile (rerun scripts/ship_tuning.py after
    changing the profile). A profile whose published table is from an older benchmark version
    may lack them (its next run tunes first), and docs/benchmark.md says so."""
    prof = get_profile(name)
    entries = tuning.shipped_table()["entries"]
    missing = [
        (spec.label, spec.task)
        for spec in build_grid(prof).specs
        if not (
            (key := tuning.tuning_key(spec, dict(prof.tune_share))) in entries
            and name in entries[key]["profiles"]
        )
    ]
    if name == "quick" or _published_version(name) == BENCHMARK_VERSION:
        assert not missing, (name, missing[:5])
    elif missing:
        text = (Path(__file__).parents[3] / "docs" / "benchmark.md").read_text(encoding="utf-8")
        assert f"a version-{BENCHMARK_VERSION} run of `--profile {name}` tunes first" in " ".join(
            text.split()
        )


def test_a_one_rate_grid_runs_no_candidate(tmp_path):
    one = dataclasses.replace(SMOKE, lr_grid=(2e-3,))
    result = compare.compare(one, encodings=("nope",), tasks=("copy",), seeds=(0,), out=tmp_path,
                           show_progress=False, log=lambda _: None)  # fmt: skip
    assert result.tuning is None and not (tmp_path / "tuning").exists()
    (record,) = ResultStore(tmp_path).records()
    assert record["spec"]["train"]["lr"] == 2e-3 and "only candidate" in record["spec"]["lr_source"]


def test_tuning_records_are_resumable_like_runs(tmp_path):
    (spec,) = _specs(encodings=("nope",), tasks=("copy",))
    store = tuning.tuning_store(tmp_path)
    cands = tuning.candidates(spec, SMOKE.lr_grid)
    first = run_grid(
        cands, store, LocalExecutor(1), show_progress=False, log=lambda _: None, work_fn=tune_execute
    )
    again = run_grid(
        cands, store, LocalExecutor(1), show_progress=False, log=lambda _: None, work_fn=tune_execute
    )
    assert len(first.done) == len(cands) and len(again.skipped) == len(cands) and not again.done
