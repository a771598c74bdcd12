"""``posenc compare`` (``posenc.cli.compare_command``). Your own protocol as a file: ``--print-config``,
``--config FILE``, ``--set KEY=VALUE``, and the one-line errors (exit 2, nothing started) for every bad
spec, key, device or precision; a run in JSON and its resume; the printed table."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from posenc import registry
from posenc.cli import main
from posenc.compare.grid import build_grid
from posenc.compare.profile import PROFILES, load_profile
from posenc.tasks import task_registry

# Fields that depend on when and where a run executed, not on what it computed.
TIMING = ("wall_seconds", "compute_seconds", "steps_per_second")


def printed(*args: str) -> str:
    result = CliRunner().invoke(main, ["compare", *args, "--print-config"])
    assert result.exit_code == 0, result.output
    return result.stdout


def one_line_error(args: list[str], out: Path | None = None) -> str:
    """Run ``posenc compare ARGS`` expecting one error line, exit 2 and no run started."""
    full = ["compare", *args] + (["--out", str(out)] if out is not None else [])
    result = CliRunner().invoke(main, full)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.output)
    assert lines[0].startswith("posenc: error:") and "Traceback" not in result.output
    if out is not None:
        assert not list(out.rglob("*.json")), "a run was started"
    return lines[0]


# ---------------------------------------------------------------------------
# --print-config and --config: the same grid.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_shipped_profile_printed_and_read_back_is_the_same_profile_and_grid(tmp_path, name):
    path = tmp_path / "exp.toml"
    path.write_text(printed("--profile", name))
    mine = load_profile(path)
    assert mine == dataclasses.replace(PROFILES[name], name="exp")  # every key, nothing lost
    ids = [spec.run_id for spec in build_grid(mine).specs]
    assert ids == [spec.run_id for spec in build_grid(PROFILES[name]).specs] and len(set(ids)) == len(ids)


def comparable(record: dict) -> dict:
    record = json.loads(json.dumps(record))
    for key in ("checksum", "versions"):
        record.pop(key)
    record["spec"].pop("profile")  # provenance: "smoke" vs the config file's name
    record["result"].pop("timing")
    for key in TIMING:
        record["result"]["train"].pop(key)
    return record


def records(out: Path) -> dict[str, dict]:
    found = {}
    for path in (out / "runs").glob("*/*.json"):
        record = json.loads(path.read_text())
        found[record["run_id"]] = comparable(record)
    return found


def test_config_of_the_printed_smoke_profile_gives_the_same_run_ids_and_numbers(tmp_path):
    config = tmp_path / "smoke-copy.toml"
    config.write_text(printed("--profile", "smoke"))
    runner = CliRunner()
    by_profile = runner.invoke(
        main, ["compare", "--profile", "smoke", "--out", str(tmp_path / "a"), "--no-report"]
    )
    assert by_profile.exit_code == 0, by_profile.output
    by_config = runner.invoke(
        main, ["compare", "--config", str(config), "--out", str(tmp_path / "b"), "--no-report"]
    )
    assert by_config.exit_code == 0, by_config.output
    a, b = records(tmp_path / "a"), records(tmp_path / "b")
    assert len(a) == 12 and a == b  # 2 encodings x (copy, lm) x 3 seeds: same ids, same numbers
    # the effective config is stored with the results, and runs the same grid again
    stored = load_profile(tmp_path / "a" / "config.toml")
    assert [s.run_id for s in build_grid(stored).specs] == [
        s.run_id for s in build_grid(PROFILES["smoke"]).specs
    ]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["config"] == "config.toml"


def test_options_are_folded_into_the_printed_config(tmp_path):
    text = printed(
        "--profile", "smoke", "--encodings", "rope,nope", "--tasks", "copy", "--seeds", "4,5", "--workers", "2",
        "--kv-heads", "1", "--device", "cpu", "--precision", "bf16", "--set", "model.d_model=32",
        "--set", 'eval.lm_protocol=sliding',
    )  # fmt: skip
    assert text.startswith("# posenc compare --profile smoke: the effective config")
    path = tmp_path / "folded.toml"
    path.write_text(text)
    prof = load_profile(path)
    assert (prof.encodings, prof.tasks, prof.seeds, prof.workers) == (("rope", "nope"), ("copy",), (4, 5), 2)
    assert (prof.model.d_model, prof.model.num_kv_heads, prof.device, prof.precision) == (
        32,
        1,
        "cpu",
        "bf16",
    )
    assert prof.eval.lm_protocol == "sliding"


def test_set_changes_one_key_and_the_run_ids(tmp_path):
    wide = load_profile("smoke", ["model.d_model=32", "seeds=[0]", "encodings=all"])
    smoke = PROFILES["smoke"]
    assert wide.model == dataclasses.replace(smoke.model, d_model=32) and wide.seeds == (0,)
    assert wide.encodings is None  # "all"
    ids = {s.run_id for s in build_grid(wide, encodings=("nope",)).specs}
    assert ids and not ids & {s.run_id for s in build_grid(smoke, encodings=("nope",)).specs}


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (["model.d_modle=128"], ["--set", "model.d_modle", "unknown key", "did you mean 'd_model'"]),
        (["task_train.steps=0"], ["--set", "task_train.steps = 0", "must be >= 1"]),
        (["seeds=0"], ["--set", "seeds = 0", "must be a list"]),
        (["d_model"], ["--set takes KEY=VALUE"]),
        (["device=gpu"], ["--set", "device = 'gpu'", "auto, cpu, cuda, cuda:N or mps"]),
        (["precision=fp16"], ["--set", "precision = 'fp16'", "fp32, bf16"]),
    ],
)
def test_a_bad_set_is_one_line_naming_it(tmp_path, settings, words):
    args = ["--profile", "smoke"] + [x for s in settings for x in ("--set", s)]
    line = one_line_error(args, tmp_path / "out")
    assert all(word in line for word in words), line


def test_profile_and_config_together_are_refused(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('extends = "smoke"\n')
    line = one_line_error(["--profile", "quick", "--config", str(config)], tmp_path / "out")
    assert "--profile NAME or --config FILE, not both" in line


# ---------------------------------------------------------------------------
# Bad specs: one line, exit 2, nothing started.
# ---------------------------------------------------------------------------


def _config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text('extends = "smoke"\n' + textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--encodings", "no_such_module_xyz:Enc,rope"],
            ["--encodings", "cannot import module 'no_such_module_xyz'"],
        ),
        (
            ["--encodings", "posenc.encoding.rotary.rope:apply_rotary"],
            ["--encodings", "not an encoding class"],
        ),
        (["--encodings", "rpoe"], ["--encodings", "'rpoe' is not an encoding", "did you mean 'rope'"]),
        (["--tasks", "no_such_module_xyz:Task"], ["--tasks", "cannot import module"]),
        (["--tasks", "posenc.encoding.rotary.rope:RoPE"], ["--tasks", "not a task class"]),
        (["--tasks", "cpy"], ["--tasks", "did you mean 'copy'"]),
        (["--device", "cuda:0"], ["--device cuda:0", "no CUDA device here"]),
        (["--device", "mps"], ["--device mps", "no Apple GPU here"]),
        (["--device", "gpu"], ["--device", "auto, cpu, cuda, cuda:N or mps"]),
    ],
)
def test_bad_names_and_devices_are_one_line_and_start_nothing(tmp_path, monkeypatch, args, words):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a machine with a GPU
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    line = one_line_error(["--profile", "smoke", *args], tmp_path / "out")
    assert all(word in line for word in words), line


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[model]\nd_modle = 128\n", ["exp.toml", "model.d_modle", "did you mean 'd_model'"]),
        ('encodings = ["no_such_module_xyz:Enc"]\n', ["exp.toml", "encodings", "cannot import module"]),
        ('tasks = ["sortt"]\n', ["exp.toml", "tasks", "'sortt' is not a task"]),
        ('device = "cuda"\n', ["device cuda", "no CUDA device here"]),
        ('device = "tpu"\n', ["exp.toml", "device = 'tpu'", "must be one of"]),
        ('precision = "bf16"\n', ["precision bf16", "does not compute in bfloat16"]),
    ],
)
def test_a_bad_config_file_is_one_line_and_starts_nothing(tmp_path, monkeypatch, text, words):
    import torch

    from posenc.compare import device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device, "bf16_supported", lambda _: False)  # a device without bfloat16
    line = one_line_error(["--config", str(_config_file(tmp_path, text))], tmp_path / "out")
    assert all(word in line for word in words), line


def test_bf16_where_the_device_lacks_it_is_one_line(tmp_path, monkeypatch):
    from posenc.compare import device

    monkeypatch.setattr(device, "bf16_supported", lambda _: False)
    line = one_line_error(["--profile", "smoke", "--precision", "bf16"], tmp_path / "out")
    assert "--precision bf16" in line and "device cpu does not compute in bfloat16" in line


def dist_info(root: Path, name: str, group: str, entry_points: dict[str, str]) -> Path:
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = [f"{key} = {value}" for key, value in entry_points.items()]
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize(
    ("group", "name", "words"),
    [
        ("posenc.encodings", "rope", ["entry point 'rope'", "posenc-clash", "name of a built-in encoding"]),
        ("posenc.tasks", "copy", ["entry point 'copy'", "posenc-clash", "name of a built-in task"]),
        ("posenc.tasks", "lm", ["entry point 'lm'", "name of a built-in task"]),
    ],
)
def test_an_entry_point_under_a_builtin_name_is_refused_before_anything(
    tmp_path, monkeypatch, group, name, words
):
    site = dist_info(tmp_path / "site", "posenc-clash", group, {name: "posenc_demo:LogDecayBias"})
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()
    task_registry.GROUP.refresh()
    try:
        # the grid asks for the name (smoke's tasks are copy and lm): which class runs is not the user's
        line = one_line_error(["--profile", "smoke", "--encodings", "rope"], tmp_path / "out")
        assert all(word in line for word in words), line
    finally:
        sys.path.remove(str(site))
        registry.refresh()
        task_registry.GROUP.refresh()


# ---------------------------------------------------------------------------
# Runs through the command: JSON, resume, the printed table.
# ---------------------------------------------------------------------------


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


def test_the_printed_table_shows_square_brackets_as_written(tmp_path):
    """Labels (rope[dynamic:4]) and the caption ([one seed]) hold square brackets: printed as data,
    never read as console markup (which dropped them)."""
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy",
                                       "--seeds", "0", "--no-report", "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the caption wraps at the console's width
    assert "[one seed]: no interval" in text and "(rope, rope[dynamic:4], ...)" in text


# ---------------------------------------------------------------------------
# The options are the library's to check: the command names them.
# ---------------------------------------------------------------------------


ROOT = Path(__file__).resolve().parents[3]


def one_line(args: list[str], out: Path) -> str:
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", *args, "--out", str(out)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.output)
    assert lines[0].startswith("posenc: error:") and "Traceback" not in result.output
    assert not (out / "runs").exists()
    return lines[0]


def test_kv_heads_that_is_no_number_and_no_preset_is_one_line(tmp_path):
    """Found: ``--kv-heads ²`` (a digit to str.isdigit, not to int) ended in a traceback."""
    line = one_line(["--kv-heads", "²"], tmp_path / "out")
    assert "--kv-heads: model.num_kv_heads = '²'" in line and "a preset name" in line


def test_the_command_leaves_the_checks_to_the_library():
    """cli/compare_command.py imports none of the checks the library makes (they ran twice before)."""
    tree = ast.parse((ROOT / "src" / "posenc" / "cli" / "compare_command.py").read_text(encoding="utf-8"))
    imported = {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    checks = {"check_int", "check_kv_heads", "resolve_device", "check_precision", "require_ray", "presets"}
    assert not imported & checks, imported & checks


def test_until_decided_runs_looks_until_it_stops_by_itself(tmp_path):
    """``posenc compare --until decided --budget``: the smoke LM's question, looks of 3, 4 and 5 seeds;
    it stops by itself (decided, or its plan ended) and summary.json says what it decided."""
    out = tmp_path / "until"
    args = ["compare", "--profile", "smoke", "--tasks", "lm", "--scalings", "", "--until", "decided"]
    result = CliRunner().invoke(main, [*args, "--budget", "10m", "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    until = json.loads((out / "run.json").read_text())["until"]
    assert until["stopped"] in ("decided", "plan ended") and until["budget_seconds"] == 600.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["primary"]["looks_done"] == until["looks_run"] and summary["sequential"]["decisions"]
    assert summary["sequential"]["all_decided"] == (until["stopped"] == "decided")
    assert "--until decided: looks run at" in result.output and "primary questions" in result.output
    assert "--budget goes with --until decided" in one_line_error(["--profile", "smoke", "--budget", "5m"])
    assert "--budget must be a positive time" in one_line_error(
        ["--profile", "smoke", "--until", "decided", "--budget", "soon"], tmp_path / "bad"
    )
