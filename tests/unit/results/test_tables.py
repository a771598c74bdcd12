"""The summary tables (posenc.results.tables): the length buckets a cell averages, and a row per setting a run was evaluated under."""

from __future__ import annotations

import dataclasses
import math

from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.runner import run_grid
from posenc.records.store import ResultStore
from posenc.results import tables


def test_buckets_average_the_right_lengths():
    # copy at n = 4, 6, 9, 12, 24 reads rows of 10, 14, 20, 26, 50 tokens; trained at n <= 6: 14
    ratios = [t / 14 for t in (10, 14, 20, 26, 50)]
    got = tables.bucket_values(ratios, [1.0, 0.5, 0.25, 0.75, 0.0])
    assert math.isnan(got.pop("1.25x"))  # no row in (14, 17.5] tokens
    assert got == {"in": 0.75, "1.5x": 0.25, "2x": 0.75, "4x": 0.0}
    assert math.isnan(tables.bucket_values([10 / 14], [1.0])["2x"])


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
