"""``posenc.compare.compare`` end to end on the smoke profile: a grid's records, summaries, report section
and figures; what it checks before anything runs (the machine, the executor, classes only this process
knows) and the configs it leaves beside the records. One run is ``test_work.py``, the grid
``test_grid.py``, the command ``tests/unit/cli/test_compare_command.py``."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import sys

import pytest
import torch

from posenc.compare import CONFIG_DIR, CONFIG_FILE, compare, compare_until_decided
from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import build_grid
from posenc.compare.profile import (
    PROFILES,
    ProfileOptions,
    get_profile,
    load_profile,
)
from posenc.compare.ray_executor import INSTALL_HINT, RayNotInstalled
from posenc.compare.runner import run_grid
from posenc.core.errors import PosencError
from posenc.records.spec import RunSpec
from posenc.records.store import ResultStore, checksum
from posenc.results import claims as claims_module
from posenc.results import stats, tables, write_outputs
from posenc.results.claims import claims
from posenc.results.report_section import render
from posenc.tasks import task_registry

SMOKE = get_profile("smoke")


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


# ---------------------------------------------------------------------------
# A grid run on the smoke profile: its records, its summaries, its report section.
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


def test_finished_runs_are_skipped(smoke_results):
    outcome = run_grid(
        smoke_specs(), ResultStore(smoke_results), LocalExecutor(1), show_progress=False, log=lambda _: None
    )
    assert len(outcome.skipped) == 4 and not outcome.done


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


# ---------------------------------------------------------------------------
# What `compare` checks before it runs, and what it leaves in the results directory.
# ---------------------------------------------------------------------------


def test_compare_names_the_machine_settings_as_the_caller_does(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda = load_profile("smoke", (), ProfileOptions(device="cuda"))
    quiet = {"show_progress": False, "log": lambda _: None, "out": tmp_path / "out"}
    with pytest.raises(PosencError, match=r"^--device cuda: no CUDA device here"):
        compare(cuda, names={"device": "--device"}, **quiet)
    with pytest.raises(PosencError, match=r"^device cuda: no CUDA device here"):
        compare(cuda, **quiet)
    with pytest.raises(PosencError, match=r"^--threads must be an integer in \[1, "):
        compare("smoke", threads=0, names={"threads": "--threads"}, **quiet)
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_ray_not_installed_is_bad_input_from_the_library(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(RayNotInstalled) as caught:
        compare("smoke", executor="ray", out=tmp_path / "out", show_progress=False, log=lambda _: None)
    assert isinstance(caught.value, PosencError) and isinstance(caught.value, ImportError)
    assert str(caught.value) == INSTALL_HINT and not (tmp_path / "out").exists()


def test_config_toml_describes_the_grid_of_the_summaries_when_two_invocations_share_out(tmp_path):
    """Found: two invocations on one --out left config.toml describing the other's grid. Here B runs
    from start to end while A is between its runs and its summaries (the interleaving that did it)."""
    out = tmp_path / "out"
    base = dataclasses.replace(load_profile("smoke", ["tasks=['copy']", "encodings=['nope']"]), workers=1)
    first, second = (dataclasses.replace(base, seeds=(seed,), name=f"seed{seed}") for seed in (0, 1))
    quiet = dict(show_progress=False, log=lambda _: None)

    def outputs_after_another_invocation(path, *, run_ids, profile, log, **declared):
        compare(second, out=out, outputs=lambda p, **kw: write_outputs(p, report=False, **kw), **quiet)
        return write_outputs(path, report=False, run_ids=run_ids, profile=profile, log=log, **declared)

    compare(first, out=out, outputs=outputs_after_another_invocation, **quiet)
    grid = json.loads((out / "grid.json").read_text())
    stored = load_profile(out / CONFIG_FILE)
    assert stored.seeds == (0,) and grid["profile"] == "seed0"
    assert sorted(s.run_id for s in build_grid(stored).specs) == grid["run_ids"]
    run = json.loads((out / "run.json").read_text())
    assert (
        run["config"] == CONFIG_FILE
        and (out / run["invocation_config"]).read_text() == (out / CONFIG_FILE).read_text()
    )
    own = sorted(p.name for p in (out / CONFIG_DIR).iterdir())  # each invocation's own, both kept
    assert len(own) == 2 and {load_profile(out / CONFIG_DIR / name).seeds for name in own} == {(0,), (1,)}


def test_a_class_only_this_process_knows_runs_in_this_process_only(tmp_path):
    """A task registered from a function (or a notebook's __main__) cannot go to a worker: the grid
    runs it in-process (one worker), and refuses more workers before anything runs."""
    import torch

    from posenc.compare import compare
    from posenc.tasks import FIRST_SYMBOL

    class Local(task_registry.Task):
        description = "x; y = x"
        vocab_size = FIRST_SYMBOL + 4
        chance = 0.25

        def example(self, n, generator):
            x = torch.randint(0, 4, (n,), generator=generator) + FIRST_SYMBOL
            return x, x.clone()

    task_registry.register_task("local_task", Local)
    try:
        grid = build_grid(PROFILES["smoke"], encodings=("nope",), tasks=("local_task",), seeds=(0,))
        assert grid.specs[0].task == "local_task" and grid.specs[0].imports == ()
        assert "cannot be imported by another process" in grid.local_only[0]
        kwargs = {"encodings": ("nope",), "tasks": ("local_task",), "seeds": (0, 1), "show_progress": False,
                  "log": lambda _: None}  # fmt: skip
        with pytest.raises(PosencError, match="cannot be imported by another process.*--workers 1"):
            compare("smoke", out=tmp_path / "two", workers=2, **kwargs)
        assert not (tmp_path / "two" / "runs").exists()
        result = compare("smoke", out=tmp_path / "one", workers=1, **kwargs)
        assert len(result.outcome.done) == 2 and not result.outcome.failed
    finally:
        task_registry.unregister_task("local_task")


# ---------------------------------------------------------------------------
# --until decided: seeds look by look until the declared questions are decided.
# ---------------------------------------------------------------------------


def _lm_only():
    """Smoke's LM alone (its question: sinusoidal against NoPE in bits per byte), looks at 3, 4 and 5."""
    return load_profile("smoke", ["tasks=['lm']", "scalings=[]", "finetune=0"])


def test_until_decided_stops_by_itself_once_decided_with_the_decisions_kept(tmp_path):
    seen = []

    def decide(out, run_ids, questions, plan):  # decided at the second look
        seen.append(len(run_ids))
        return {"all_decided": len(seen) == 2, "questions": []}

    result = compare_until_decided(
        _lm_only(),
        decide=decide,
        out=tmp_path,
        show_progress=False,
        log=lambda _: None,
        outputs=write_outputs,
    )
    assert seen == [6, 8] and not result.outcome.failed  # 2 encodings x 3, then x 4 seeds; never 5
    assert result.until["stopped"] == "decided" and result.until["looks_run"] == [3, 4]
    summary = json.loads((tmp_path / "summary.json").read_text())
    block = summary["primary"]
    assert block["mode"] == "sequential" and block["looks_done"] == [3, 4] and block["family"] == 1
    assert block["questions"][0]["question"] == "sinusoidal vs nope: lm bpb_train"
    assert len(block["questions"][0]["p_looks"]) == 2 and "decided" in block["questions"][0]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["until"]["stopped"] == "decided" and run["until"]["plan"]["looks"] == [3, 4, 5]
    assert "--until decided: looks run at 3, 4 seeds per encoding; stopped: decided" in "\n".join(
        result.notes()
    )
    # resumed on the same plan: nothing runs again; on another plan: refused before any run
    again = compare_until_decided(
        _lm_only(),
        decide=lambda *a: {"all_decided": True},
        out=tmp_path,
        show_progress=False,
        log=lambda _: None,
    )
    assert not again.outcome.done and len(again.outcome.skipped) == 6
    other = load_profile("smoke", ["tasks=['lm']", "scalings=[]", "finetune=0", "sequential.looks=[3, 5]"])
    with pytest.raises(PosencError, match="another plan"):
        compare_until_decided(other, decide=decide, out=tmp_path, show_progress=False, log=lambda _: None)


def test_until_decided_stops_where_the_budget_would_be_passed(tmp_path):
    result = compare_until_decided(
        _lm_only(), decide=lambda *a: {"all_decided": False}, budget=0.001, out=tmp_path,
        show_progress=False, log=lambda _: None,
    )  # fmt: skip
    assert result.until["stopped"] == "budget" and result.until["looks_run"] == [3]  # the first look always
    with pytest.raises(PosencError, match=r"--until decided needs declared questions and a plan"):
        compare_until_decided(get_profile("standard"), decide=lambda *a: {}, out=tmp_path / "s")
