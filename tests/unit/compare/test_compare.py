"""The benchmark machinery on the smoke profile: determinism, grid, store, summaries, report, CLI."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import pickle

import pytest
from click.testing import CliRunner

import posenc
from posenc.cli import main
from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import RANDOMIZED_PAPER_MAX_LEN, build_grid, eval_length, train_length
from posenc.compare.profile import PROFILES, get_profile
from posenc.compare.runner import run_grid
from posenc.compare.trainer import learning_rate
from posenc.compare.work import execute
from posenc.records.spec import RunSpec
from posenc.records.store import ResultStore, checksum
from posenc.results import claims as claims_module
from posenc.results import stats, tables
from posenc.results.claims import claims
from posenc.results.report_section import render

SMOKE = get_profile("smoke")


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def _numbers(payload: dict) -> dict:
    return {"loss": payload["train"]["loss"], "eval": payload["eval"]}


# ---------------------------------------------------------------------------
# Determinism and fairness.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["copy", "lm"])
def test_same_seed_gives_identical_numbers_and_another_seed_does_not(task):
    (spec,) = smoke_specs(encodings=("sinusoidal",), tasks=(task,))
    first, second = execute(spec), execute(spec)
    assert _numbers(first) == _numbers(second)
    other = execute(dataclasses.replace(spec, seed=1))
    assert other["train"]["loss"] != first["train"]["loss"]


def test_every_encoding_sees_the_same_eval_data():
    a, b = (execute(s) for s in smoke_specs(tasks=("copy",)))
    assert a["eval"]["default"]["eval_data_sha256"] == b["eval"]["default"]["eval_data_sha256"]
    assert a["eval"]["default"]["lengths"] == list(SMOKE.eval.lengths)


def test_lm_run_records_python_version_and_data_hash():
    (spec,) = smoke_specs(encodings=("nope",), tasks=("lm",))
    payload = execute(spec)
    data = payload["data"]
    assert data["python_version"].count(".") == 2 and len(data["sha256"]) == 64
    ev = payload["eval"]["default"]
    assert ev["lengths"] == list(SMOKE.eval.lm_lengths)
    assert ev["ratio_to_train"][ev["lengths"].index(SMOKE.lm_train.max_len)] == pytest.approx(1.0)
    assert (
        len(ev["loss_by_position"]["nats_per_byte"]) == SMOKE.eval.position_multiple * SMOKE.lm_train.max_len
    )
    assert len(ev["lastk"]["nats_per_byte"]) == len(SMOKE.eval.lastk_contexts)
    assert payload["timing"]["steps_per_second"] > 0 and payload["timing"]["wall_seconds"] > 0


def test_learning_rate_schedule():
    (spec,) = smoke_specs(encodings=("nope",), tasks=("copy",))
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, steps=200, warmup_steps=20))
    lrs = [learning_rate(s, spec) for s in range(200)]
    assert lrs[19] == pytest.approx(spec.train.lr)  # end of warm-up: peak
    assert all(a < b for a, b in zip(lrs[:19], lrs[1:20]))  # linear warm-up rises
    assert all(a >= b for a, b in zip(lrs[20:], lrs[21:]))  # cosine decays
    assert lrs[-1] == pytest.approx(spec.train.min_lr_ratio * spec.train.lr, rel=1e-3)


def test_rope_scalings_are_evaluated_without_retraining():
    (spec,) = smoke_specs(encodings=("rope",), tasks=("lm",))
    spec = dataclasses.replace(spec, scalings=("linear:2", "yarn:4"))
    payload = execute(spec)
    assert set(payload["eval"]) == {"default", "linear:2", "yarn:4"}
    default, linear = payload["eval"]["default"], payload["eval"]["linear:2"]
    assert default["nats_per_byte"] != linear["nats_per_byte"]  # the scaling changed the model's outputs


def test_randomized_positions_variant_runs_and_differs():
    (spec,) = smoke_specs(encodings=("sinusoidal",), tasks=("copy",))
    rand = dataclasses.replace(spec, randomized_max_len=64)
    assert rand.label == "sinusoidal+rand" and rand.run_id != spec.run_id
    assert execute(rand)["train"]["loss"] != execute(spec)["train"]["loss"]


# ---------------------------------------------------------------------------
# Profiles and grids.
# ---------------------------------------------------------------------------


def test_quick_profile_meets_the_brief():
    grid = build_grid(get_profile("quick"))
    labels = {s.label for s in grid.specs}
    # the five encodings the NoPE paper ranks, the ALiBi paper's four among them
    assert labels == set(get_profile("paper-nope").encodings) == {"sinusoidal", "nope", "rope", "alibi", "t5"}
    assert set(get_profile("paper-alibi").encodings) <= labels
    # learned embeddings and randomized RoPE run in standard (quick's 10 minutes: docs/benchmark.md)
    assert {"learned", "rope+rand"} <= {
        s.label for s in build_grid(get_profile("standard"), tasks=("copy",)).specs
    }
    assert {s.task for s in grid.specs} == {"copy", "passkey", "lm"}
    assert len(get_profile("quick").seeds) >= 3
    rope_lm = [s for s in grid.specs if s.label == "rope" and s.task == "lm"]
    assert rope_lm and all(s.finetune > 0 and "yarn:4" in s.scalings for s in rope_lm)
    rope_copy = [s for s in grid.specs if s.label == "rope" and s.task == "copy"]
    assert all(
        "yarn:4" not in s.scalings and "dynamic:4" in s.scalings for s in rope_copy
    )  # no fine-tune on tasks
    assert all(s.encoding in posenc.ENCODINGS for s in grid.specs)


def test_standard_covers_the_registry_and_full_adds_scaled_and_seeds():
    standard = build_grid(get_profile("standard"), tasks=("copy",))
    # every sequence encoding; the ones whose positions have axes (grids) run on the grid task
    sequence = {name for name, cls in posenc.ENCODINGS.items() if cls.position_axes == 1}
    assert {s.encoding for s in standard.specs} == sequence and len(sequence) >= 19
    full = build_grid(get_profile("full"), tasks=("copy",))
    assert {s.seed for s in full.specs} == {0, 1, 2, 3, 4}
    assert all(len(p.seeds) >= 3 for p in PROFILES.values())
    t5 = [s for s in full.specs if s.encoding == "t5" and s.seed == 0 and not s.randomized_max_len]
    assert {s.variant for s in t5} == {"default", "scaled"}
    scaled = next(s for s in t5 if s.variant == "scaled")
    assert scaled.encoding_config["max_distance"] == train_length("copy", scaled.train)
    assert {s.randomized_max_len for s in full.specs if s.encoding == "t5" and s.seed == 0} >= {
        None,
        RANDOMIZED_PAPER_MAX_LEN,
    }


def test_learned_table_keeps_untrained_rows_for_long_evaluation():
    (spec,) = smoke_specs(encodings=("learned",), tasks=("copy",))
    t_len = train_length("copy", spec.train)
    e_len = eval_length("copy", spec.train, spec.eval)
    assert spec.encoding_config == {"max_len": t_len, "extra_rows": e_len - t_len}
    assert execute(spec)["eval"]["default"]["lengths"][-1] == SMOKE.eval.lengths[-1]  # no error, no clamp


def test_unknown_names_are_rejected_with_the_parameter_named():
    with pytest.raises(ValueError, match="encoding"):
        build_grid(SMOKE, encodings=("ropee",))
    with pytest.raises(ValueError, match="task"):
        build_grid(SMOKE, tasks=("cpy",))
    with pytest.raises(ValueError, match="profile"):
        get_profile("quik")


def test_spec_pickles_and_round_trips_through_json():
    for spec in build_grid(get_profile("full"), tasks=("copy", "lm")).specs[:40]:
        assert pickle.loads(pickle.dumps(spec)) == spec
        again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
        assert again == spec and again.run_id == spec.run_id
    a, b = (
        smoke_specs(encodings=("nope",), tasks=("copy",))[0],
        smoke_specs(encodings=("nope",), tasks=("lm",))[0],
    )
    assert a.run_id != b.run_id
    assert (
        dataclasses.replace(a, threads=2, profile="x").run_id == a.run_id
    )  # execution details are not identity


def test_a_run_id_is_worked_out_once_and_not_carried_to_another_spec(monkeypatch):
    spec = smoke_specs(encodings=("nope",), tasks=("copy",))[0]
    calls = []
    identity = RunSpec.identity
    monkeypatch.setattr(RunSpec, "identity", lambda self: calls.append(1) or identity(self))
    first = spec.run_id
    assert [spec.run_id for _ in range(5)] == [first] * 5 and len(calls) == 1
    other = dataclasses.replace(spec, seed=spec.seed + 1)
    assert other.run_id != first and len(calls) == 2
    assert pickle.loads(pickle.dumps(spec)).run_id == first
    assert "_run_id" not in spec.to_dict() and "_run_id" not in spec.identity()


# ---------------------------------------------------------------------------
# Store, executor, summaries, report, CLI.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    outcome = run_grid(
        smoke_specs(), ResultStore(out), LocalExecutor(1), show_progress=False, log=lambda _: None
    )
    assert len(outcome.done) == 4 and not outcome.failed
    return out


def test_records_are_complete_and_checksummed(smoke_results):
    records = ResultStore(smoke_results).records()
    assert len(records) == 4
    for rec in records:
        assert rec["checksum"] == checksum(rec)
        assert {"python", "torch", "posenc"} <= set(rec["versions"])
        assert RunSpec.from_dict(rec["spec"]).run_id == rec["run_id"]
        assert rec["result"]["timing"]["steps_per_second"] > 0


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


def test_finished_runs_are_skipped(smoke_results):
    outcome = run_grid(
        smoke_specs(), ResultStore(smoke_results), LocalExecutor(1), show_progress=False, log=lambda _: None
    )
    assert len(outcome.skipped) == 4 and not outcome.done


def _double(spec, advance):  # module level: picklable for worker processes
    advance(3)
    if spec.seed == 13:
        raise RuntimeError("boom")
    return {"seed": spec.seed * 2}


def test_process_pool_executor_yields_every_result_and_reports_failures():
    base = smoke_specs(encodings=("nope",), tasks=("copy",))[0]
    specs = [dataclasses.replace(base, seed=s) for s in (1, 2, 13)]
    seen: list[int] = []
    results = dict(
        (spec.seed, result)
        for spec, result in LocalExecutor(2).map(_double, specs, lambda s, u: seen.append(u))
    )
    assert results[1] == {"seed": 2} and results[2] == {"seed": 4}
    assert isinstance(results[13], RuntimeError)
    assert sum(seen) == 9


def test_buckets_average_the_right_lengths():
    # copy at n = 4, 6, 9, 12, 24 reads rows of 10, 14, 20, 26, 50 tokens; trained at n <= 6: 14
    ratios = [t / 14 for t in (10, 14, 20, 26, 50)]
    got = tables.bucket_values(ratios, [1.0, 0.5, 0.25, 0.75, 0.0])
    assert math.isnan(got.pop("1.25x"))  # no row in (14, 17.5] tokens
    assert got == {"in": 0.75, "1.5x": 0.25, "2x": 0.75, "4x": 0.0}
    assert math.isnan(tables.bucket_values([10 / 14], [1.0])["2x"])


def test_summary_table_csv_and_json(smoke_results):
    records = ResultStore(smoke_results).records()
    summary = tables.summarize(records)
    assert set(summary["rows"]) == {"sinusoidal", "nope"}
    assert summary["tasks"] == ["copy", "lm"]
    row = summary["rows"]["nope"]
    # Smoke runs are too short to solve copy: not converged, so no numbers; the LM plateaus at once.
    assert row["copy:em_in"]["n"] == 0 and row["copy:em_in"]["runs"] == 1 and row["copy:converged"] == 0
    assert tables.format_cell(row["copy:em_in"], True) == tables.NOT_CONVERGED
    lm = row["lm:ratio_2x"]
    # one seed: a mean but no interval (the seeds' spread is unseen), never a made-up one
    assert lm["n"] == 1 and math.isnan(lm["low"]) and math.isnan(lm["high"]) and lm["mean"] > 0
    assert tables.format_cell(lm, False).endswith("[one seed] 1/1")
    assert tables.format_cell(lm, False).startswith(f"{lm['mean']:.2f} [")
    assert "t interval over seeds" in summary["method"] and "Clopper-Pearson" in summary["method"]
    assert "Welch" in summary["test"] and "Benjamini-Hochberg" in summary["correction"]
    csv_text = tables.to_csv(records)
    header = csv_text.splitlines()[0].split(",")
    assert header[:3] == ["label", "encoding", "task"] and {"lr", "converged", "steps_to_converge"} <= set(
        header
    )
    assert len(csv_text.strip().splitlines()) == 1 + 4
    cell_rows = list(csv.DictReader(io.StringIO(tables.summary_csv(summary))))
    assert [r["column"] for r in cell_rows if r["label"] == "nope"] == [
        *stats.TASK_COLUMNS,
        *stats.LM_COLUMNS,
    ]
    ratio = next(r for r in cell_rows if r["label"] == "nope" and r["column"] == "ratio_2x")
    assert float(ratio["mean"]) == lm["mean"] and ratio["low"] == ratio["high"] == ""  # one seed: no interval
    assert ratio["n"] == "1" and ratio["seeds"] == "1" and ratio["converged"] == "True"
    not_conv = next(r for r in cell_rows if r["label"] == "nope" and r["column"] == "em_in")
    assert not_conv["mean"] == "" and not_conv["n"] == "0" and not_conv["converged"] == "False"
    assert json.loads(tables.to_json(summary))["rows"]["nope"]["copy:seeds"] == 1
    markdown = tables.markdown_table(summary)
    assert markdown.splitlines()[0].startswith("| encoding | copy in |") and "n.c." in markdown


def test_report_section_has_curves_table_and_claims(smoke_results):
    fragment = render(smoke_results)
    assert fragment.startswith('<section class="posenc-compare">') and fragment.endswith("</section>")
    # copy x3 (exact match, free-running prefix, teacher-forced tokens), LM ratio, last-k, loss by position
    assert fragment.count("data:image/png;base64,") == 6 and "Free-running correct prefix" in fragment
    assert "ALiBi paper" in fragment and "NoPE paper" in fragment
    assert "Ruoss" not in fragment  # no randomized runs in smoke: the claim is left out, not faked
    rows = claims(ResultStore(smoke_results).records())
    verdicts = {r["verdict"] for r in rows}
    # a smoke-sized model is far below every paper's scale: never a bare "disagrees"
    assert verdicts <= set(claims_module.VERDICTS) - {"disagrees"}
    assert all(r["scale"].startswith("paper: ") and "run: " in r["scale"] for r in rows if r["scale"])
    # smoke's copy runs did not converge; the NoPE paper trains for fixed steps, so they count as
    # they scored (a failure), not dropped
    copy_rows = [
        r for r in rows if "copy" in r["source"] and ("nope:" in r["claim"] or "sinusoidal:" in r["claim"])
    ]
    assert copy_rows and all(r["verdict"] != "not measured" and "fixed steps" in r["rule"] for r in copy_rows)
    assert "Not converged in-distribution" in fragment and "n.c." in fragment
    assert "<p>No finished runs" in render(smoke_results / "nowhere")


def test_cli_compare_smoke_json_then_resume(tmp_path):
    runner = CliRunner()
    args = [
        "compare",
        "--profile",
        "smoke",
        "--encodings",
        "nope",
        "--out",
        str(tmp_path),
        "--format",
        "json",
    ]
    first = runner.invoke(main, [*args, "--no-report"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert data["outcome"]["done"] == 6 and "nope" in data["summary"]["rows"]  # 3 seeds x (copy, LM)
    assert data["summary"]["rows"]["nope"]["lm:seeds"] == 3
    assert (tmp_path / "summary.csv").exists() and (tmp_path / "summary.json").exists()
    assert (tmp_path / "runs.csv").exists()
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["runs_done"] == 6 and info["wall_seconds"] > 0 and info["benchmark"] >= 2
    second = json.loads(runner.invoke(main, [*args, "--no-report"]).stdout)
    assert second["outcome"]["skipped"] == 6 and second["outcome"]["done"] == 0
    bad = runner.invoke(
        main, ["compare", "--profile", "smoke", "--encodings", "nopee", "--out", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "nope" in bad.output


def test_compare_writes_figures_the_section_page_and_calls_the_full_report(smoke_results, monkeypatch):
    import posenc.report.builder
    from posenc.results import write_outputs

    calls = []

    def fake_build_report(out_dir, **kwargs):  # the real one renders every figure: too slow for a unit test
        calls.append((out_dir, kwargs))
        return out_dir / "index.html"

    monkeypatch.setattr(posenc.report.builder, "build_report", fake_build_report)
    summary, files = write_outputs(smoke_results, report=True)
    assert set(summary["rows"]) == {"sinusoidal", "nope"}
    page = (smoke_results / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page
    assert len(list((smoke_results / "figures").glob("*.png"))) == 6
    assert (smoke_results / "figures" / "copy_free_prefix.png").is_file()
    full_report = posenc.report.benchmark_report(smoke_results)  # what `posenc compare` adds
    ((out_dir, kwargs),) = calls
    assert kwargs["results_dir"] == smoke_results and kwargs["encodings"] == ["nope", "sinusoidal"]
    assert str(full_report).endswith("index.html")


def test_summaries_show_only_the_latest_grid_of_a_reused_directory(smoke_results):
    store = ResultStore(smoke_results)
    every = store.records()
    try:
        store.write_grid([every[0]["run_id"]], "smoke")
        assert [r["run_id"] for r in store.records()] == [every[0]["run_id"]]
        assert len(store.records(latest_grid=False)) == len(every) == 4
    finally:
        (smoke_results / "grid.json").unlink()


def test_a_scaling_evaluated_without_its_fine_tune_is_its_own_labelled_cell(tmp_path):
    smoke = get_profile("smoke")
    (spec,) = build_grid(smoke, encodings=("rope",), tasks=("lm",), seeds=(0,)).specs
    assert "yarn:2" in spec.scalings and spec.finetune > 0
    plain = dataclasses.replace(spec, finetune=0)
    store = ResultStore(tmp_path)
    outcome = run_grid([spec, plain], store, LocalExecutor(1), show_progress=False, log=lambda _: None)
    assert len(outcome.done) == 2 and not outcome.failed
    rows = tables.summarize(store.records())["rows"]
    assert "rope[yarn:2]" in rows and "rope[yarn:2, no fine-tune]" in rows
    assert (
        rows["rope[yarn:2]"]["lm:ratio_2x"]["runs"]
        == 1
        == rows["rope[yarn:2, no fine-tune]"]["lm:ratio_2x"]["runs"]
    )
    assert (
        "rope[dynamic:2]" in rows and rows["rope[dynamic:2]"]["lm:ratio_2x"]["runs"] == 2
    )  # no fine-tune needed


def test_the_printed_table_shows_square_brackets_as_written(tmp_path):
    """Labels (rope[dynamic:4]) and the caption ([one seed]) hold square brackets: printed as data,
    never read as console markup (which dropped them)."""
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy",
                                       "--seeds", "0", "--no-report", "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the caption wraps at the console's width
    assert "[one seed]: no interval" in text and "(rope, rope[dynamic:4], ...)" in text
