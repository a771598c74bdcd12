"""Cell statistics: means and 95% intervals against hand-computed cases; verdicts use them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.results import claims, stats
from posenc.results.stats import Cell, bootstrap_interval


def _mean_stat(values: np.ndarray):
    return lambda s, u: values[s[..., :, None], u[..., None, :]].mean(axis=(-1, -2))


def test_units_only_interval_matches_the_binomial_by_hand():
    """One seed, 10 examples, five right: a resampled mean is Binomial(10, 1/2) / 10.

    P(X <= 1) = 11/1024 = 1.1% < 2.5% < P(X <= 2) = 56/1024 = 5.5%, so the 2.5% quantile
    is 0.2; by symmetry the 97.5% quantile is 0.8. The interval is [0.2, 0.8].
    """
    values = np.array([[0.0] * 5 + [1.0] * 5])
    assert bootstrap_interval(_mean_stat(values), values.shape) == (0.2, 0.8)


def test_three_seeds_interval_is_their_range():
    """Three seeds, one unit each: each extreme resample (all three the same seed) has
    probability 1/27 = 3.7% > 2.5%, so the 95% percentile interval is [min, max]."""
    values = np.array([[0.0], [0.3], [0.9]])
    assert bootstrap_interval(_mean_stat(values), values.shape) == (0.0, 0.9)


def test_crossed_interval_widens_by_the_seed_spread():
    """Two seeds whose units differ by a constant 0.5: the statistic is the units' binomial
    mean plus 0, 0.25 or 0.5 (both resampled seeds the first, one of each, both the second)
    with probability 1/4, 1/2, 1/4. Exact distribution by enumeration; the bootstrap's
    quantiles must land on it."""
    base = np.array([0.0] * 5 + [1.0] * 5)
    values = np.stack([base, base + 0.5])
    low, high = bootstrap_interval(_mean_stat(values), values.shape)
    support: dict[float, float] = {}
    for k in range(11):
        p_units = math.comb(10, k) / 1024
        for shift, p_seed in ((0.0, 0.25), (0.25, 0.5), (0.5, 0.25)):
            key = round(k / 10 + shift, 10)
            support[key] = support.get(key, 0.0) + p_units * p_seed
    cdf, acc = {}, 0.0
    for x in sorted(support):
        acc += support[x]
        cdf[x] = acc
    lo_exact = min(x for x in cdf if cdf[x] >= 0.025)
    hi_exact = min(x for x in cdf if cdf[x] >= 0.975)
    assert (round(low, 10), round(high, 10)) == (lo_exact, hi_exact)
    assert high - low > 0.6  # wider than the units alone ([0.2, 0.8])


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
    statistic = stats._stat_ratio(np.stack([longer]), np.stack([base]))
    # exp(mean(1, 3) - mean(1, 2)) = exp(0.5)
    assert float(statistic(np.arange(1), np.arange(2))) == pytest.approx(math.exp(0.5))


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
    from posenc.errors import PosencError
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


def test_a_column_counts_the_pairs_its_intervals_separate_and_the_difference_it_can_show():
    cells = [
        Cell(0.90, 0.85, 0.95, 3, 3, 10),  # apart from the two below
        Cell(0.50, 0.40, 0.60, 3, 3, 10),  # overlaps the next one
        Cell(0.45, 0.35, 0.55, 3, 3, 10),
        Cell(0.00, 0.00, 0.00, 3, 3, 10),  # at the floor: separated from the others, no spread
        Cell(math.nan, math.nan, math.nan, 0, 3, 0),  # no converged seed: not a pair
    ]
    sep = stats.separation(cells)
    assert (sep.separated, sep.pairs) == (5, 6)  # every pair of the four measured cells but 2-3
    assert sep.detectable == pytest.approx(0.2)  # median of the widths 0.1, 0.2, 0.2 (the floor has none)
    floor = stats.separation([Cell(0.0, 0.0, 0.0, 3, 3, 10)] * 3)
    assert (floor.separated, floor.pairs) == (0, 3) and math.isnan(floor.detectable)


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
    assert (power["separated"], power["pairs"]) == (2, 3)  # a and c (one seed each at 100%) vs b at 0%
    assert summary["reasons"] == {
        "c / copy": "1 of 2 seeds: held-out exact match stayed below 99% at the step cap of 100 "
        "(seed 1: 43%); learning rate 0.002: chosen from 0.001, 0.002 on copy: none converged"
    }
    headers = [h for h, _, _ in tables.table_columns(summary)]
    assert headers == ["copy in", "copy 1.25x", "copy tf-tok 1.25x"]  # buckets without lengths are left out
    markdown = tables.markdown_table(summary)
    assert "| *separated* | 2/3 | 2/3 | 2/3 | |" in markdown and "`c / copy`" in tables.reasons_markdown(
        summary
    )
    same = [*(_copy_record("a", s, 8) for s in range(3)), *(_copy_record("b", s, 8) for s in range(3))]
    tied = tables.summarize(same)
    assert tables.dropped_columns(tied) == ["copy 1.25x", "copy tf-tok 1.25x"]  # both at 100%: no pair apart
    assert "Columns that separate no pair, left out: copy 1.25x, copy tf-tok 1.25x." in tables.caption(tied)


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
