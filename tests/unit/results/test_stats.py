"""Cell statistics: means and 95% intervals against hand-computed cases; verdicts use them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.results import claims, stats
from posenc.results.stats import Cell


def test_one_unit_per_seed_is_the_t_interval_of_the_seeds():
    """Three seeds, one unit each: the t interval of scipy's one-sample t test (2 df, 4.30 x s /
    sqrt(3)), not the seeds' min-max (a 75% interval)."""
    from scipy import stats as sp

    values = np.array([0.0, 0.3, 0.9])
    mean, low, high = stats.interval(values[:, None], rate=False)
    ci = sp.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert (mean, low, high) == pytest.approx((0.4, ci.low, ci.high))
    assert low < 0.0 and high > 0.9  # wider than the range
    c = stats.per_seed([1, 2, 3])
    assert c.low == pytest.approx(2 - 4.302653 / math.sqrt(3)) and c.high == pytest.approx(
        2 + 4.302653 / math.sqrt(3)
    )


def test_the_variance_of_a_cell_adds_the_shared_examples_spread_to_the_seeds():
    """The two-way (seeds x examples) mean squares by explicit sums, and the variance of the mean
    they give: seeds' part ms_seed / (S U) plus the examples' part (ms_unit - ms_resid) / (S U)."""
    values = np.array(
        [[1.0, 1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]
    )
    seeds, count = values.shape
    grand = sum(map(sum, values)) / (seeds * count)
    rows = [sum(r) / count for r in values]
    cols = [sum(values[i][j] for i in range(seeds)) / seeds for j in range(count)]
    ms_seed = count * sum((r - grand) ** 2 for r in rows) / (seeds - 1)
    ms_unit = seeds * sum((c - grand) ** 2 for c in cols) / (count - 1)
    ms_resid = sum(
        (values[i][j] - rows[i] - cols[j] + grand) ** 2 for i in range(seeds) for j in range(count)
    ) / ((seeds - 1) * (count - 1))
    assert ms_unit > ms_resid  # the examples differ more than the noise: their part counts
    mean, variance, df = stats.mean_variance(values)
    seed_part, unit_part = ms_seed / (seeds * count), (ms_unit - ms_resid) / (seeds * count)
    assert mean == pytest.approx(grand)
    assert variance == pytest.approx(seed_part + unit_part)
    satterthwaite = (seed_part + unit_part) ** 2 / (seed_part**2 / (seeds - 1) + unit_part**2 / (count - 1))
    assert df == pytest.approx(min(satterthwaite, seeds - 1) if seed_part >= unit_part else satterthwaite)
    one = stats.mean_variance(values[:1])
    assert math.isnan(one[1])  # one seed: the seeds' spread is unknown


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_a_rate_at_zero_or_one_is_never_zero_width_nor_narrower_than_one_error_more(seeds):
    """0 of 3 x 256 printed [0, 1] (the Clopper-Pearson bound of one seed's 256 examples) while 1 of
    3 x 256 printed [0, 9]: a bound that fell as the count did. Now the interval at exactly 0 reaches as
    far as the same cell with one example of one seed right, and never less than the examples' bound."""
    zeros = np.zeros((seeds, 256))
    mean, low, high = stats.interval(zeros, rate=True)
    one = zeros.copy()
    one[0, 0] = 1.0
    edge = 1 - 0.025 ** (1 / 256)  # Clopper-Pearson upper bound of 0 of 256
    assert (mean, low) == (0.0, 0.0) and high >= stats.interval(one, rate=True)[2] and high >= edge - 1e-12
    assert high == pytest.approx(max(edge, stats.interval(one, rate=True)[2]))
    if seeds == 3:
        assert 0.08 < high < 0.1  # [0, 9], as one error more gives
    assert stats.interval(np.ones((seeds, 256)), rate=True)[1] == pytest.approx(1 - high)
    inside = stats.interval(np.array([[0.0] * 250 + [1.0] * 6] * 3), rate=True)
    assert 0 < inside[1] < inside[0] < inside[2] < 1  # the logit interval stays inside [0, 1]


def test_seeds_tied_exactly_on_different_examples_keep_the_examples_noise():
    """Three seeds, each 253 of 256 right but on different examples (quick's sinusoidal copy, in
    the trained length): their means tie, yet the interval is the examples' noise, not zero-width,
    and two such cells a few examples apart are not "infinitely" different."""
    values = np.ones((3, 256))
    for seed, wrong in enumerate(([145, 166, 191], [86, 230, 242], [174, 195, 220])):
        values[seed, wrong] = 0.0
    mean, variance, df = stats.mean_variance(values)
    _, _, ms_resid = stats.mean_squares(values)
    assert mean == pytest.approx(253 / 256)
    assert variance == pytest.approx(ms_resid / (3 * 256)) and variance > 0 and df == 2 * 255
    _, low, high = stats.interval(values, rate=True)
    assert 0.97 < low < mean < high < 0.997
    other = values.copy()
    other[:, :2] = 0.0  # 2 more errors on every seed: its means tie too
    diff, dlow, dhigh, p = stats.compare_arrays(values, other, rate=True)
    assert diff == pytest.approx(2 / 256) and dlow < diff < dhigh and 0 < p < 1
    same = stats.compare_arrays(values, values.copy(), rate=True, paired=True)
    assert same[0] == 0 and same[3] == 1.0  # one model evaluated twice the same way: a tie, p = 1


def test_a_cell_averages_converged_runs_only_and_counts_the_others():
    def record(seed, hits, converged=True):
        per = [[1] * hits + [0] * (4 - hits)]
        return {
            "label": "x",
            "spec": {"task": "copy", "seed": seed, "train": {"max_len": 4}},
            "result": {
                "train": {"converged": converged},
                "eval": {
                    "default": {"lengths": [8], "per_example": {"exact_match": per, "token_accuracy": per}}
                },
            },
        }

    records = [record(0, 4), record(1, 2), record(2, 0, converged=False)]
    c = stats.cell(records, label="x", task="copy", column="em_2x")
    assert (c.mean, c.n, c.runs, c.units) == (0.75, 2, 3, 4)
    assert not c.converged and c.low <= 0.75 <= c.high
    none = stats.cell([record(0, 4, converged=False)], label="x", task="copy", column="em_2x")
    assert none.n == 0 and math.isnan(none.mean) and not none.measured


def test_lm_ratio_units_pair_each_long_window_with_the_short_ones_it_covers():
    ev = {
        "lengths": [2, 4],
        "window_nats": [[1.0, 1.0, 2.0, 2.0], [1.0, 3.0]],  # windows of 2 bytes; of 4 bytes
        "protocol": "nonoverlapping",
    }
    longer, base = stats.units({"spec": {"task": "lm", "train": {"max_len": 2}}, "result": {"eval": {"default": ev}}},
                               "default", "ratio_2x")  # fmt: skip
    np.testing.assert_array_equal(longer, [1.0, 3.0])
    np.testing.assert_array_equal(base, [1.0, 2.0])
    linear = stats.as_units((longer, base))  # each block's share of its seed's ratio
    # their mean is the ratio: exp(mean(1, 3) - mean(1, 2)) = exp(0.5)
    assert float(linear.mean()) == pytest.approx(math.exp(0.5))
    assert linear[1] - linear[0] == pytest.approx(math.exp(0.5) * 1.0)  # delta method: r x (d_1 - d_0)


def test_the_lm_unit_is_the_test_file_not_the_window():
    """Windows are scored file by file; a file's windows share its style and vocabulary, so the
    cell's units are the files (each the mean of its windows), the same at every length."""
    ev = {
        "lengths": [2, 4],
        "files": ["a.py", "b.py"],
        # two files of 8 bytes: four windows of 2 bytes each, then two of 4 bytes each
        "window_nats": [[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0, 5.0], [1.0, 3.0, 3.0, 5.0]],
        "protocol": "nonoverlapping",
    }
    record = {"spec": {"task": "lm", "train": {"max_len": 2}}, "result": {"eval": {"default": ev}}}
    np.testing.assert_allclose(
        stats.units(record, "default", "bpb_train"), np.array([1.5, 4.0]) / math.log(2)
    )
    longer, base = stats.units(record, "default", "ratio_2x")
    np.testing.assert_array_equal(longer, [2.0, 4.0])
    np.testing.assert_array_equal(base, [1.5, 4.0])
    seeds = [dict(record, label="x", spec=dict(record["spec"], seed=s)) for s in range(3)]
    for r in seeds:
        r["result"] = {"eval": {"default": ev}, "train": {"converged": True}}
        r["spec"]["encoding"] = "x"
    assert stats.cell(seeds, label="x", task="lm", column="bpb_train").units == 2


@pytest.mark.parametrize(
    ("cell", "side", "verdict"),
    [
        (Cell(0.95, 0.92, 0.99, 3, 3, 10), ">=", "agrees"),
        (Cell(0.95, 0.85, 0.99, 3, 3, 10), ">=", "inconclusive"),
        (Cell(0.50, 0.40, 0.60, 3, 3, 10), ">=", "disagrees"),
        (Cell(0.95, 0.92, 0.99, 3, 3, 10), "<=", "disagrees"),
        (Cell(0.05, 0.00, 0.08, 3, 3, 10), "<=", "agrees"),
        (Cell(math.nan, math.nan, math.nan, 0, 3, 0), ">=", "not measured"),
    ],
)
def test_verdicts_only_where_the_interval_decides(cell, side, verdict):
    assert stats.verdict_vs(cell, 0.9, side) == verdict


def test_claims_are_data_and_each_names_a_test():
    assert claims.CLAIMS and all(
        isinstance(c, claims.Claim) and hasattr(c.test, "judge") for c in claims.CLAIMS
    )
    before = len(claims.CLAIMS)
    extra = claims.Claim(
        "a paper", "nope beats rope on copy", "yes", claims.Compare("nope", "rope", "copy", "em_2x", ">")
    )
    claims.CLAIMS.append(extra)
    try:
        rows = claims.claims([])
        assert rows == []  # no runs of the named encodings: nothing to show
    finally:
        claims.CLAIMS.pop()
    assert len(claims.CLAIMS) == before


def test_cells_of_a_results_directory(tmp_path):
    """The public entry point: every cell of a run, from its directory or its records, equal;
    each mean is the average over seeds of the per-example results in the bucket."""
    import dataclasses

    from posenc import compare, results
    from posenc.compare.profile import get_profile
    from posenc.core.errors import PosencError
    from posenc.records.store import ResultStore

    smoke = get_profile("smoke")
    smoke = dataclasses.replace(smoke, task_train=dataclasses.replace(smoke.task_train, converge_at=0.0))
    compare.compare(smoke, encodings=("nope",), tasks=("copy",), seeds=(0, 1, 2), out=tmp_path,
                  show_progress=False, log=lambda _: None)  # fmt: skip
    records = ResultStore(tmp_path).records()
    table = results.cells(tmp_path)
    assert set(table) == {("nope", "copy", c) for c in stats.TASK_COLUMNS}
    assert table == stats.cells(records)
    assert results.cells(tmp_path, tasks=["lm"]) == {} and results.cells(tmp_path, labels=["rope"]) == {}
    c = table[("nope", "copy", "em_2x")]
    trained = 2 * smoke.task_train.max_len + 2  # copy rows: BOS, n symbols, SEP, n symbols
    by_hand = []
    for record in records:
        ev = record["result"]["eval"]["default"]
        rows = [
            row  # exact match as greedy decoding gives it
            for n, row in zip(ev["lengths"], ev["per_example"]["free_exact_match"])
            if 1.5 * trained < 2 * n + 2 <= 2 * trained  # the 2x bucket: (1.5, 2] x the trained tokens
        ]
        by_hand.append(np.mean(np.concatenate(rows)))
    assert c.mean == pytest.approx(np.mean(by_hand)) and (c.n, c.runs) == (3, 3) and c.converged
    assert c.low <= c.mean <= c.high and c.to_dict()["converged"] is True
    with pytest.raises(PosencError, match="not a posenc compare results directory"):
        results.cells(tmp_path / "runs")


@pytest.mark.parametrize(
    ("agree", "disagree", "undecided", "verdict"),
    [(3, 0, 0, "agrees"), (1, 0, 11, "inconclusive"), (6, 0, 4, "agrees"), (0, 2, 1, "disagrees"),
     (2, 1, 0, "mixed"), (0, 0, 5, "inconclusive")],
)  # fmt: skip
def test_a_ranking_needs_more_decided_pairs_than_undecided(agree, disagree, undecided, verdict):
    assert claims.ranking_verdict(agree, disagree, undecided) == verdict


def test_a_claim_is_shown_only_when_every_encoding_it_names_ran(monkeypatch):
    record = {
        "label": "alibi",
        "spec": {"task": "lm", "seed": 0, "train": {"max_len": 4}},
        "result": {
            "train": {"converged": True},
            "eval": {"default": {"lengths": [4], "window_nats": [[1.0]]}},
        },
    }
    mine = [
        claims.Claim("a", "alibi holds", "yes", claims.Threshold("alibi", "lm", "ratio_2x", 1.1, "<=")),
        claims.Claim(
            "b", "fire as good as alibi", "yes", claims.Compare("fire", "alibi", "lm", "ratio_4x", "<")
        ),
        claims.Claim("c", "order", "x", claims.Ranking(("nope", "alibi"), ("copy",), "em_out")),
    ]
    monkeypatch.setattr(claims, "CLAIMS", mine)
    assert [r["claim"] for r in claims.claims([record])] == ["alibi holds"]


def test_a_column_counts_pairs_a_corrected_test_tells_apart_and_one_model_once():
    """Rows apart on every seed differ; rows drawn alike do not; one trained model evaluated two
    ways is compared within itself (paired), not counted again against the others."""
    rng = np.random.default_rng(0)

    def runs(label, rate, seeds=3, variant=None, other=None):
        out = []
        for seed in range(seeds):
            hits = [int(x) for x in rng.random(64) < rate]
            rec = _copy_record(label, seed, 8)
            rec["result"]["eval"]["default"]["per_example"]["exact_match"] = [hits, hits]
            rec["result"]["eval"]["default"]["lengths"] = [4, 8]
            if variant:
                more = [int(x) for x in rng.random(64) < other]
                rec["result"]["eval"][variant] = {
                    "lengths": [4, 8],
                    "per_example": {"exact_match": [more, more]},
                }
            out.append(rec)
        return out

    records = [*runs("a", 0.9), *runs("b", 0.2), *runs("c", 0.21), *runs("d", 0.5, variant="x", other=0.55)]
    sep = stats.separation(records, "copy", "em_2x")
    # a, b, c, d: 6 pairs between models; d vs d[x] within d: 7 tests
    assert sep.pairs == 7 and sep.untestable == 0
    assert 4 <= sep.significant <= 6  # a apart from b, c, d; b/c alike; d vs d[x] close
    assert stats.pair_test(records, "d", "d[x]", task="copy", column="em_2x").test == stats.PAIRED
    assert stats.pair_test(records, "a", "b", task="copy", column="em_2x").test == stats.WELCH
    assert sep.detectable == pytest.approx(stats.detectable(sep.seed_sd, 3)) and sep.detectable > 0
    assert sep.permutation_min_p == pytest.approx(0.1)  # 3 vs 3 seeds: 2 / C(6, 3)
    floor = [*runs("a", 0.0), *runs("b", 0.0)]
    tied = stats.separation(floor, "copy", "em_2x")
    assert (tied.significant, tied.pairs) == (0, 1) and math.isnan(tied.detectable)


def _copy_record(label, seed, hits, converged=True, checks=(0.5, 1.0)):
    per = [[1] * hits + [0] * (8 - hits), [1] * hits + [0] * (8 - hits)]
    return {
        "label": label,
        "run_id": f"{label}{seed}",
        "spec": {
            "task": "copy",
            "seed": seed,
            "encoding": label,
            "lr_source": "chosen from 0.001, 0.002 on copy: none converged",
            "train": {"max_len": 4, "steps": 100, "converge_at": 0.99, "plateau": 0.02, "lr": 0.002},
        },
        "result": {
            "train": {
                "converged": converged,
                "steps_to_converge": 100 if converged else None,
                "steps": 100,
                "final_loss": 0.1,
                "checks": {"step": [50, 100], "train_loss": [2.5, 2.4], "valid_exact_match": list(checks)},
            },
            "timing": {"steps_per_second": 10.0, "train_wall_seconds": 10.0},
            "eval": {
                "default": {
                    "lengths": [4, 5],
                    "exact_match": [hits / 8, hits / 8],
                    "token_accuracy": [hits / 8, hits / 8],
                    "answer_accuracy": [hits / 8, hits / 8],
                    "per_example": {"exact_match": per, "token_accuracy": per, "answer_accuracy": per},
                }
            },
        },
    }


def test_the_summary_states_each_columns_power_and_why_a_cell_is_not_converged():
    from posenc.results import tables

    records = [
        *(_copy_record("a", seed, 8) for seed in range(3)),
        *(_copy_record("b", seed, 0) for seed in range(3)),
        _copy_record("c", 0, 8),
        _copy_record("c", 1, 0, converged=False, checks=(0.2, 0.43)),
    ]
    summary = tables.summarize(records)
    power = summary["columns"]["copy:em_1.25x"]  # n = 5: rows of 12 tokens, 1.2x the trained 10 (n = 4)
    # a (3 seeds at 100%) vs b (3 at 0%) differ; c has one converged seed: its pairs are untestable
    assert (power["significant"], power["pairs"], power["untestable"]) == (1, 1, 2)
    assert summary["reasons"] == {
        "c / copy": "1 of 2 seeds: held-out exact match stayed below 99% at the step cap of 100 "
        "(seed 1: 43%); learning rate 0.002: chosen from 0.001, 0.002 on copy: none converged"
    }
    headers = [h for h, _, _ in tables.table_columns(summary)]
    assert headers == ["copy in", "copy 1.25x", "copy tf-tok 1.25x"]  # buckets without lengths are left out
    markdown = tables.markdown_table(summary)
    assert "| *significant* | 1/1 | 1/1 | 1/1 | |" in markdown and "`c / copy`" in tables.reasons_markdown(
        summary
    )
    same = [*(_copy_record("a", s, 8) for s in range(3)), *(_copy_record("b", s, 8) for s in range(3))]
    tied = tables.summarize(same)
    assert tables.dropped_columns(tied) == ["copy 1.25x", "copy tf-tok 1.25x"]  # both at 100%: no pair apart
    caption = tables.caption(tied)
    assert "Columns with no significant pair, left out: copy 1.25x, copy tf-tok 1.25x." in caption
    assert (
        "Welch t test over seeds" in caption and "Benjamini-Hochberg" in caption and "t interval" in caption
    )


def test_a_ranking_names_the_tasks_it_read():
    records = [
        *(_copy_record("a", seed, 8) for seed in range(3)),
        *(_copy_record("b", seed, 0) for seed in range(3)),
    ]
    ours, verdict, _ = claims.Ranking(("a", "b"), ("copy", "reverse", "passkey"), "em_out").judge(records)
    assert ours == "1 pair(s) agree, 0 disagree, 0 undecided (copy)" and verdict == "agrees"


def test_the_terminal_shows_a_table_per_task_that_fits_140_columns():
    import io

    from rich.console import Console

    from posenc.results import tables

    records = [
        *(_copy_record("a", seed, 8) for seed in range(3)),
        *(_copy_record("b", seed, 0) for seed in range(3)),
    ]
    summary = tables.summarize(records)
    (table,) = tables.render_tables(summary, title="t")
    assert [c.header for c in table.columns] == ["encoding", "in", "1.25x", "tf-tok 1.25x", "steps/s"]
    console = Console(width=140, file=io.StringIO(), record=True)
    console.print(table)
    assert "…" not in console.export_text() and "steps/s of that table's task" in tables.caption(
        summary, per_task=True
    )
