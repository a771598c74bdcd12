"""The speed races (benchmarks/, a developer tool) on tiny shapes: records, ratios, memory
probe, comparison, the command line (``python benchmarks/run_speed.py``).

No timing assertions: only that every contender is run or reported as skipped, that the
derived ratios are consistent with the medians, and that a regression is flagged.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from tests.faults import FAULTS, fault_path, unwritable_directory

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the races are scripts of the repository, not of the package
import run_speed  # noqa: E402
import speed  # noqa: E402
import speed_cases as cases_mod  # noqa: E402
import speed_compare  # noqa: E402


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("speed")
    return speed.run("smoke", memory=False, out_dir=out)


def test_smoke_record_has_every_section_and_contender(record):
    on_disk = json.loads(open(record["path"]).read())
    assert on_disk["kind"] == "posenc-speed" and on_disk["mode"] == "smoke"
    assert on_disk["machine"]["versions"]["torch"]
    assert set(speed.SECTIONS) <= on_disk.keys()
    rope = on_disk["rope"]
    assert {(g["dtype"], g["mode"]) for g in rope} == {
        (d, m) for d in speed.DTYPES for m in ("fwd", "fwd+bwd")
    }
    for group in rope:
        names = set(group["results"])
        assert {speed.ROOFLINE, speed.POSENC_ROPE, "hf transformers", "torchtune"} <= names
        for r in group["results"].values():
            assert ("ms" in r) != ("skipped" in r)  # measured, or skipped with a reason
            if "ms" in r:
                roof = group["results"][speed.ROOFLINE]["ms"]
                assert r["x_roofline"] == pytest.approx(r["ms"] / roof)
    bias = on_disk["bias"][0]["results"]
    assert {speed.FLOOR, speed.POSENC_BIAS, "sdpa + dense bias", "x-transformers"} <= set(bias)
    assert bias[speed.FLOOR]["x_floor"] == pytest.approx(1.0)
    assert {g["mode"] for g in on_disk["bias"]} == {"fwd", "fwd+bwd"}
    fire = next(g for g in on_disk["bias"] if g["encoding"] == "fire")["results"][speed.POSENC_BIAS]
    alibi = next(g for g in on_disk["bias"] if g["encoding"] == "alibi")["results"][speed.POSENC_BIAS]
    assert fire["x_alibi"] == pytest.approx(fire["ms"] / alibi["ms"])
    decode = {g["case"]: g["results"] for g in on_disk["decode"]}
    assert len(decode) == 3
    rope = next(r for case, r in decode.items() if case.startswith("rope 1x"))
    assert {speed.DECODE_CHECKED, "hf transformers"} <= set(rope)
    assert rope[speed.DECODE_CHECKED]["us"] == pytest.approx(1e3 * rope[speed.DECODE_CHECKED]["ms"])
    scalings = next(r for case, r in decode.items() if case.startswith("rope scalings"))
    assert scalings["rope (static)"]["x_static"] == pytest.approx(1.0) and len(scalings) == 3
    train = on_disk["train"][0]["results"]
    assert "posenc" in train and train["posenc"].get("tokens_per_s", 0) > 0


def test_rows_and_tables_cover_the_record(record):
    rows = speed.rows(record)
    assert len(rows) == sum(len(g["results"]) for s in speed.SECTIONS for g in record[s])
    assert [t.title.split(": ")[-1] for t in speed.render(record)] == list(
        speed.SECTIONS
    )  # no targets in smoke


def test_targets_are_judged_and_rendered():
    """Goals are read from the rows the record has: met, missed, and the peer alongside."""
    record = {"mode": "quick", "rope": [{"shape": [1, 32, 2048, 128], "dtype": "float32", "mode": "fwd",
              "results": {speed.POSENC_ROPE: {"ms": 1.0, "x_roofline": 1.2},
                          "hf transformers": {"ms": 4.0, "x_roofline": 4.8}}}],
              "decode": [{"case": "rope 1x32x1x128 one token", "shape": [1, 32, 1, 128], "mode": "decode",
                          "results": {speed.DECODE_CHECKED: {"us": 8.0}, "hf transformers": {"us": 100.0,
                                                                                        "posenc_speedup": 12.5}}}]}  # fmt: skip
    found = {t["label"]: t for t in speed.targets(record)}
    assert len(found) == 3
    copy = found["RoPE forward (1,32,2048,128) fp32, x copy"]
    assert copy["met"] is False and copy["peer_value"] == 4.8 and copy["goal"] == "<= 1.05x"
    assert found["RoPE decode, one token (1,32,1,128), us per call"]["met"] is True
    assert found["RoPE decode, one token: times faster than HF"]["met"] is True
    markdown = speed.targets_markdown(record)
    assert markdown.count("\n") == 4 and "**missed**" in markdown and "8.0 us" in markdown
    assert [t.title.split(": ")[-1] for t in speed.render(record)][-1] == "targets"


def _copy_ratio_record(ratio: float, load: float) -> dict:
    return {"mode": "quick", "created": "2026-11-23T00:00:00", "machine": {"cpu": "cpu", "torch_threads": 2,
            "load_average": [load, 0, 0], "load_average_after": [load, 0, 0]},
            "rope": [{"shape": [1, 32, 2048, 128], "dtype": "float32", "mode": "fwd",
                      "results": {speed.POSENC_ROPE: {"ms": 1.0, "x_roofline": ratio},
                                  "hf transformers": {"ms": 4.0, "x_roofline": 4 * ratio}}}],
            "decode": [], "bias": [], "train": []}  # fmt: skip


def test_several_runs_judge_each_goal_on_their_median_and_show_the_range():
    runs = [_copy_ratio_record(r, load) for r, load in ((1.25, 0.9), (1.0, 0.3), (1.04, 0.4))]
    (copy,) = speed.targets_over(runs)
    assert (copy["value"], copy["low"], copy["high"], copy["runs"]) == (1.04, 1.0, 1.25, 3)
    assert copy["met"] is True and copy["peer_value"] == 4 * 1.04  # the first run alone: missed
    assert speed.targets(runs[0])[0]["met"] is False
    text = speed.readme_markdown(runs[0], path="a.json", others=[("b.json", runs[1]), ("c.json", runs[2])])
    assert (
        "From 3 runs of `python benchmarks/run_speed.py --quick`" in text
        and "`c.json` (1-min load 0.40" in text
    )
    assert "| 1.04x | 1.00x - 1.25x (3) |" in text and "| met |" in text
    assert "range over runs" not in speed.readme_markdown(runs[0], path="a.json")


def test_records_of_different_vector_code_get_a_table_each():
    """An AVX2 build timed on an AVX-512 machine next to its native build: one row set per vector
    code, each judged on its own runs, never the median of both."""
    avx2 = {"kernel": "avx2", "torch": "AVX2", "cpu": "avx512", "forced": "avx2"}
    native = {"kernel": "avx512", "torch": "AVX512", "cpu": "avx512", "forced": None}
    runs = [_copy_ratio_record(r, 0.1) for r in (1.3, 1.02, 1.4, 1.04)]
    for run, isa in zip(runs, (avx2, native, avx2, native)):
        run["machine"]["vector_isa"] = isa
    text = speed.readme_markdown(runs[0], path="a.json", others=[(p, r) for p, r in zip("bcd", runs[1:])])
    assert "**posenc kernel avx2 (forced), torch AVX2, CPU avx512**" in text
    assert "**posenc kernel avx512, torch AVX512, CPU avx512**" in text
    assert text.count("From 2 runs") == 2 and "| 1.35x | 1.30x - 1.40x (2) |" in text
    assert "| 1.03x | 1.02x - 1.04x (2) |" in text
    assert speed.isa_label({"machine": {}}) == "vector code not recorded"
    for plan in ([], {"allocator": "steady"}, {"allocator": {"mode": "as-is"}}, None):  # odd or older records
        assert not speed.steady_record({"plan": plan})
    assert speed.steady_record({"plan": {"allocator": {"mode": "steady"}}})


def test_a_forced_isa_reaches_the_kernel_and_torch(monkeypatch):
    """``--isa avx2`` starts the race again with the environment torch reads when it loads."""
    from posenc.kernels import _build

    if not {"avx2", "fma", "f16c"} <= _build.cpu_features():
        pytest.skip("this CPU has no AVX2")
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run_speed.py"), "--smoke", "--section", "rope", "--no-save",
         "--format", "json", "--isa", "avx2"],
        capture_output=True, text=True, timeout=600, env={k: v for k, v in os.environ.items()
                                                          if k not in ("POSENC_KERNEL_ISA", "ATEN_CPU_CAPABILITY")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout[result.stdout.index("{") :])["record"]
    isa = record["machine"]["vector_isa"]
    assert (isa["kernel"], isa["torch"], isa["forced"]) == ("avx2", "AVX2", "avx2")
    # the race's own process keeps what it frees (glibc), and the record and its label say so
    assert record["plan"]["allocator"]["mode"] == ("steady" if sys.platform == "linux" else "as-is")
    assert speed.isa_label(record).endswith(", malloc steady") == (sys.platform == "linux")
    # in a process whose torch is already loaded the option is refused, never half applied
    monkeypatch.delenv("POSENC_KERNEL_ISA", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    refused = CliRunner().invoke(run_speed.run_command, ["--smoke", "--no-save", "--isa", "avx2"])
    assert refused.exit_code == 2 and "must be set before torch loads" in refused.output


def test_peak_memory_probe_sees_torch_allocations():
    def allocate():
        x = torch.ones(64, 1 << 20, dtype=torch.uint8)  # 64 MiB, touched
        return int(x[-1, -1])

    mb, method = speed._peak_extra_mb(allocate)
    assert method in ("VmHWM", "ru_maxrss")
    assert mb >= 48 if method == "VmHWM" else mb >= 0


def test_compare_flags_a_ratio_that_got_worse(record):
    worse = copy.deepcopy(record)
    group = worse["rope"][0]["results"][speed.POSENC_ROPE]
    group["x_roofline"] *= 1.5
    result = speed_compare.compare(record, worse)
    assert any(speed.POSENC_ROPE in e["metric"] and "x_roofline" in e["metric"] for e in result["worse"])
    assert speed_compare.compare(record, record)["worse"] == []
    assert "1 worse" in speed_compare.summary_lines(result)[-1]


def test_cli_smoke_json(tmp_path):
    args = [
        "--smoke",
        "--section",
        "bias",
        "--no-memory",
        "--out",
        str(tmp_path),
        "--format",
        "json",
        "--allocator",  # (steady would keep this test process's freed memory from here on)
        "as-is",
    ]
    result = CliRunner().invoke(run_speed.run_command, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output[result.output.index("{") :])
    assert payload["record"]["mode"] == "smoke" and "bias" in payload["record"]
    assert payload["record"]["plan"]["allocator"] == {"mode": "as-is", "why": "as asked"}
    assert list(tmp_path.glob("speed-smoke-*.json"))
    with pytest.raises(ValueError, match="mode"):
        speed.run("huge", out_dir=None)


def test_every_target_finds_its_case_in_the_newest_quick_record():
    """The goals name cases by the record's own case strings: a renamed case would drop its goal."""
    newest = sorted(
        (Path(__file__).resolve().parents[2] / "benchmarks" / "results").glob("speed-quick-*.json")
    )[-1]
    record = json.loads(newest.read_text())
    assert [t["label"] for t in speed.targets(record)] == [t.label for t in speed.TARGETS]


def test_train_cases_build_the_compiled_contender(monkeypatch):
    """A compiled module has no truth value: the compiled step must be built, not reported skipped
    (unless torch 2.13's inductor would corrupt the heap compiling it: then skipped, saying why)."""
    monkeypatch.setattr(cases_mod, "_inductor_corrupts_the_heap", lambda: False)
    found = cases_mod.train_cases("rope", 2, 4, compiled=True)
    assert callable(found["posenc"]) and callable(found[cases_mod.POSENC_COMPILED])
    monkeypatch.setattr(cases_mod, "_inductor_corrupts_the_heap", lambda: True)
    skipped = cases_mod.train_cases("rope", 2, 4, compiled=True)
    assert callable(skipped["posenc"]) and skipped[cases_mod.POSENC_COMPILED].startswith(
        "skipped: torch 2.13's"
    )


def _one_line_error(argv: list[str], capsys) -> str:
    assert run_speed.main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("run_speed.py: error:"), lines
    return lines[0]


def test_cli_bad_threads_is_one_line_exit_2(capsys):
    assert "--threads" in _one_line_error(["--smoke", "--no-save", "--threads", "-1"], capsys)


def test_a_device_is_checked_and_a_gpu_races_only_the_sections_that_follow_it(capsys, monkeypatch):
    if not torch.cuda.is_available():
        assert "no CUDA device here" in _one_line_error(["--smoke", "--no-save", "--device", "cuda"], capsys)
    assert "--device" in _one_line_error(["--smoke", "--no-save", "--device", "gpu"], capsys)
    monkeypatch.setattr(speed, "resolve_device", lambda text: "cuda")  # as on a machine with one
    monkeypatch.setattr(cases_mod, "DEVICE", cases_mod.DEVICE)  # restored after the test
    message = _one_line_error(["--smoke", "--no-save", "--device", "cuda", "--section", "decode"], capsys)
    assert "races only ['rope', 'bias']" in message and "'decode'" in message


@pytest.fixture(scope="module")
def unwritable(tmp_path_factory):
    directory = tmp_path_factory.mktemp("unwritable")
    with unwritable_directory(directory) as path:
        yield path


@pytest.mark.parametrize("fault", FAULTS["write directory"])
def test_cli_out_faults_are_one_line_exit_2_before_any_timing(
    fault, tmp_path, unwritable, capsys, monkeypatch
):
    """The --out directory is checked before minutes of timing: a fault is one line naming it."""

    def reached(*args, **kwargs):
        raise AssertionError("the fault was not noticed before the timing")

    monkeypatch.setattr(speed, "run", reached)
    monkeypatch.chdir(tmp_path)
    bad = fault_path(fault, "write directory", tmp_path, unwritable)
    line = _one_line_error(["--smoke", "--section", "bias", "--no-memory", "--out", bad], capsys)
    assert bad[:60] in line, line


def test_kernel_builds_race_in_one_process():
    """benchmarks/kernel_isa.py: every build this CPU runs (and another source) timed beside a copy."""
    from posenc.kernels import _build

    if not {"avx2", "fma", "f16c"} <= _build.cpu_features() or _build.load("_rope", "avx2") is None:
        pytest.skip("no AVX2 build of the kernel here")
    source = Path(__file__).resolve().parents[2] / "src" / "posenc" / "kernels" / "_rope.c"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "kernel_isa.py"), "--isa", "avx2", "--source", str(source), "--rounds", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert "allocator" in lines[0] and len(lines) == 5
    for line in lines[1:]:
        assert "copy" in line and "avx2 build " in line and "avx2 build of _rope.c" in line and "x)" in line


def test_bias_spans_race_in_one_process():
    """benchmarks/bias_spans.py: the floor, the row blocks, their bare calls and spans, checked equal, then timed."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bias_spans.py"), "--length", "300", "--encoding", "alibi",
         "--spans", "128/32", "--spans", "64/16", "--rounds", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert "allocator" in lines[0] and len(lines) == 6
    labels = [
        "unbiased causal SDPA",
        "row blocks of 128",
        "the blocks, no bias/mask",
        "spans 128/32",
        "spans 64/16",
    ]
    for line, label in zip(lines[1:], labels):
        assert line.startswith(f"L 300 alibi {label}") and line.rstrip().endswith(")") and "x (" in line
