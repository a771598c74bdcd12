"""One hostile file never makes a results directory unusable: nesting bombs, numbers Python will not
read, weights that are not a saved state dict. Each is one line naming the file, in every reader
(``posenc plot --curves``, ``posenc.results.cells``, ``posenc report``) and in ``posenc compare``
resuming, which sets it aside (``.corrupt``) and redoes its run."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest
from click.testing import CliRunner
from tests.records import make_payload, make_spec, no_hang

from posenc import results
from posenc.cli import main
from posenc.core.errors import PosencError
from posenc.records.files import MAX_RECORD_DEPTH, read_record_file
from posenc.records.store import ResultStore, checksum, load_weights

NESTED = "[" * 200_000 + "]" * 200_000  # Python's parser recurses once per level: RecursionError


def _store_with_one_good_record(tmp_path):
    out = tmp_path / "results"
    spec = make_spec()
    ResultStore(out).write(spec, make_payload(spec))
    return out, spec


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (NESTED, "nests lists or objects 200000 deep"),
        ('{"a": ' * 5000 + "1" + "}" * 5000, "nests lists or objects 5000 deep"),
        ("[" + "1" * 5000 + "]", "a number of more digits than Python reads"),
    ],
    ids=["brackets", "objects", "huge-integer"],
)
def test_a_record_python_cannot_parse_is_one_reason_not_a_traceback(tmp_path, content, reason):
    """Found: a file of 200,000 nested '[' was a RecursionError in every reader; an integer of 5,000
    digits a ValueError."""
    path = tmp_path / "X.json"
    path.write_text(content)
    data, why = read_record_file(path)
    assert data is None and why is not None and reason in why, why


def test_nesting_is_bounded_without_refusing_what_records_hold(tmp_path):
    """The bound sits far above what a record nests (~8 levels) and counts no bracket in a string."""
    path = tmp_path / "ok.json"
    deep = {"label": "[[[[[[[[" * 100}
    for _ in range(MAX_RECORD_DEPTH - 1):
        deep = {"x": deep}
    path.write_text(json.dumps(deep))
    assert read_record_file(path)[1] is None
    path.write_text(json.dumps({"x": deep}))
    assert "deep" in read_record_file(path)[1]


@pytest.fixture
def bombed(tmp_path):
    """A results directory with one genuine record and a nesting bomb beside it (copied runs)."""
    out, spec = _store_with_one_good_record(tmp_path)
    bomb = out / "runs" / "copy" / "X.json"
    bomb.write_text(NESTED)
    return out, spec, bomb


def test_every_reader_skips_a_nesting_bomb_with_one_line_naming_it(bombed, tmp_path):
    out, spec, bomb = bombed
    warned: list[str] = []
    records = ResultStore(out).records(latest_grid=False, warn=warned.append)
    assert [r["run_id"] for r in records] == [spec.run_id]
    assert len(warned) == 1 and str(bomb) in warned[0] and "deep" in warned[0]
    table = results.cells(out)  # posenc.results.cells: the table of the genuine record
    assert {key[0] for key in table} == {"rope"}
    plotted = CliRunner().invoke(main, ["plot", "--curves", str(out), "-o", str(tmp_path / "c.png")])
    assert plotted.exit_code == 0, plotted.output
    assert not [
        line for line in plotted.output.splitlines() if "Traceback" in line or "RecursionError" in line
    ]
    assert (tmp_path / "c.png").stat().st_size > 0


@pytest.mark.slow
def test_compare_resuming_sets_a_nesting_bomb_aside_and_finishes(tmp_path):
    """``posenc compare --out D`` with the bomb among D's records: its run is redone, the bomb moved
    aside under its own name, the table written (it was a RecursionError traceback)."""
    out = tmp_path / "results"
    args = ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy", "--seeds", "0",
            "--no-report", "--format", "json", "--out", str(out)]  # fmt: skip
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    (record,) = (out / "runs" / "copy").glob("*.json")
    record.write_text(NESTED)  # the run's own record, bombed
    (out / "runs" / "copy" / "X.json").write_text(NESTED)  # and a stray one beside it
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert record.with_suffix(".json.corrupt").exists() and json.loads(record.read_text())["run_id"]
    outcome = json.loads(again.stdout[again.stdout.index("{") :])["outcome"]
    assert outcome["done"] == 1 and [r["run_id"] for r in outcome["redone"]] == [
        record.stem.rsplit("__", 1)[1]
    ]
    assert "deep" in outcome["redone"][0]["reason"]


# --- weights next to a record -----------------------------------------------------------------


@pytest.mark.parametrize(
    "blob",
    [b"}bh\x00e\x80\x02", b"h\x00duae\x86", b"K\x01.uR1cla", b"\x80\x02", b"PK\x03\x04" + b"\x00" * 64],
    ids=["index-error", "key-error", "runtime-error", "short-pickle", "broken-zip"],
)
def test_weights_that_are_not_a_state_dict_are_one_error_whatever_torch_raises(tmp_path, blob):
    """Found: a weights file with the right size and hash that is no zip archive made torch's
    unpickler raise IndexError (a traceback from ``posenc plot --run``); KeyError likewise."""
    out, spec = _store_with_one_good_record(tmp_path)
    path = ResultStore(out).path_for(spec)
    weights = path.with_suffix(".pt")
    weights.write_bytes(blob)
    record = json.loads(path.read_text())
    record["weights"] = {"file": weights.name, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
    record["checksum"] = checksum(record)
    path.write_text(json.dumps(record))
    with pytest.raises(PosencError, match="is not a saved state dict"):
        load_weights(path)
    result = CliRunner().invoke(main, ["plot", "--run", str(path), "--kind", "attention", "-o",
                                       str(tmp_path / "a.png")])  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "is not a saved state dict" in lines[0], result.output


def test_a_config_that_nests_too_deep_or_is_no_file_is_one_line(tmp_path):
    """``--hf-config``: nesting checked before parsing; a FIFO is refused, never opened to read."""
    import os

    from posenc.hf.config import read_config_file

    deep = tmp_path / "deep.json"
    deep.write_text(NESTED)
    with pytest.raises(PosencError, match="nests lists or objects more than"):
        read_config_file(deep)
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with no_hang(), pytest.raises(OSError, match="not a regular file"):
        read_config_file(fifo)


def test_nesting_is_measured_outside_strings_and_in_blocks():
    from posenc.core.untrusted import TooDeep, loads, nesting

    assert nesting("") == nesting("1") == nesting('"[[["') == 0
    assert nesting("[]") == 1 and nesting('[{"a": [1, "]]]"]}]') == 3
    assert nesting('["\\"[", 1]') == 1  # an escaped quote does not end the string
    assert nesting("[" * 3_000_000 + "]" * 3_000_000) == 3_000_000  # across blocks of 1 MiB
    with pytest.raises(TooDeep, match="3 deep, more than 2"):
        loads("[[[]]]", max_depth=2)
    assert loads("[[1]]", max_depth=2) == [[1]]


def test_a_huge_recursion_limit_cannot_turn_a_bomb_into_a_crash(tmp_path):
    """With the recursion limit raised, Python's C parser would recurse until the C stack overflows
    (a segmentation fault); the depth is checked before it runs."""
    path = tmp_path / "X.json"
    path.write_text(NESTED)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10**6)
    try:
        assert "deep" in read_record_file(path)[1]
    finally:
        sys.setrecursionlimit(limit)
