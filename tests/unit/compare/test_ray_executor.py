"""``posenc compare --executor ray`` on a real (loopback-only) Ray: same records as a local run,
a worker killed mid-run is retried with nothing lost or duplicated, and a clear message without Ray.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from posenc import compare
from posenc.cli import main
from posenc.compare.executor import make_executor
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.runner import run_grid
from posenc.records.spec import RunSpec
from posenc.records.store import ResultStore

SMOKE = get_profile("smoke")
# Fields that depend on when and where a run executed, not on what it computed.
TIMING = ("wall_seconds", "compute_seconds", "steps_per_second")


def comparable(record: dict) -> dict:
    """A record without its checksum, host versions and timings: the numbers and the spec."""
    record = json.loads(json.dumps(record))
    for key in ("checksum", "versions"):
        record.pop(key)
    record["result"].pop("timing")
    for key in TIMING:
        record["result"]["train"].pop(key)
    return record


def by_run_id(out: Path) -> dict[str, dict]:
    records = ResultStore(out).records()
    assert len({r["run_id"] for r in records}) == len(records)  # no duplicates
    return {r["run_id"]: comparable(r) for r in records}


def quiet(_: str) -> None:
    pass


# ---------------------------------------------------------------------------
# Without Ray: one line with the install command, exit status 2 (no Ray needed).
# ---------------------------------------------------------------------------


def test_without_ray_the_cli_says_how_to_install_it_and_exits_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    result = CliRunner().invoke(
        main, ["compare", "--profile", "smoke", "--executor", "ray", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'posenc[ray]'" in lines[0]
    assert lines[0].startswith("posenc: error:")  # found: the Ray errors lacked the CLI's prefix
    assert "Traceback" not in result.output
    assert not (tmp_path / "r" / "runs").exists()  # nothing ran


def test_no_head_at_the_address_is_one_line_and_exit_2_not_a_hang(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "")  # restored afterwards: the CLI hands --address on through it
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["compare", "--profile", "smoke", "--executor", "ray", "--address", f"127.0.0.1:{port}"]
    result = CliRunner().invoke(main, [*args, "--no-report", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("posenc: error:"), result.output
    assert f"no Ray head at --address 127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "r" / "runs").exists()
    usage = CliRunner().invoke(main, ["compare", "--address", "auto", "--out", str(tmp_path / "r")])
    assert usage.exit_code == 2 and "--address needs --executor ray" in usage.output


def test_make_executor_knows_ray_and_rejects_bad_arguments():
    pytest.importorskip("ray")
    assert make_executor("ray", workers=2, address="auto").address == "auto"
    with pytest.raises(ValueError, match="executor"):
        make_executor("dask")
    with pytest.raises(ValueError, match="address"):
        make_executor("ray", address="  ")
    with pytest.raises(ValueError, match="workers"):
        make_executor("ray", workers=0)


# ---------------------------------------------------------------------------
# With a real Ray on 127.0.0.1.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_records(tmp_path_factory) -> dict[str, dict]:
    """The reference: the smoke grid run in this process."""
    out = tmp_path_factory.mktemp("local")
    # As `posenc compare` runs it: learning rates chosen first (on the same executor kind).
    result = compare.compare("smoke", threads=1, workers=1, out=out, show_progress=False, log=quiet)
    assert len(result.outcome.done) == len(build_grid(SMOKE).specs) and not result.outcome.failed
    return by_run_id(out)


def test_cli_on_a_private_two_worker_ray_writes_the_same_records_as_a_local_run(tmp_path, local_records):
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    out = tmp_path / "ray"
    args = ["compare", "--profile", "smoke", "--executor", "ray", "--workers", "2", "--threads", "1"]
    args += ["--no-report", "--format", "json", "--out", str(out)]
    result = CliRunner().invoke(main, args, env={"RAY_ADDRESS": ""})  # a private Ray on loopback
    assert result.exit_code == 0, result.output
    assert not ray.is_initialized()  # the Ray it started is shut down again
    assert by_run_id(out) == local_records
    # Resume-and-skip is the runner's, so it works the same: a rerun does nothing.
    again = CliRunner().invoke(main, args, env={"RAY_ADDRESS": ""})
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["outcome"]["skipped"] == len(local_records)


@pytest.fixture(scope="module")
def ray_two_workers():
    """A Ray head on 127.0.0.1 with two worker CPUs, shut down after the test."""
    ray = pytest.importorskip("ray")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=128 * 2**20,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def test_a_worker_killed_mid_run_is_retried_and_nothing_is_lost_or_duplicated(
    tmp_path, local_records, ray_two_workers
):
    from posenc.compare.work import execute

    attempts = tmp_path / "attempts"
    attempts.mkdir()

    def dies_on_first_attempt(spec, advance):
        # Runs in a Ray worker (pickled by value); the attempt log survives the crash.
        log = attempts / spec.run_id
        first = not log.exists()
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        if first:
            os._exit(1)  # the worker process dies mid-task, as if killed
        return execute(spec, advance)

    out = tmp_path / "ray"
    specs = [RunSpec.from_dict(r["spec"]) for r in local_records.values()]  # with the chosen learning rates
    executor = make_executor("ray", workers=2)
    outcome = run_grid(
        specs, ResultStore(out), executor, show_progress=False, log=quiet, work_fn=dies_on_first_attempt
    )
    assert not outcome.failed and sorted(outcome.done) == sorted(s.run_id for s in specs)
    for spec in specs:  # each run crashed once, in one process, and succeeded in another
        pids = (attempts / spec.run_id).read_text().split()
        assert len(pids) == 2 and pids[0] != pids[1], pids
    files = sorted(p.name for p in (out / "runs").rglob("*.json"))
    assert len(files) == len(set(files)) == len(specs)  # exactly one record per spec
    assert by_run_id(out) == local_records
    assert ray_two_workers.is_initialized()  # an existing Ray is used, not shut down


def test_a_run_that_keeps_dying_is_reported_failed_not_retried_forever(tmp_path, ray_two_workers):
    from posenc.compare.ray_executor import RayExecutor

    (spec,) = build_grid(SMOKE, encodings=("nope",), tasks=("copy",), seeds=(0,), threads=1).specs

    def always_dies(spec, advance):
        os._exit(1)

    seen: list[int] = []
    results = list(RayExecutor(max_retries=1).map(always_dies, [spec], lambda s, u: seen.append(u)))
    assert len(results) == 1 and results[0][0] == spec
    assert isinstance(results[0][1], ray_two_workers.exceptions.RayError)
    assert seen == [spec.work_units()]

    def raises(spec, advance):  # the run's own error: handed back as is, not retried
        raise RuntimeError(f"bad run {spec.label}")

    ((_, error),) = RayExecutor(max_retries=3).map(raises, [spec], lambda s, u: None)
    assert isinstance(error, RuntimeError) and "bad run nope" in str(error)
