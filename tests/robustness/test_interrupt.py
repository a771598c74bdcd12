"""Interruption at several points, plus planted damage (extends tests/robustness/test_resume.py).

test_resume.py kills ``posenc compare`` once. Here one output directory is killed
with SIGKILL three times, after 1, 2 and 3 finished records (polling the output
directory), resumed each time; before the last resume a record is truncated and a
half-written temp file is planted. Checked:

* after every kill, every file under a final record name is a complete, valid
  record (nothing partial is ever read as a result);
* the truncated record is moved aside (``*.corrupt``) and redone, the temp file (named,
  as every temp file is, after its writer's host and pid, here a process that is gone) removed;
* the final records equal an uninterrupted run's: same run ids, specs, per-length
  evaluation arrays and loss curves, bit for bit (timing/host fields ignored, as
  named in tests/robustness/test_determinism.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.robustness.test_determinism import deterministic_part

from posenc.records import files
from posenc.records.store import ResultStore

TOTAL = 4  # nope x {copy, lm} x seeds {0, 1}
KILL_AFTER = (1, 2, 3)  # finished records on disk when SIGKILL is sent


def _command(out: Path) -> list[str]:
    return [
        sys.executable, "-c", "from posenc.cli import main; main()", "compare", "--profile", "smoke",
        "--encodings", "nope", "--seeds", "0,1", "--out", str(out), "--no-report", "--format", "json",
        "--threads", "1",
    ]  # fmt: skip


ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def _final_files(out: Path) -> list[Path]:
    return sorted((out / "runs").glob("*/*.json"))


def _kill_after(out: Path, records: int, timeout: float = 240.0) -> None:
    """Start (resume) the run and SIGKILL it once ``records`` final record files exist."""
    proc = subprocess.Popen(_command(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None and len(_final_files(out)) < records:
            time.sleep(0.005)
        assert proc.poll() is None, f"the run finished before it could be killed after {records} records"
        assert len(_final_files(out)) >= records, "timed out waiting for records"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


def _valid(out: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in ResultStore(out).records()}


def _run_to_end(out: Path) -> dict:
    done = subprocess.run(_command(out), capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["outcome"]


def test_three_kills_and_a_truncated_record_still_match_an_uninterrupted_run(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    kept: dict[str, str] = {}
    for records in KILL_AFTER:
        _kill_after(killed, records)
        valid = _valid(killed)
        # nothing partial under a final name: every such file is a complete valid record
        assert len(_final_files(killed)) == len(valid), [p.name for p in _final_files(killed)]
        assert records <= len(valid) < TOTAL
        for run_id, checksum in kept.items():  # finished records are kept, never redone
            assert valid[run_id]["checksum"] == checksum
        kept = {run_id: r["checksum"] for run_id, r in valid.items()}

    # Plant damage: a torn record under its final name, and a leftover temp file.
    victim = _final_files(killed)[0]
    victim_id = json.loads(victim.read_text())["run_id"]
    text = victim.read_text()
    victim.write_text(text[: len(text) // 2])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # a writer that is gone, as after SIGKILL
    dead.wait()
    temp = victim.parent / f".{victim.name}~{files.HOST}~{dead.pid}~planted.tmp"  # writer's name
    temp.write_text('{"schema": "posenc.bench.run/1", "run_id"')
    assert victim_id not in _valid(killed)  # a truncated record is never read as a result

    outcome = _run_to_end(killed)
    assert [r["run_id"] for r in outcome["redone"]] == [victim_id]
    assert outcome["skipped"] == len(kept) - 1
    assert outcome["done"] == TOTAL - len(kept) + 1
    assert victim.with_suffix(".json.corrupt").exists() and not temp.exists()

    assert _run_to_end(clean)["done"] == TOTAL
    resumed, reference = _valid(killed), _valid(clean)
    assert set(resumed) == set(reference) and len(reference) == TOTAL
    for run_id, record in reference.items():
        a, b = deterministic_part(resumed[run_id]), deterministic_part(record)
        assert a["spec"] == b["spec"], run_id
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), run_id
        assert a["result"]["eval"], run_id  # the per-length arrays are really there
