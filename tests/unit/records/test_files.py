"""Records as the published tables ship them (``benchmarks/records/PROFILE/runs/TASK/*.json.gz``)
are read by every reader of a results directory, and the commands take such a folder as it is."""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from posenc.cli import main
from posenc.records import files
from posenc.records.files import MAX_RECORD_BYTES, read_record_file
from posenc.records.store import ResultStore

SHIPPED = Path(__file__).resolve().parents[3] / "benchmarks" / "records"


def test_a_shipped_folder_reads_as_its_grid():
    folder = SHIPPED / "quick"
    grid = json.loads((folder / "grid.json").read_text())
    records = ResultStore(folder).records()
    assert sorted(r["run_id"] for r in records) == sorted(grid["run_ids"])


def test_a_run_both_plain_and_gzipped_is_one_record(tmp_path):
    source = next((SHIPPED / "quick" / "runs" / "copy").glob("*.json.gz"))
    runs = tmp_path / "runs" / "copy"
    runs.mkdir(parents=True)
    shutil.copy(source, runs / source.name)
    (runs / source.name.removesuffix(".gz")).write_bytes(gzip.decompress(source.read_bytes()))
    store = ResultStore(tmp_path)
    assert [p.name for p in store.record_files()] == [source.name.removesuffix(".gz")]
    assert len(store.records(latest_grid=False)) == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"not gzip at all", "not a readable gzip file"),
        (gzip.compress(b"{}")[:-6], "not a readable gzip file"),  # truncated
        (gzip.compress(b"{" * (MAX_RECORD_BYTES + 2)), "larger than"),  # a small file that unpacks huge
        (gzip.compress(b"\xff\xfe"), "unreadable JSON"),
    ],
    ids=["not-gzip", "truncated", "bomb", "not-utf8"],
)
def test_a_damaged_gzipped_record_is_one_reason_and_skipped(tmp_path, content, reason):
    runs = tmp_path / "runs" / "copy"
    runs.mkdir(parents=True)
    path = runs / "rope__seed0__0123456789abcdef.json.gz"
    path.write_bytes(content)
    data, why = read_record_file(path)
    assert data is None and why is not None and why.startswith(reason), why
    warned: list[str] = []
    assert ResultStore(tmp_path).records(latest_grid=False, warn=warned.append) == []
    assert len(warned) == 1 and str(path) in warned[0]


def test_report_and_plot_take_a_shipped_folder(tmp_path):
    folder = str(SHIPPED / "quick")
    plotted = CliRunner().invoke(main, ["plot", "--curves", folder, "-o", str(tmp_path / "curves.png")])
    assert plotted.exit_code == 0, plotted.output
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_report_refuses_a_results_folder_without_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        main, ["report", "-o", str(tmp_path / "r"), "--results", str(tmp_path / "empty")]
    )
    assert result.exit_code == 2
    assert "--results" in result.output and "no finished runs" in result.output


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero"])
def test_a_gzipped_record_that_is_no_file_is_refused_at_once(tmp_path, kind):
    """A FIFO or a link to an endless device named like a shipped record: never read, never waited on."""
    import os

    runs = tmp_path / "runs" / "copy"
    runs.mkdir(parents=True)
    path = runs / "rope__seed0__0123456789abcdef.json.gz"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    data, why = read_record_file(path)
    assert data is None and why is not None and "not a regular file" in why, why
    assert ResultStore(tmp_path).records(latest_grid=False, warn=lambda _: None) == []


def _full_disk(monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", fsync)


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    """Found: 'posenc: error: No space left on device' named nothing."""
    _full_disk(monkeypatch)
    with pytest.raises(OSError) as caught:
        files.atomic_write_text(tmp_path / "summary.json", "{}")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "summary.json")
    assert not list(tmp_path.iterdir())  # no temp file left behind
    args = ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy", "--seeds", "0"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out"), "--no-report"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert str(tmp_path / "out") in lines[0] and "No space left on device" in lines[0], lines[0]
