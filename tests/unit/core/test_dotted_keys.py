"""``KEY=VALUE`` items with dotted TOML keys (``posenc compare --set``, ``posenc extend --set``),
read into a nested table by :func:`posenc.core.dotted_keys.parse_set`."""

from __future__ import annotations

import pytest

from posenc.core.dotted_keys import parse_set, set_key
from posenc.core.errors import PosencError


def test_values_are_toml_values_and_anything_else_a_string():
    assert parse_set(["eval.lm_protocol=sliding", "lr_grid=[0.001, 0.002]", 'description="a b"']) == {
        "eval": {"lm_protocol": "sliding"}, "lr_grid": [0.001, 0.002], "description": "a b"
    }  # fmt: skip


def test_set_addresses_an_import_spec_in_quotes():
    """Found: --set 'encoding_config."pkg.mod:Class".base=...' was split on every dot."""
    spec = "posenc.encoding.rotary.rope:RoPE"
    assert parse_set([f'encoding_config."{spec}".base=500.0', 'a."b=c".d=1']) == {
        "encoding_config": {spec: {"base": 500.0}},
        "a": {"b=c": {"d": 1}},
    }
    with pytest.raises(PosencError, match="--set takes KEY=VALUE"):
        parse_set(['a."b=1'])


def test_a_key_set_to_a_value_cannot_hold_a_table():
    assert set_key("model.d_model=128") == (("model", "d_model"), "128")
    with pytest.raises(PosencError, match="'model' is set to a value and used as a table"):
        parse_set(["model=1", "model.d_model=128"])
    with pytest.raises(PosencError, match="--set takes KEY=VALUE"):
        parse_set(["=1"])
