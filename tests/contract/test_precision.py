"""Precision bounds per dtype (documented in docs/precision.md), on a smaller sample.

The measurement code is scripts/precision_table.py (one source for the table and
these bounds). Every registry entry and every RoPE scaling is checked:

* error against the float64 module, in units of the dtype's unit roundoff u,
  stays within ``BOUNDS_IN_U[kind]`` for positions up to 10^6 (fixed) / 65,536 (rotary);
* a bf16 query rotated at each position 0..65,535 gives 65,536 distinct vectors;
* ``.to(torch.bfloat16)`` / ``.half()`` change only parameters, never cached tables.
Each check is shown to fail on the failure it guards against.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

import posenc
from posenc.core.positions import Positions
from posenc.encoding.absolute.sequence import Sinusoidal

_SPEC = importlib.util.spec_from_file_location(
    "precision_table", Path(__file__).resolve().parents[2] / "scripts" / "precision_table.py"
)
pt = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(pt)

VARIANTS = pt.variants()
IDS = [label for label, _, _ in VARIANTS]
COUNT = 64  # positions per measurement (the script uses 1200)


@pytest.mark.parametrize(("label", "name", "overrides"), VARIANTS, ids=IDS)
def test_error_against_float64_within_documented_bound(label, name, overrides):
    kind = posenc.ENCODINGS[name].kind
    for dtype in pt.DTYPES:
        result = pt.max_error(name, overrides, dtype, count=COUNT)
        assert not math.isnan(result["error"]), (label, dtype, result["note"])
        assert math.isfinite(result["error"]), (label, dtype, "non-finite where float64 is finite")
        # learned tables (learned, hybrid, learned_axial) stop at their trained rows
        trained_rows = "trained_rows" in posenc.ENCODINGS[name].Config.meanings("length").values()
        assert result["limit"] >= 4096 or trained_rows, (label, dtype, result)
        if name in pt.ILL_CONDITIONED:
            continue
        assert result["in_u"] <= pt.BOUNDS_IN_U[kind], (label, dtype, result)


def test_positions_reach_the_documented_ranges():
    assert pt.sample_positions(pt.FIXED_LIMIT, COUNT).max() == pt.FIXED_LIMIT - 1
    assert pt.sample_positions(pt.ROTARY_LIMIT, COUNT).max() == pt.ROTARY_LIMIT - 1
    rope = pt.max_error("rope", {}, torch.bfloat16, count=COUNT)
    assert rope["limit"] == pt.ROTARY_LIMIT and rope["note"] == ""


@pytest.mark.parametrize(
    "overrides",
    [o for _, n, o in VARIANTS if n == "rope"],
    ids=[lab for lab, n, _ in VARIANTS if n == "rope"],
)
def test_bfloat16_rope_tells_every_position_below_65536_apart(overrides):
    assert pt.distinct_rotations(overrides) == pt.ROTARY_LIMIT


def test_distinctness_check_can_fail():
    """A position counter held in bfloat16 collapses (8190 == 8191), which the check would see."""
    assert pt.naive_distinct_positions() < 2000
    assert torch.tensor(8191.0, dtype=torch.bfloat16) == torch.tensor(8190.0, dtype=torch.bfloat16)


@pytest.mark.parametrize(("label", "name", "overrides"), VARIANTS, ids=IDS)
def test_casting_the_model_keeps_cached_tables(label, name, overrides):
    assert pt.cast_keeps_tables(name, overrides, "bfloat16"), label
    assert pt.cast_keeps_tables(name, overrides, "half"), label


class _TableAsBuffer(Sinusoidal):
    """The bug that hit several libraries: a float sin/cos table kept as a persistent buffer."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.register_buffer("table", super()._pe(Positions.arange(8192), torch.float32)[0])

    def _pe(self, positions, dtype):
        return self.table[positions.tensor].to(dtype)


def test_cast_check_can_fail():
    posenc.register("table_as_buffer", _TableAsBuffer)
    try:
        assert not pt.cast_keeps_tables("table_as_buffer", {}, "bfloat16")
    finally:
        posenc.unregister_encoding("table_as_buffer")
