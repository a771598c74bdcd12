"""Running a grid (posenc.compare.runner): the progress display shows each running run's held-out metric (reported from spawned workers too), output to a file gets a line per finished run, and a resumed grid refuses records of a changed class."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from rich.progress import Progress

from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.runner import RunRows, check_code, run_grid, status_text
from posenc.compare.work import execute
from posenc.core.errors import PosencError
from posenc.records.provenance import code_of
from posenc.records.store import ResultStore

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


def test_a_run_reports_each_check_to_the_display():
    (spec,) = build_grid(SMOKE, encodings=("nope",), tasks=("copy",), seeds=(0,)).specs
    statuses = []
    execute(spec, lambda units, status=None: statuses.append(status) if status else None)
    assert [s["step"] for s in statuses] == [3, 6] and {s["metric"] for s in statuses} == {
        "valid_exact_match"
    }
    assert status_text(statuses[-1]).startswith("step 6: held-out exact match ")


def test_spawned_workers_report_their_checks():
    specs = build_grid(SMOKE, encodings=("nope",), tasks=("copy", "lm"), seeds=(0,)).specs
    seen: dict[str, list] = {}

    def progress(spec, units, status=None):
        if status is not None:
            seen.setdefault(spec.task, []).append(status)

    done = list(LocalExecutor(2).map(execute, specs, progress))
    assert len(done) == 2 and not any(isinstance(result, BaseException) for _, result in done)
    assert [s["metric"] for s in seen["copy"]] == ["valid_exact_match"] * 2
    assert seen["lm"] and {s["metric"] for s in seen["lm"]} == {"valid_loss"}


def test_each_running_run_has_a_row_with_its_held_out_metric():
    (spec,) = build_grid(SMOKE, encodings=("nope",), tasks=("copy",), seeds=(0,)).specs
    console = Console(file=io.StringIO(), width=160, force_terminal=False)
    with Progress(console=console) as bar:
        rows = RunRows(bar)
        rows.report(spec, {"step": 300, "metric": "valid_exact_match", "value": 0.84})
        (task,) = bar.tasks
        assert task.description == "  copy: nope (seed 0)"
        assert task.fields["note"] == "step 300: held-out exact match 0.840"
        rows.advance(spec, 5)
        assert bar.tasks[0].completed == 5
        rows.finish(spec)
        assert not bar.tasks


def test_output_to_a_file_gets_a_line_per_finished_run_and_a_terminal_none(tmp_path):
    """Under nohup or in CI the live bar cannot draw: every finished run is a line with the time
    so far and left; on a terminal the bar shows it and no line is added."""
    specs = build_grid(SMOKE, encodings=("nope",), tasks=("copy", "lm"), seeds=(0,)).specs
    for terminal, out in ((False, tmp_path / "file"), (True, tmp_path / "tty")):
        console = Console(file=io.StringIO(), width=160, force_terminal=terminal)
        logged: list[str] = []
        run_grid(specs, ResultStore(out), LocalExecutor(1), log=logged.append, console=console)
        lines = [line for line in logged if line.startswith("run ")]
        if terminal:
            assert not lines, logged
            continue
        assert len(lines) == 2 and "2 run(s) to do; a line as each one finishes" in logged, logged
        assert re.fullmatch(
            r"run 1/2 \(0:\d\d:\d\d so far, about 0:\d\d:\d\d left\): \w+: nope \(seed 0\) .+", lines[0]
        )
        assert re.fullmatch(r"run 2/2 \(0:\d\d:\d\d so far\): \w+: nope \(seed 0\) .+", lines[1])
        assert any(" converged at step " in line or " not converged in " in line for line in lines)


def test_a_resumed_grid_refuses_records_of_a_changed_class(results):
    store = ResultStore(results)
    specs = build_grid(SMOKE, seeds=(0, 1)).specs
    assert check_code(specs, store, log=quiet) == 0
    record_path = store.path_for(specs[0])
    record = json.loads(record_path.read_text())
    assert record["result"]["code"] == json.loads(json.dumps(code_of(specs[0])))
    forged = json.loads(json.dumps(record))
    forged["result"]["code"]["encodings"]["sinusoidal"].update(
        {"class": "mypkg:Sinusoidal", "distribution": "mypkg"}
    )
    record_path.write_text(json.dumps(forged))
    try:
        with pytest.raises(
            PosencError,
            match=r"1 finished run\(s\) .*was mypkg:Sinusoidal, is now posenc.encoding.absolute.sequence.*--allow-changed",
        ):
            run_grid(specs, store, LocalExecutor(1), show_progress=False, log=quiet)
        logged = []
        assert check_code(specs, store, allow_changed=True, log=logged.append) == 1
        assert "keeping 1 run(s) made with a changed class" in logged[0]
    finally:
        record_path.write_text(json.dumps(record))
