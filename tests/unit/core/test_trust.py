"""Data is never code: what posenc reads (results directories, run records, their weights, configs
being printed) runs nothing its author chose unless the user opts in (docs/guarantees.md, "Threat
model").

Every hostile record here names a module planted in the results directory, which is also the
working directory and on ``sys.path`` (an interactive session started inside it): importing the
module leaves a file ``RAN`` behind, so "nothing ran" is a fact the tests check, not an assumption.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner
from tests.records import make_payload, make_spec, no_hang, rewrite

from posenc import compare, results
from posenc.cli import main
from posenc.core import trust
from posenc.core.errors import PosencError
from posenc.records import files
from posenc.records.models import build_model
from posenc.records.store import ResultStore, checksum, load_weights, validate_record
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.report.builder import benchmark_report
from posenc.results import report_section
from posenc.results.curves import curves_figure
from posenc.results.result_figures import save_all

OPT_IN = ("--trust-remote-code", "trust_remote_code=True")


PLANTED = """\
import pathlib
pathlib.Path({ran!r}).write_text("ran")
from posenc.encoding.rotary.rope import RoPE
from posenc.tasks.task_registry import BUILTINS


class Evil(RoPE):
    pass


Task = BUILTINS["copy"]
"""


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A results directory with one genuine run and a module planted in it; the directory is the
    working directory and on ``sys.path``. ``ran`` exists once the module has been imported."""
    out = tmp_path / "results"
    record = ResultStore(out).write(make_spec(), make_payload(make_spec()))
    module = f"planted_{uuid.uuid4().hex[:12]}"
    ran = tmp_path / "RAN"
    (out / f"{module}.py").write_text(PLANTED.format(ran=str(ran)))
    monkeypatch.chdir(out)
    monkeypatch.syspath_prepend(str(out))
    importlib.invalidate_caches()
    yield SimpleNamespace(out=out, record=record, module=module, evil=f"{module}:Evil", ran=ran)
    sys.modules.pop(module, None)


def hostile(planted, name: str, change) -> Path:
    return rewrite(planted.record, change, planted.record.parent / f"{name}.json")


def _encoding(planted):
    return lambda d: (d["spec"].update(encoding=planted.evil), d.update(label=planted.evil))


def _encoding_unresolved(planted):  # the path that imported on reading: scale_embeddings to resolve
    return lambda d: (_encoding(planted)(d), d["spec"]["model"].update(scale_embeddings=None))


def _task(planted):
    return lambda d: d["spec"].update(task=f"{planted.module}:Task")


def _imports(planted):  # not part of the run id: slipped into a genuine record, it still validates
    return lambda d: d["spec"].update(imports=[["encoding", "mine", planted.evil]])


def _this(planted):  # an installed module that does something on import (prints the Zen of Python)
    return lambda d: d["spec"].update(encoding="this:X")


HOSTILE = {
    "encoding": _encoding,
    "encoding-unresolved": _encoding_unresolved,
    "task": _task,
    "imports": _imports,
    "this": _this,
}


@pytest.fixture
def hostile_dir(planted):
    for name, change in HOSTILE.items():
        hostile(planted, name, change(planted))
    return planted


# ---------------------------------------------------------------------------
# Reading a results directory imports nothing a record names.
# ---------------------------------------------------------------------------


def _report(out: Path) -> None:
    from posenc.report import builder

    with pytest.MonkeyPatch.context() as mp:  # the pages about posenc itself: slow, and no record in them
        mp.setattr(builder, "claims_section", lambda **kwargs: "")
        mp.setattr(builder, "notes_section", lambda *args: "")
        result = CliRunner().invoke(
            main, ["report", "--results", str(out), "-o", str(out / "page"), "--encoding", "nope",
                   "--figure", "heatmap", "--no-progress"],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Train short, test long" in (out / "page" / "index.html").read_text()


def _plot_curves(out: Path) -> None:
    result = CliRunner().invoke(main, ["plot", "--curves", str(out), "-o", str(out / "curves.png")])
    assert result.exit_code == 0, result.output


READERS = {
    "records": lambda out: ResultStore(out).records(warn=lambda _: None),
    "cells": results.cells,
    "write_outputs": lambda out: results.write_outputs(out, log=lambda _: None),
    "report section": report_section.render,
    "curves": lambda out: curves_figure(ResultStore(out).records(warn=lambda _: None)),
    "posenc report --results": _report,
    "posenc plot --curves": _plot_curves,
}


@pytest.mark.parametrize(
    "reader", [pytest.param(r, marks=pytest.mark.slow) if r == "write_outputs" else r for r in READERS]
)
def test_reading_a_results_directory_runs_no_code_it_names(hostile_dir, reader, capsys):
    READERS[reader](hostile_dir.out)
    assert not hostile_dir.ran.exists() and hostile_dir.module not in sys.modules
    assert "Zen of Python" not in capsys.readouterr().out


def test_records_are_read_without_the_classes_they_name(hostile_dir):
    """A record is data: one naming code is still read (tables need no class), except the one
    whose spec leaves a value to the class (refused as malformed, not resolved)."""
    warnings: list[str] = []
    records = ResultStore(hostile_dir.out).records(warn=warnings.append)
    encodings = sorted(r["spec"]["encoding"] for r in records)
    assert encodings == sorted(["rope", "rope", hostile_dir.evil, "this:X", "rope"])  # imports, task: rope
    assert len(warnings) == 1 and "encoding-unresolved.json" in warnings[0]
    assert "model.scale_embeddings" in warnings[0]
    assert set(results.summarize(records)["rows"]) == {"rope", hostile_dir.evil}  # a table, no class
    assert not hostile_dir.ran.exists()


@pytest.mark.slow
def test_compare_resuming_into_a_directory_runs_no_code_its_records_name(tmp_path, monkeypatch):
    """A real grid (smoke, one run), then hostile records and a module planted in its directory:
    resuming the grid reads every record there and imports none of them."""
    out = tmp_path / "results"
    run = dict(encodings=("nope",), tasks=("copy",), seeds=(0,), show_progress=False, log=lambda _: None)
    compare.compare("smoke", out=out, outputs=None, **run)
    record = next(out.glob("runs/copy/*.json"))
    module, ran = f"planted_{uuid.uuid4().hex[:12]}", tmp_path / "RAN"
    (out / f"{module}.py").write_text(PLANTED.format(ran=str(ran)))
    monkeypatch.chdir(out)
    monkeypatch.syspath_prepend(str(out))
    evil = f"{module}:Evil"
    rewrite(record, lambda d: d["spec"].update(encoding=evil), record.with_name("a.json"))
    rewrite(record, lambda d: (d["spec"].update(encoding=evil), d["spec"]["model"].update(scale_embeddings=None)),
            record.with_name("b.json"))  # fmt: skip
    rewrite(record, lambda d: d["spec"].update(imports=[["encoding", "mine", evil]]))  # the genuine record
    try:
        result = compare.compare("smoke", out=out, outputs=results.write_outputs, **run)
        assert result.outcome.skipped and not result.outcome.done  # resumed, nothing trained
        assert not ran.exists() and module not in sys.modules
    finally:
        sys.modules.pop(module, None)


# ---------------------------------------------------------------------------
# Loading a model from a record: code only with consent.
# ---------------------------------------------------------------------------


LOADERS = {
    "load_model": lambda path, **kw: results.load_model(path, **kw),
    "attention_maps": lambda path, **kw: results.trained.attention_maps(path, **kw),
    "probe": lambda path, **kw: results.trained.probe(path, **kw),
}


@pytest.mark.parametrize("case", ["encoding", "task", "imports"])
@pytest.mark.parametrize("loader", list(LOADERS))
def test_loading_a_model_refuses_code_the_record_names(planted, case, loader):
    path = hostile(planted, case, HOSTILE[case](planted))
    with pytest.raises(trust.UntrustedCodeError) as caught:
        LOADERS[loader](path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and all(word in message for word in OPT_IN)
    assert planted.module in message
    assert not planted.ran.exists() and planted.module not in sys.modules


def test_consent_loads_the_code_a_record_names(planted):
    path = hostile(planted, "encoding", _encoding(planted))
    model = results.load_model(path, trust_remote_code=True)
    assert planted.ran.exists()  # the user agreed: the planted module ran
    assert type(model.blocks[0].attn.encoding).__name__ == "Evil"


def test_a_spec_whose_module_this_process_imported_needs_no_consent(planted):
    """A notebook that trained with ``mypkg.pe:Mine`` loads its runs: importing it again runs nothing."""
    __import__(planted.module)  # the user's own session imported it
    planted.ran.unlink()
    model = results.load_model(hostile(planted, "encoding", _encoding(planted)))
    assert type(model.blocks[0].attn.encoding).__name__ == "Evil" and not planted.ran.exists()


@pytest.mark.parametrize("command", ["plot", "probe"])
def test_cli_run_options_refuse_code_in_one_line_and_take_the_opt_in(planted, command, tmp_path):
    path = hostile(planted, "encoding", _encoding(planted))
    args = {"plot": ["plot", "--run", str(path), "--kind", "attention", "-o", str(tmp_path / "a.png")],
            "probe": ["probe", "--run", str(path)]}[command]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("posenc: error: run record") and planted.evil in result.output
    assert "--trust-remote-code" in result.output and not planted.ran.exists()
    result = CliRunner().invoke(main, [*args, "--trust-remote-code"])
    assert result.exit_code == 0, result.output
    assert planted.ran.exists()


def test_a_genuine_record_loads_without_consent(planted):
    """posenc's own encodings, names registered here and entry points need no opt-in."""
    model = results.load_model(planted.record)
    assert type(model.blocks[0].attn.encoding).__name__ == "RoPE"


def test_an_entry_point_planted_in_the_results_directory_is_refused(planted, monkeypatch):
    """A ``.dist-info`` in the directory makes its module look installed (the directory is on
    ``sys.path``): the record's entry point would import the planted module."""
    info = planted.out / "planted_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[posenc.encodings]\nplanted_ep = {planted.evil}\n")
    ENCODING_GROUP.refresh()
    try:
        assert "planted_ep" in ENCODING_GROUP.discover()
        path = hostile(planted, "ep", lambda d: d["spec"].update(encoding="planted_ep"))
        with pytest.raises(
            trust.UntrustedCodeError, match=r"entry point whose module would be imported from"
        ):
            results.load_model(path)
        assert not planted.ran.exists()
    finally:
        monkeypatch.undo()
        ENCODING_GROUP.refresh()


def test_benchmark_report_of_a_foreign_directory_refuses_its_code(planted):
    hostile(planted, "encoding", _encoding(planted))
    with pytest.raises(trust.UntrustedCodeError, match=planted.module):
        benchmark_report(planted.out)
    assert not planted.ran.exists()


# ---------------------------------------------------------------------------
# Configs: printing one imports nothing it names; running one is consent.
# ---------------------------------------------------------------------------


@pytest.fixture
def evil_config(planted):
    path = planted.out / "exp.toml"
    path.write_text(f'extends = "smoke"\nencodings = ["nope", "{planted.evil}"]\n')
    other = planted.out / "exp2.toml"
    other.write_text(f'extends = "smoke"\n[encoding_config."{planted.module}:Other"]\n')
    return planted, path, other


def test_print_config_imports_nothing_the_file_names(evil_config):
    planted, path, other = evil_config
    for config in (path, other):
        result = CliRunner().invoke(main, ["compare", "--config", str(config), "--print-config"])
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert planted.module in result.output and "--trust-remote-code" in result.output
        assert not planted.ran.exists() and planted.module not in sys.modules


def test_print_config_takes_the_opt_in_and_the_users_own_specs(evil_config):
    planted, path, _ = evil_config
    typed = CliRunner().invoke(
        main, ["compare", "--config", str(path), "--print-config", "--encodings", f"nope,{planted.evil}"]
    )
    assert typed.exit_code == 0, typed.output  # the user typed the spec: their choice
    assert planted.ran.exists()
    planted.ran.unlink()
    sys.modules.pop(planted.module, None)
    result = CliRunner().invoke(
        main, ["compare", "--config", str(path), "--print-config", "--trust-remote-code"]
    )
    assert result.exit_code == 0 and planted.evil in result.output, result.output


def test_running_a_config_is_consent_to_its_code(evil_config, monkeypatch):
    """``posenc compare --config FILE`` (no --print-config) runs the experiment the file describes,
    its encodings included, like lm-evaluation-harness's --include_path."""
    planted, path, _ = evil_config

    class Ran(Exception):
        pass

    def stop(prof, **kwargs):
        raise Ran

    monkeypatch.setattr(compare, "compare", stop)
    result = CliRunner().invoke(main, ["compare", "--config", str(path), "--out", str(planted.out / "o")])
    assert isinstance(result.exception, Ran), result.output
    assert planted.ran.exists()


# ---------------------------------------------------------------------------
# Weights files: next to the record, regular, bounded; hashing is not authenticity.
# ---------------------------------------------------------------------------


def _point_weights(record: Path, name: str, size: int | None = None) -> None:
    def change(d):
        d["weights"]["file"] = name
        if size is not None:
            d["weights"]["bytes"] = size

    rewrite(record, change)


def _outside_copy(record: Path, tmp_path: Path) -> Path:
    """The genuine weights, copied outside the results directory (so the checksum matches)."""
    outside = tmp_path / "elsewhere.pt"
    shutil.copy(record.with_suffix(".pt"), outside)
    return outside


WEIGHTS_CASES = {
    "absolute device": lambda record, tmp: _point_weights(record, "/dev/zero"),
    "parent path": lambda record, tmp: _point_weights(record, "../../../etc/passwd"),
    "parent of an outside copy": lambda record, tmp: _point_weights(
        record, "../../../" + _outside_copy(record, tmp).name
    ),
    "symlink to a device": lambda record, tmp: (
        record.with_suffix(".pt").unlink(),
        record.with_suffix(".pt").symlink_to("/dev/zero"),
    ),
    "symlink out of the directory": lambda record, tmp: (
        _outside_copy(record, tmp),
        record.with_suffix(".pt").unlink(),
        record.with_suffix(".pt").symlink_to(tmp / "elsewhere.pt"),
    ),
    "fifo": lambda record, tmp: (record.with_suffix(".pt").unlink(), os.mkfifo(record.with_suffix(".pt"))),
    "size beyond any model's": lambda record, tmp: _point_weights(
        record, record.with_suffix(".pt").name, 1 << 40
    ),
    "size that is not the file's": lambda record, tmp: _point_weights(
        record, record.with_suffix(".pt").name, 10
    ),
}


@pytest.mark.parametrize("case", list(WEIGHTS_CASES))
def test_a_records_weights_stay_next_to_it(case, tmp_path):
    out = tmp_path / "results"
    spec = make_spec()
    record = ResultStore(out).write(spec, make_payload(spec))
    WEIGHTS_CASES[case](record, tmp_path)
    with no_hang():
        with pytest.raises(PosencError) as caught:
            load_weights(record)
        data, reason = ResultStore(out).load(spec)  # what resuming a grid reads
        cli = CliRunner().invoke(main, ["plot", "--run", str(record), "--kind", "attention", "-o", str(tmp_path / "a.png")])  # fmt: skip
    assert "\n" not in str(caught.value) and str(record) in str(caught.value)
    assert data is None and reason
    assert cli.exit_code == 2 and cli.output.count("\n") == 1 and "Traceback" not in cli.output, cli.output


def test_a_symlink_inside_the_records_directory_is_followed(tmp_path):
    out = tmp_path / "results"
    spec = make_spec()
    record = ResultStore(out).write(spec, make_payload(spec))
    weights = record.with_suffix(".pt")
    weights.rename(record.parent / "kept.bin")
    weights.symlink_to("kept.bin")
    assert set(load_weights(record)) == set(build_model(spec).state_dict())


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_record_that_is_not_a_regular_file_is_skipped_not_read(kind, tmp_path):
    out = tmp_path / "results"
    spec = make_spec()
    ResultStore(out).write(spec, make_payload(spec))
    odd = out / "runs" / "copy" / "odd.json"
    os.mkfifo(odd) if kind == "fifo" else odd.symlink_to("/dev/zero")
    warnings: list[str] = []
    with no_hang():
        records = ResultStore(out).records(warn=warnings.append)
    assert len(records) == 1 and len(warnings) == 1 and "not a regular file" in warnings[0]


def test_weights_load_as_tensors_only(tmp_path):
    """The SHA-256 is an integrity check (anyone can write a record with a matching checksum),
    so the weights must load as data: a pickle that would run code is refused."""
    out = tmp_path / "results"
    spec = make_spec()
    record = ResultStore(out).write(spec, make_payload(spec))

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo ran > " + str(tmp_path / "RAN"),))

    buffer = io.BytesIO()
    torch.save({"x": Boom()}, buffer)
    record.with_suffix(".pt").write_bytes(buffer.getvalue())
    import hashlib

    rewrite(record, lambda d: d["weights"].update(sha256=hashlib.sha256(buffer.getvalue()).hexdigest(),
                                                    bytes=len(buffer.getvalue())))  # fmt: skip
    with pytest.raises(PosencError, match="not a saved state dict"):
        load_weights(record)
    assert not (tmp_path / "RAN").exists()


# ---------------------------------------------------------------------------
# File names made from record fields stay inside the directory.
# ---------------------------------------------------------------------------


def test_write_outputs_keeps_every_file_inside_the_directory(tmp_path):
    out = tmp_path / "deep" / "results"
    record = ResultStore(out).write(make_spec(), make_payload(make_spec()))
    rewrite(record, lambda d: d["spec"].update(task="../../outside/evil"), record.with_name("hostile.json"))
    before = set(tmp_path.rglob("*"))
    results.write_outputs(out, log=lambda _: None)
    new = set(tmp_path.rglob("*")) - before
    assert new and all(out in p.parents for p in new), sorted(str(p) for p in new if out not in p.parents)
    assert len(list((out / "figures").glob("*.png"))) == 4  # copy and the hostile task, two figures each


HOSTILE_TASKS = ["/abs/evil", ".."]  # "../../outside/evil": above; the rest: test_safe_name_...


def test_figure_files_named_after_tasks_stay_inside_the_directory(tmp_path):
    """Every task a record may hold (data) gives one plain file name inside the figures directory;
    ``$...$`` in a task or label is drawn as text, not parsed as mathtext."""
    record = ResultStore(tmp_path / "results").write(make_spec(), make_payload(make_spec()))
    base = json.loads(record.read_text())
    records = [base] + [
        {**base, "label": f"${task}$", "spec": {**base["spec"], "task": task}} for task in HOSTILE_TASKS
    ]
    target = tmp_path / "a" / "figures"
    paths = save_all(records, target)
    assert len(paths) == 2 * (1 + len(HOSTILE_TASKS)) == len(set(paths))
    assert all(p.parent == target and p.is_file() for p in paths)
    assert set(tmp_path.rglob("*.png")) == set(paths)


def test_html_from_records_is_escaped(tmp_path):
    out = tmp_path / "results"
    record = ResultStore(out).write(make_spec(), make_payload(make_spec()))
    script = "<script>alert(1)</script>"
    rewrite(record, lambda d: d.update(label=script), record.with_name("label.json"))
    rewrite(record, lambda d: d["spec"].update(task=script), record.with_name("task.json"))
    rewrite(record, lambda d: d["spec"].update(seed=script), record.with_name("seed.json"))
    page = report_section.render(out)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_safe_name_keeps_posencs_own_names_and_makes_others_one_component():
    for name in ("copy", "lm", "rope", "rope+rand", "sinusoidal[concat]", "irope:2", "t5-at-scaled"):
        assert files.safe_name(name) == name
    for name in ("..", ".", "", "a/b", "../../x", "a\\b", "x\x00y", "\n", "." * 300, "y" * 300):
        safe = files.safe_name(name)
        assert safe and "/" not in safe and "\\" not in safe and safe not in (".", "..")
        assert not safe.startswith(".") and len(safe) <= files.MAX_NAME_CHARS
    assert files.safe_name("y" * 300) != files.safe_name("y" * 301)


def test_validate_record_refuses_hostile_types_without_raising():
    spec = make_spec()
    good = {"schema": "posenc.bench.run/1", "run_id": spec.run_id, "label": spec.label, "spec": spec.to_dict(),
            "versions": {"python": "3"}, "result": make_payload(spec, weights=False)}  # fmt: skip
    for change in (
        lambda d: d["spec"].update(seed="0"),
        lambda d: d["spec"].update(encoding=["rope"]),
        lambda d: d["spec"].update(imports=[["x", "y", "z"]]),
        lambda d: d["spec"].update(imports="evil:X"),
        lambda d: d["spec"].update(eval="x"),
        lambda d: d["spec"].pop("model"),
        lambda d: d.update(versions={"python": 3}),
        lambda d: d.update(weights={"file": "x.pt", "sha256": "0" * 64}),
        lambda d: d.update(weights={"file": "x.pt", "sha256": "0" * 64, "bytes": True}),
        lambda d: d.update(weights={"file": "x.pt", "sha256": "z", "bytes": 3}),
        lambda d: d["result"].update(extra=float("nan")),
    ):
        data = json.loads(json.dumps(good))
        change(data)
        data["checksum"] = checksum(data) if "extra" not in data["result"] else "0"
        assert isinstance(validate_record(data), str)
    data = json.loads(json.dumps(good))
    data["checksum"] = checksum(data)
    assert validate_record(data) is None
