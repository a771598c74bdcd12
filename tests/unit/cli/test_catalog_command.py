"""``posenc list`` and ``posenc show`` through click's CliRunner."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import posenc
from posenc import reference
from posenc.analysis import worked
from posenc.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_list_json_covers_every_registry_entry():
    result = run("list", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == list(posenc.ENCODINGS)
    for row in rows:
        cls = posenc.ENCODINGS[row["name"]]
        assert row["kind"] == cls.kind and row["paper"] == cls.paper
        assert set(row["parameters"]) == set(cls.Config.field_names())


def test_list_table_names_every_encoding():
    result = run("list")
    assert result.exit_code == 0
    for name in posenc.ENCODINGS:
        assert name in result.output


def test_show_sinusoidal_prints_the_tutorial_worked_example():
    result = run("show", "sinusoidal")  # defaults: 4 positions, dim 8
    assert result.exit_code == 0, result.output
    out = result.output
    for divisor_row in ("│ 0 │        0 │          1 │       1 │", "│ 3 │        6 │          7 │    1000 │"):
        assert divisor_row in out
    assert "│   3 │            3 │           0.3 │           0.03 │           0.003 │" in out
    cells = ([c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines())
    rows = {c[0]: c[1:] for c in cells if len(c) == 9}  # the values table: pos + 8 dims
    assert rows["1"] == ["0.841", "0.540", "0.100", "0.995", "0.010", "1.000", "0.001", "1.000"]
    assert rows["3"] == ["0.141", "-0.990", "0.296", "0.955", "0.030", "1.000", "0.003", "1.000"]
    # every printed value is the 3-decimal rounding of the reference
    want = reference.sinusoidal(np.arange(4), 8)
    for p in range(4):
        np.testing.assert_allclose([float(v) for v in rows[str(p)]], want[p], atol=5e-4)


def test_show_sinusoidal_json_has_full_precision():
    result = run("show", "sinusoidal", "--positions", "6", "--dim", "8", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["divisors"] == pytest.approx([1.0, 10.0, 100.0, 1000.0], rel=1e-12)
    np.testing.assert_allclose(data["angles"], np.arange(6)[:, None] / np.array(data["divisors"]), rtol=1e-15)
    np.testing.assert_allclose(data["values"], reference.sinusoidal(np.arange(6), 8), rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", list(posenc.ENCODINGS))
def test_show_every_registered_encoding(name):
    result = run("show", name, "--positions", "3", "--dim", "8", "--heads", "2")
    assert result.exit_code == 0, result.output
    assert name in result.output.splitlines()[0] or "Step 1" in result.output
    data = json.loads(
        run("show", name, "--positions", "3", "--dim", "8", "--heads", "2", "--format", "json").output
    )
    assert data["name"] == name and data["kind"] == posenc.ENCODINGS[name].kind
    if data["kind"] != "none":
        assert len(data["values"]) == 3


def test_show_causal_bias_says_keys_after_the_query_are_masked():
    """ALiBi's formula is positive above the diagonal; the table must not read as a reward for the future."""
    causal = run("show", "alibi", "--positions", "4").output.splitlines()
    assert "j > i: keys causal attention masks" in causal[1]
    bidirectional = posenc.build("alibi", num_heads=2, bidirectional=True)
    title, _, rows = worked.hook_table(bidirectional, 4, 8, 2)
    assert "masks" not in title and rows[0][3] < 0  # -m |i - j|: nothing masked, nothing positive


def test_show_additive_json_equals_encode():
    data = json.loads(
        run("show", "integer_index", "--positions", "5", "--dim", "3", "--format", "json").output
    )
    np.testing.assert_array_equal(data["values"], reference.integer_index(np.arange(5), 3))


def test_unknown_name_is_one_line_and_exit_2():
    result = run("show", "sinusodial")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "did you mean 'sinusoidal'" in lines[0]


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["show", "sinusoidal", "--dim", "7"], "dim"),
        (["show", "learned", "--positions", "0"], "--positions"),
        (["show", "learned", "--dim", "0"], "--dim"),
        (["show", "learned", "--positions", "2000"], "max_len"),
    ],
)
def test_bad_options_exit_2_naming_the_option(args, word):
    result = run(*args)
    assert result.exit_code == 2 and word in result.output and "Traceback" not in result.output


def test_cli_reports_posenc_errors_in_one_line_and_keeps_tracebacks_of_bugs(monkeypatch):
    from posenc.core.errors import PosencError, PosencTypeError

    assert issubclass(PosencError, ValueError) and issubclass(PosencTypeError, TypeError)
    assert issubclass(PosencTypeError, PosencError)
    bad = CliRunner().invoke(main, ["show", "sinusoidall"])
    assert bad.exit_code == 2 and bad.stderr.strip().startswith("posenc: error:")
    assert len(bad.stderr.strip().splitlines()) == 1

    def broken(*args, **kwargs):  # a genuine bug inside the library: not a user error
        raise ValueError("internal invariant broken")

    monkeypatch.setattr(posenc, "list_encodings", broken)
    crash = CliRunner().invoke(main, ["list"])
    assert crash.exit_code == 1 and isinstance(crash.exception, ValueError)
    assert "posenc: error:" not in crash.stderr
