"""Several ``posenc compare`` processes share one ``--out`` (docs/guarantees.md, "Concurrent use").

Real processes, real timing:

* two runs with different grids, the second started while the first is running:
  each prints (and returns as JSON) the summary of its *own* grid, nothing is lost,
  and the files in ``--out`` describe one grid consistently;
* two runs of the same grid started together: both finish, both report the whole grid,
  every record is valid and no temp file is left behind;
* a writer whose temp file is in flight (its fsync held back) while another process
  cleans up the directory: the writer's file survives and lands;
* stale temp files (dead writer, or a day old) are removed, live writers' files kept.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posenc.records import files
from posenc.records.store import ResultStore

ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def _compare(out: Path, *args: str, executor: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable, "-c", "from posenc.cli import main; main()", "compare", "--profile", "smoke",
        "--tasks", "copy", "--no-report", "--format", "json", "--threads", "1", "--out", str(out),
        *executor, *args,
    ]  # fmt: skip


def _wait_for_records(out: Path, count: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((out / "runs").glob("*/*.json"))) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"no {count} records appeared (returncode {proc.poll()})")


def _finish(proc: subprocess.Popen, timeout: float = 300.0) -> dict:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr
    return json.loads(stdout)


def _summary_labels(out: Path) -> dict[str, int]:
    """label -> seeds of the summary on disk."""
    rows = json.loads((out / "summary.json").read_text())["rows"]
    return {label: row["copy:seeds"] for label, row in rows.items()}


def _check_directory(out: Path, expected: dict[str, int]) -> None:
    """Every run of every invocation has a valid record; the files on disk agree with grid.json."""
    records = ResultStore(out).records(latest_grid=False)
    by_label: dict[str, int] = {}
    for record in records:
        by_label[record["label"]] = by_label.get(record["label"], 0) + 1
    assert by_label == expected
    assert len(list((out / "runs").glob("*/*.json"))) == sum(expected.values())  # nothing invalid
    assert not list(out.rglob("*.tmp"))
    grid = ResultStore(out).current_grid()
    in_grid = {r["label"] for r in records if r["run_id"] in grid}
    assert set(_summary_labels(out)) == in_grid  # summary.json is the grid grid.json names


def test_two_grids_into_one_directory_each_report_their_own(tmp_path):
    out = tmp_path / "shared"
    seeds = ",".join(str(s) for s in range(64))  # long enough to still run when the second one starts
    first = subprocess.Popen(
        _compare(out, "--encodings", "nope", "--seeds", seeds), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=ENV,
    )  # fmt: skip
    try:
        _wait_for_records(out, 1, first)
        second = subprocess.run(
            _compare(out, "--encodings", "alibi", "--seeds", "0"), capture_output=True, text=True, env=ENV,
            timeout=300,
        )  # fmt: skip
        a = _finish(first)
    finally:
        first.kill()
    assert second.returncode == 0, second.stderr
    b = json.loads(second.stdout)
    # each invocation reports the grid it ran, whatever the other one did meanwhile
    assert {k: v["copy:seeds"] for k, v in a["summary"]["rows"].items()} == {"nope": 64}
    assert {k: v["copy:seeds"] for k, v in b["summary"]["rows"].items()} == {"alibi": 1}
    assert a["outcome"]["done"] == 64 and b["outcome"]["done"] == 1
    _check_directory(out, {"nope": 64, "alibi": 1})


def test_the_same_grid_twice_at_once_loses_nothing(tmp_path):
    out = tmp_path / "shared"
    command = _compare(out, "--encodings", "nope", "--seeds", "0,1,2,3,4,5")
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        for _ in range(2)
    ]
    try:
        results = [_finish(proc) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for result in results:
        assert result["summary"]["rows"]["nope"]["copy:seeds"] == 6
        assert result["outcome"]["done"] + result["outcome"]["skipped"] == 6
        assert not result["outcome"]["failed"] and not result["outcome"]["redone"]
    _check_directory(out, {"nope": 6})


RAY_SEEDS = ",".join(str(s) for s in range(32))


def test_a_ray_run_and_a_local_run_share_a_directory(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "shared"
    ray = subprocess.Popen(
        _compare(out, "--encodings", "nope", "--seeds", RAY_SEEDS, executor=("--executor", "ray", "--workers", "1")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**ENV, "RAY_ADDRESS": ""},
    )  # fmt: skip
    try:
        _wait_for_records(out, 1, ray, timeout=240)
        local = subprocess.run(
            _compare(out, "--encodings", "alibi", "--seeds", "0,1"), capture_output=True, text=True, env=ENV,
            timeout=300,
        )  # fmt: skip
        a = _finish(ray)
    finally:
        ray.kill()
    assert local.returncode == 0, local.stderr
    b = json.loads(local.stdout)
    assert {k: v["copy:seeds"] for k, v in a["summary"]["rows"].items()} == {"nope": 32}
    assert {k: v["copy:seeds"] for k, v in b["summary"]["rows"].items()} == {"alibi": 2}
    _check_directory(out, {"nope": 32, "alibi": 2})


# ---------------------------------------------------------------------------
# Temp files: cleaning up after a killed writer never removes a live writer's file.
# ---------------------------------------------------------------------------

SLOW_WRITER = """
import os, sys, time
from pathlib import Path
from posenc.records.files import atomic_write_text

started, go, target = map(Path, sys.argv[1:4])
real_fsync = os.fsync

def held_back(fd):  # the data is written; hold the fsync (and so the rename) until told
    started.touch()
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    real_fsync(fd)

os.fsync = held_back
atomic_write_text(target, '{"in flight": true}')
"""


def test_cleanup_by_another_process_never_removes_an_in_flight_temp_file(tmp_path):
    out = tmp_path / "shared"
    started, go = tmp_path / "started", tmp_path / "go"
    target = out / "runs" / "copy" / "in-flight.json"
    writer = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, str(started), str(go), str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline and writer.poll() is None:
            time.sleep(0.01)
        assert started.exists(), writer.communicate()
        (temp,) = target.parent.glob(".*.tmp")  # the writer's file, in flight
        other = subprocess.run(  # a whole compare on the same directory: plans, cleans, runs, summarises
            _compare(out, "--encodings", "nope", "--seeds", "0"), capture_output=True, text=True, env=ENV,
            timeout=300,
        )  # fmt: skip
        assert other.returncode == 0, other.stderr
        assert temp.exists()
        go.touch()
        _, stderr = writer.communicate(timeout=60)
    finally:
        go.touch()
        writer.kill()
    assert writer.returncode == 0, stderr  # before: FileNotFoundError at os.replace
    assert json.loads(target.read_text()) == {"in flight": True}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_which_temp_files_count_as_stale(tmp_path):
    from posenc.records.files import stale_temp_file

    host = files.HOST
    live, dead = os.getppid(), _dead_pid()
    cases = {
        f".r.json~{host}~{dead}~abc.tmp": True,  # its writer was killed
        f".r.json~{host}~{live}~abc.tmp": False,  # its writer is running
        f".r.json~{host}~{os.getpid()}~abc.tmp": False,  # ours
        f".r.json~another-{socket.gethostname()}~{dead}~abc.tmp": False,  # other host: cannot tell
        ".r.json.legacy.tmp": False,  # no writer in its name: only by age
    }
    for name, stale in cases.items():
        path = tmp_path / name
        path.write_text("{")
        assert stale_temp_file(path) is stale, name
        old = time.time() - files.STALE_TEMP_SECONDS - 60
        os.utime(path, (old, old))
        assert stale_temp_file(path), name  # a day old: abandoned, whoever wrote it
    store = ResultStore(tmp_path / "out")
    (store.runs / "copy").mkdir(parents=True)
    keep = store.runs / "copy" / f".r.json~{host}~{live}~x.tmp"
    drop = store.runs / "copy" / f".r.json~{host}~{dead}~x.tmp"
    keep.write_text("{")
    drop.write_text("{")
    assert store.clean_temp_files() == 1
    assert keep.exists() and not drop.exists()
