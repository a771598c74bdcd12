"""Your own task: the task registry (registered, import spec, ``posenc.tasks`` entry point), the
protocol it checks on every example, and ``posenc.testing.check_task`` catching a class that
breaks each part of the protocol."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import posenc.testing
from posenc.cli import main
from posenc.compare import compare
from posenc.compare.grid import build_grid, eval_length, train_length
from posenc.compare.profile import get_profile
from posenc.compare.work import execute
from posenc.core.errors import PosencError, PosencTypeError
from posenc.tasks import FIRST_SYMBOL, Task, synthetic, task_registry

SMOKE = get_profile("smoke")
SPEC = f"{__name__}:Repeat"  # this module as pytest imports it (tests/ is on sys.path)


class Repeat(Task):
    """A task of this test module: y is x twice (importable by spec: the module is importable by its name)."""

    description = "n symbols out of 8; y = x x"
    vocab_size = FIRST_SYMBOL + 8
    chance = 1 / 8

    def example(self, n, generator):
        x = torch.randint(0, 8, (n,), generator=generator) + FIRST_SYMBOL
        return x, torch.cat([x, x])

    def answer_length(self, n):
        return 2 * n


@pytest.fixture
def clean():
    yield
    for name in list(task_registry.GROUP.registered):
        task_registry.unregister_task(name)
    task_registry.GROUP.refresh()


def test_builtin_batches_are_drawn_exactly_as_before():
    """The registry draws posenc's own tasks with the same random numbers as synthetic.py (the
    benchmark's numbers do not move)."""
    for name in synthetic.TASKS:
        a = task_registry.sample_batch(
            name, 6, min_len=1, max_len=9, generator=torch.Generator().manual_seed(3)
        )
        b = synthetic.sample_batch(name, 6, min_len=1, max_len=9, generator=torch.Generator().manual_seed(3))
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.loss_mask, b.loss_mask)
        assert torch.equal(
            task_registry.eval_batch(name, 7, 5).inputs, synthetic.eval_batch(name, 7, 5).inputs
        )
        assert task_registry.max_sequence_length(name, 11) == synthetic.max_sequence_length(name, 11)
    assert task_registry.task_names()[: len(synthetic.TASKS)] == tuple(synthetic.TASKS)
    assert task_registry.task_names()[-1] == "lm"


def test_a_task_by_import_spec_trains_and_evaluates():
    assert posenc.testing.check_task(SPEC).passed
    (spec,) = build_grid(SMOKE, encodings=("nope",), tasks=(SPEC,), seeds=(0,)).specs
    assert spec.task == SPEC and train_length(SPEC, spec.train) == 1 + 6 + 1 + 12
    assert eval_length(SPEC, spec.train, spec.eval) == 1 + 24 + 1 + 48
    payload = execute(spec)
    assert payload["data"] == {"source": f"synthetic:{SPEC}", "generator": "torch.Generator", "vocab": 13}
    assert payload["eval"]["default"]["lengths"] == list(SMOKE.eval.lengths)
    assert payload["code"]["task"]["class"] == SPEC


def test_register_a_task(clean, tmp_path):
    assert task_registry.register_task("repeat", Repeat) is Repeat
    assert "repeat" in task_registry.task_names() and task_registry.tasks()["repeat"] is Repeat
    assert task_registry.task_spec("repeat") == SPEC  # what a spawned worker is handed
    (spec,) = build_grid(SMOKE, encodings=("nope",), tasks=("repeat",), seeds=(0,)).specs
    assert spec.task == "repeat" and spec.imports == (("task", "repeat", SPEC),)
    assert spec.run_id == dataclasses.replace(spec, imports=()).run_id  # how it travels is not identity
    # spawned workers do not see this registration: each registers the import spec it is handed
    result = compare("smoke", encodings=("nope",), tasks=("repeat",), seeds=(0, 1), workers=2, out=tmp_path,
                     show_progress=False, log=lambda _: None)  # fmt: skip
    assert len(result.outcome.done) == 2 and not result.outcome.failed, result.outcome.failed
    for path in (tmp_path / "runs" / "repeat").glob("*.json"):
        record = json.loads(path.read_text())
        assert record["label"] == "nope" and record["result"]["code"]["task"]["class"] == SPEC
    listed = CliRunner().invoke(main, ["list", "--tasks", "--format", "json"])
    assert {r["name"]: r["source"] for r in json.loads(listed.stdout)}["repeat"] == SPEC
    help_text = CliRunner().invoke(main, ["compare", "--help"]).output
    assert "repeat" in help_text and "passkey" in help_text  # --tasks help from the registry


def test_register_refuses_builtins_lm_and_non_tasks(clean):
    with pytest.raises(PosencError, match="'copy' is a built-in task"):
        task_registry.register_task("copy", Repeat)
    with pytest.raises(PosencError, match="'lm' is a built-in task"):
        task_registry.register_task("lm", Repeat)
    with pytest.raises(PosencTypeError, match="not a task class"):
        task_registry.register_task("x", torch.nn.Linear)
    with pytest.raises(PosencTypeError, match="does not define example"):
        task_registry.register_task("x", type("Empty", (Task,), {"chance": 0.5}))
    with pytest.raises(PosencError, match="vocab_size must be an integer > 4"):
        task_registry.register_task("x", type("Small", (Repeat,), {"vocab_size": 4}))
    with pytest.raises(PosencError, match=r"chance must be a number in \(0, 1\]"):
        task_registry.register_task("x", type("NoChance", (Repeat,), {"chance": 0.0}))


def test_an_entry_point_task_is_found_lazily(clean, tmp_path, monkeypatch):
    info = tmp_path / "site" / "posenc_repeat-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: posenc-repeat\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[posenc.tasks]\nrepeat = {SPEC}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    task_registry.GROUP.refresh()
    assert "repeat" in task_registry.task_names() and "repeat" not in task_registry.GROUP.loaded
    assert task_registry.task_class("repeat") is Repeat
    assert task_registry.task_spec("repeat") == "repeat"  # every process on this sys.path finds it
    assert task_registry.GROUP.distribution("repeat") == "posenc-repeat"
    sys.path.remove(str(tmp_path / "site"))


def test_unknown_tasks_and_lm_give_clear_errors():
    with pytest.raises(
        PosencError, match=r"unknown task 'cpy'; did you mean 'copy'\? \(valid: .*passkey, grid, lm;"
    ):
        task_registry.task_class("cpy")
    with pytest.raises(PosencError, match="'lm' is the language-model task"):
        task_registry.get_task("lm")
    assert task_registry.validate_task("lm") == "lm" and task_registry.vocab_size("lm") == 256


# ---------------------------------------------------------------------------
# The protocol on every example, and posenc.testing.check_task.
# ---------------------------------------------------------------------------


def _task(**methods):
    return type("Broken", (Repeat,), methods)


def test_examples_breaking_the_protocol_are_refused_naming_the_task():
    for example, words in (
        (lambda self, n, g: (torch.tensor([1, 5]), torch.tensor([5])), "ids outside [4, 13)"),
        (lambda self, n, g: (torch.tensor([5]), torch.tensor([], dtype=torch.long)), "y at n=3 is empty"),
        (lambda self, n, g: (torch.tensor([5.0]), torch.tensor([5])), "1-D int64 tensor"),
        (lambda self, n, g: [torch.tensor([5])], "must return (x, y)"),
    ):
        with pytest.raises(PosencError, match=r"task '.*Broken'") as caught:
            task_registry.eval_batch(_task(example=example)(), 3, 2)
        assert words in str(caught.value)


@pytest.mark.parametrize(
    ("methods", "failing", "words"),
    [
        ({"example": lambda self, n, g: (torch.randint(5, 13, (n,)), torch.tensor([5]))}, "deterministic",
         "draw every random number from the generator"),
        ({"example": lambda self, n, g: (torch.tensor([5, 6]), torch.tensor([5]))}, "lengths",
         "is not longer than"),
        ({"answer_length": lambda self, n: 1}, "examples", "max_sequence_length"),
        ({"example": lambda self, n, g: (torch.tensor([3] * n), torch.tensor([5]))}, "examples", "ids outside"),
        ({"description": ""}, "declares", "description is empty"),
    ],
)  # fmt: skip
def test_check_task_catches_each_broken_property(methods, failing, words):
    report = posenc.testing.check_task(_task(**methods))
    assert not report.passed and report.kind == "task"
    result = report[failing]
    assert result.passed is False and words in result.detail, str(report)
    with pytest.raises(AssertionError, match=failing):
        posenc.testing.assert_task(_task(**methods))


def test_every_builtin_task_passes_its_contract():
    for name in synthetic.TASKS:
        report = posenc.testing.assert_task(name)
        assert [r.name for r in report.results] == list(posenc.testing.TASK_PROPERTIES)


def test_posenc_check_runs_the_task_contract():
    result = CliRunner().invoke(main, ["check", SPEC, "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["kind"] == "task" and report["passed"]
    bad = CliRunner().invoke(main, ["check", "copy", "--property", "kv_cache"])
    assert bad.exit_code == 2 and "--property kv_cache is an encoding's" in bad.output
    bad = CliRunner().invoke(main, ["check", "copy", "--config", "x=1"])
    assert bad.exit_code == 2 and "a task has none" in bad.output


def test_results_of_an_out_of_tree_task_read_back(tmp_path):
    """The trained-run tools (attention of a run) draw a user's task's examples too."""
    from posenc.compare.executor import LocalExecutor
    from posenc.compare.runner import run_grid
    from posenc.records.store import ResultStore
    from posenc.results import trained

    specs = build_grid(SMOKE, encodings=("alibi",), tasks=(SPEC,), seeds=(0,)).specs
    outcome = run_grid(
        specs, ResultStore(tmp_path), LocalExecutor(1), show_progress=False, log=lambda _: None
    )
    assert len(outcome.done) == 1
    record = next(Path(tmp_path, "runs").glob("*/*.json"))
    maps, spec, example = trained.attention_maps(record, 3)
    assert spec.task == SPEC and len(example.labels) == 1 + 3 + 1 + 6  # [BOS] x [SEP] y
