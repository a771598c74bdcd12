"""posenc.build / build_for_model / list_encodings: helpful errors, complete listings."""

from __future__ import annotations

import json

import pytest

import posenc
from posenc.registry import get_encoding_class


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("sinusodial", "sinusoidal"), ("learnd", "learned"), ("integer-index", "integer_index")],
)
def test_unknown_name_suggests_the_closest(typo, suggestion):
    with pytest.raises(ValueError, match=f"unknown encoding {typo!r}; did you mean {suggestion!r}"):
        posenc.build(typo, dim=8)


def test_unknown_name_without_close_match_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: sinusoidal"):
        posenc.build("zzzzzz")


def test_name_must_be_a_string():
    with pytest.raises(TypeError, match="encoding name must be a string"):
        get_encoding_class(3)


def test_unknown_config_key_is_rejected_naming_the_key():
    with pytest.raises(
        ValueError, match=r"unknown config key 'max_length' for encoding 'learned'.*'max_len'"
    ):
        posenc.build("learned", dim=8, max_length=16)
    with pytest.raises(ValueError, match="unknown config key 'colour'"):
        posenc.build("sinusoidal", dim=8, colour="red")


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "hybrid", "complex_order", "integer_index"])
def test_missing_required_key(name):
    with pytest.raises(
        ValueError, match=rf"missing required config key\(s\) \['dim'\] for encoding '{name}'"
    ):
        posenc.build(name)


@pytest.mark.parametrize(
    ("config", "error", "word"),
    [
        ({"dim": "8"}, TypeError, "dim must be an integer"),
        ({"dim": 8, "base": "1e4"}, TypeError, "base must be a number"),
        ({"dim": True}, TypeError, "dim"),
        ({"dim": 8, "base": 1.0}, ValueError, "base must be > 1.0"),
    ],
)
def test_wrong_types_and_ranges(config, error, word):
    with pytest.raises(error, match=word):
        posenc.build("sinusoidal", **config)


def test_build_for_model_fills_dim_and_explicit_config_wins():
    enc = posenc.build_for_model("learned", d_model=12, num_heads=3, max_len=5)
    assert enc.config.dim == 12 and enc.config.max_len == 5
    enc = posenc.build_for_model("learned", d_model=12, num_heads=3, dim=4)
    assert enc.config.dim == 4


def test_list_encodings_describes_every_entry():
    rows = posenc.list_encodings()
    assert [r["name"] for r in rows] == list(posenc.ENCODINGS)
    for row in rows:
        cls = posenc.ENCODINGS[row["name"]]
        assert {"name", "kind", "parameters", "paper"} <= set(row)
        assert row["kind"] == cls.kind and row["kind"] in posenc.KINDS
        assert row["paper"] and "http" in row["paper"]
        assert list(row["parameters"]) == cls.Config.field_names()
        json.dumps(row, default=str)  # serialisable for `posenc list --format json`


def test_list_marks_required_and_default_parameters():
    row = next(r for r in posenc.list_encodings() if r["name"] == "learned")
    assert row["parameters"] == {"dim": "<required>", "max_len": 1024, "extra_rows": 0, "init_std": 0.02}


@pytest.mark.parametrize("name", [n for n, c in posenc.ENCODINGS.items() if c.kind == "additive"])
def test_config_round_trips_through_json(name):
    enc = posenc.build_for_model(name, d_model=8, num_heads=2)
    again = posenc.build(name, **json.loads(enc.config.to_json()))
    assert again.config == enc.config


def test_config_fields_carry_their_meaning_as_metadata():
    """build_for_model, attention and the benchmark read field metadata, never a table of names."""
    for name, cls in posenc.ENCODINGS.items():
        model = cls.Config.meanings("model")
        for field in set(cls.Config.field_names()) & {"dim", "head_dim", "num_heads", "bidirectional"}:
            assert field in model, f"{name}.{field} lacks model_field(...) metadata"
    assert posenc.ENCODINGS["learned"].Config.meanings("length") == {
        "max_len": "trained_rows",
        "extra_rows": "extra_rows",
    }
    assert posenc.ENCODINGS["t5"].Config.meanings("length") == {"max_distance": "paper_length"}
    assert posenc.ENCODINGS["rope"].Config.meanings("length") == {"max_position_embeddings": "context"}
    assert posenc.build_for_model("alibi", d_model=8, num_heads=2, causal=False).config.bidirectional is True
