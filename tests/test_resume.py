"""Results are never lost: SIGKILL a real ``posenc compare`` mid-grid, rerun, compare with a clean run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from posenc.bench.store import ResultStore

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
