"""Results are never lost: SIGKILL a real ``posenc compare`` mid-grid, rerun, compare with a clean run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from posenc.records.store import ResultStore

SEEDS = "0,1,2"  # 6 smoke runs: enough time between the first record and the last to kill
TOTAL = 6


def _command(out: Path) -> list[str]:
    return [
        sys.executable, "-c", "from posenc.cli import main; main()", "compare", "--profile", "smoke", "--encodings", "nope",
        "--seeds", SEEDS, "--out", str(out), "--no-report", "--format", "json",
    ]  # fmt: skip


def _numbers(record: dict) -> dict:
    result = record["result"]
    return {"loss": result["train"]["loss"], "eval": result["eval"], "spec": record["spec"]}


def _records(out: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in ResultStore(out).records()}


def test_sigkill_then_rerun_resumes_and_matches_an_uninterrupted_run(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen(_command(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if list((killed / "runs").glob("*/*.json")):
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    survivors = _records(killed)
    on_disk = list((killed / "runs").glob("*/*.json"))
    assert 1 <= len(survivors) < TOTAL
    assert len(on_disk) == len(survivors)  # every file under a final name is a complete, valid record

    rerun = subprocess.run(_command(killed), capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    outcome = json.loads(rerun.stdout)["outcome"]
    assert outcome["skipped"] == len(survivors) and outcome["done"] == TOTAL - len(survivors)
    assert not list((killed / "runs").glob("*/.*.tmp"))  # a half-written temp file is cleaned up

    done = subprocess.run(_command(clean), capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    resumed, reference = _records(killed), _records(clean)
    assert set(resumed) == set(reference) and len(reference) == TOTAL
    for run_id, record in reference.items():
        assert _numbers(resumed[run_id]) == _numbers(record), run_id
    for run_id in survivors:  # records written before the kill were kept, not redone
        assert resumed[run_id]["checksum"] == survivors[run_id]["checksum"]


def test_records_of_another_benchmark_version_are_never_resumed_or_summarised(tmp_path):
    """A record written under older benchmark semantics (version 1: fixed steps, one learning
    rate) stays on disk but is not resumed as current, not summarised, and the run says why."""
    import dataclasses

    from posenc.compare.executor import LocalExecutor
    from posenc.compare.grid import build_grid
    from posenc.compare.profile import get_profile
    from posenc.compare.runner import run_grid
    from posenc.compare.work import execute
    from posenc.records.spec import BENCHMARK_VERSION, RunSpec
    from posenc.records.store import make_record, validate_record, version_problem

    (spec,) = build_grid(get_profile("smoke"), encodings=("nope",), tasks=("copy",), seeds=(0,)).specs
    payload = execute(spec)
    payload.pop("weights_bytes")
    store = ResultStore(tmp_path)
    # The same run as an older posenc wrote it: no version field in its spec (= version 1).
    old_spec = dataclasses.replace(spec, benchmark=1)
    old = make_record(old_spec, payload)
    old_dict = json.loads(json.dumps(old))
    del old_dict["spec"]["benchmark"]
    assert RunSpec.from_dict(old_dict["spec"]).benchmark == 1
    assert old_spec.run_id != spec.run_id  # the version is part of what a run is
    path = store.path_for(old_spec)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    reason = validate_record(json.loads(path.read_text()))
    assert reason is not None and "benchmark version 1" in reason and f"version {BENCHMARK_VERSION}" in reason
    assert version_problem(json.loads(path.read_text())) == reason

    logs: list[str] = []
    outcome = run_grid([spec], store, LocalExecutor(1), show_progress=False, log=logs.append)
    assert outcome.done == [spec.run_id] and not outcome.skipped  # redone, not resumed
    assert any("benchmark version 1" in line and "never resumed" in line for line in logs)
    assert path.exists()  # kept on disk for the user
    assert [r["run_id"] for r in store.records(latest_grid=False)] == [spec.run_id]  # not summarised

    # Even at the current run's own path, a record claiming another version is refused.
    current = store.path_for(spec)
    forged = make_record(spec, payload)
    forged["spec"]["benchmark"] = BENCHMARK_VERSION + 1
    current.write_text(json.dumps(forged))
    record, why = store.load(spec)
    assert record is None and f"benchmark version {BENCHMARK_VERSION + 1}" in why
