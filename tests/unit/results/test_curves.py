"""What training did, visible (``posenc.results.curves``): each record keeps its learning curve and
``posenc plot --curves`` draws them. The progress display is ``tests/unit/compare/test_runner.py``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from posenc.cli import main
from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.runner import run_grid
from posenc.records.store import ResultStore
from posenc.results.curves import curve, curves_figure

SMOKE = get_profile("smoke")


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("curves")
    specs = build_grid(SMOKE, seeds=(0, 1)).specs  # sinusoidal, nope x copy, lm
    outcome = run_grid(specs, ResultStore(out), LocalExecutor(1), show_progress=False, log=quiet)
    assert len(outcome.done) == 8
    return out


def test_each_record_keeps_its_learning_curve(results):
    for record in ResultStore(results).records():
        checks = record["result"]["train"]["checks"]
        steps, losses = checks["step"], checks["train_loss"]
        task = record["spec"]["task"]
        every = SMOKE.lm_train.check_every if task == "lm" else SMOKE.task_train.check_every
        assert steps == list(range(every, every * len(steps) + 1, every))
        per_step = record["result"]["train"]["loss"]
        for k, step in enumerate(steps):  # the mean training loss since the previous check
            window = per_step[(steps[k - 1] if k else 0) : step]
            assert losses[k] == pytest.approx(sum(window) / len(window), rel=1e-6)
        metric = "valid_loss" if task == "lm" else "valid_exact_match"
        assert len(checks[metric]) == len(steps)
        assert curve(record)["name"] == metric


def test_a_record_from_before_curves_gets_its_training_loss_from_the_steps(results):
    record = ResultStore(results).records()[0]
    old = json.loads(json.dumps(record))
    del old["result"]["train"]["checks"]["train_loss"]
    assert curve(old)["train_loss"] == pytest.approx(curve(record)["train_loss"], rel=1e-6)


def test_plot_curves_draws_every_task_and_encoding(results, tmp_path):
    fig = curves_figure(ResultStore(results).records())
    axes = fig.get_axes()
    assert len(axes) == 4  # (copy, lm) x (training loss, held-out metric)
    labels = {
        line.get_label() for ax in axes for line in ax.get_lines() if not line.get_label().startswith("_")
    }
    assert labels == {"sinusoidal", "nope"}
    assert sum(len(ax.get_lines()) for ax in axes) == 16  # 8 runs, one line per run per panel
    out = tmp_path / "curves.png"
    result = CliRunner().invoke(main, ["plot", "--curves", str(results), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--kind", "heatmap"], "--kind does not apply with --curves"),
        (["rope"], "NAME does not apply with --curves"),
        (["--d-model", "8"], "--d-model does not apply with --curves"),
    ],
)
def test_plot_curves_refuses_what_does_not_apply(results, tmp_path, args, words):
    result = CliRunner().invoke(
        main, ["plot", "--curves", str(results), "-o", str(tmp_path / "x.png"), *args]
    )
    assert result.exit_code == 2 and words in result.output, result.output


def test_plot_curves_of_a_directory_without_runs_is_one_line(tmp_path):
    result = CliRunner().invoke(main, ["plot", "--curves", str(tmp_path), "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "not a results directory" in result.output
    assert not (tmp_path / "x.png").exists()
    missing = CliRunner().invoke(main, ["plot", "rope", "-o", str(tmp_path / "x.png")])
    assert missing.exit_code == 2 and "missing --kind" in missing.output
