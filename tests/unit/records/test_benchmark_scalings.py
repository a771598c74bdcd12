"""One scaling vocabulary for both grids (``posenc compare --scalings``, ``posenc extend --scalings``):
its names come from the scaling registry, what a benchmark builds a scaling with from the scaling's
own spec, and every scaling the shipped records were made with still reads as it did."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.extend import scalings as sc
from posenc.records import benchmark_scalings as grid
from posenc.records.spec import RunSpec

SHIPPED = Path(__file__).resolve().parents[3] / "benchmarks" / "records"


def _shipped_specs() -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(SHIPPED.glob("*/runs/*/*.json.gz")):
        record = json.loads(gzip.decompress(path.read_bytes()))
        out.append((path, record))
    return out


def test_every_scaling_of_the_shipped_records_reads_as_it_was_and_keeps_its_run_id():
    """A compare run's spec keeps each scaling as written and its run id hashes that text: every one
    shipped parses, is already the canonical spelling (a profile that writes keys makes the same
    runs), and the record's run id is still its spec's."""
    seen: set[str] = set()
    records = _shipped_specs()
    assert len(records) > 100
    for path, record in records:
        spec = RunSpec.from_dict(record["spec"])
        assert spec.run_id == record["run_id"], path
        for text in spec.scalings:
            parsed = grid.parse(text)
            assert parsed.key == text and parsed.text == text, (path, text)
            seen.add(text)
    assert {"yarn-dynamic", "dynamic:4", "yarn:4", "linear:4"} <= seen
    yarn_dynamic = grid.parse("yarn-dynamic")
    assert (yarn_dynamic.rope_type, yarn_dynamic.factor, yarn_dynamic.per_length) == ("yarn", None, True)
    assert not yarn_dynamic.needs_finetune and grid.parse("yarn:4").needs_finetune


def test_the_shipped_extend_tables_entries_read_as_the_same_scalings_under_the_one_spelling():
    """posenc extend wrote dynamic YaRN ``dynamic-yarn``; that spelling is read as ``yarn-dynamic``,
    with the same tables at every length (cells are named by their tables: the same cell ids)."""
    keys = []
    for summary in sorted(SHIPPED.glob("extend/*/summary.json")):
        data = json.loads(summary.read_text())
        for entry in data["entries"]:
            (parsed,) = sc.parse(entry["key"], (2.0,))
            assert parsed.label == entry["label"] or entry["key"] == "dynamic-yarn", entry
            keys.append(entry["key"])
            context = data["context"]
            prompts = data.get("passkey_lengths") or [cell["length"] for cell in data.get("tasks", [])]
            for length in (*data["lengths"], *prompts):
                again = sc.parse(parsed.key, (2.0,))[0]
                assert sc.tables_key(parsed.at(length, context)) == sc.tables_key(again.at(length, context))
    assert "dynamic-yarn" in keys
    old, new = sc.parse("dynamic-yarn", ())[0], sc.parse("yarn-dynamic", ())[0]
    assert old == new and old.key == "yarn-dynamic" and old.text == "dynamic-yarn"
    for length in (1024, 8192, 8193, 16384):
        assert old.at(length, 8192) == new.at(length, 8192)
    assert old.at(16384, 8192) == {"rope_type": "yarn", "factor": 2.0, rope_scaling.ORIGINAL: 8192}


def test_what_a_benchmark_builds_each_scaling_with_is_declared_on_its_spec():
    specs = rope_scaling.BUILTIN_SCALINGS
    assert {name for name, spec in specs.items() if spec.finetuned} == {"linear", "yarn", "llama3"}
    assert dict(specs["llama3"].published) == {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert "search made for one model" in specs["longrope"].cannot_build
    assert {name for name, spec in specs.items() if spec.dynamic_form} == {"yarn"}
    assert {name for name, spec in specs.items() if spec.at_length is not None} == {
        name for name, spec in specs.items() if spec.length_dependent
    }
    # the same keys in both grids: compare's dict and extend's static dict of llama3:4
    compare = grid.scaling_dict(grid.parse("llama3:4"), dim=16, base=10000.0, original=64)
    extend = sc.parse("llama3:4", ())[0].at(128, 64)
    assert compare == extend == {
        "rope_type": "llama3", "factor": 4.0, rope_scaling.ORIGINAL: 64, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }  # fmt: skip
    with pytest.raises(PosencError, match="dynamic_form=True takes a 'factor' key"):
        rope_scaling.RopeScaling(specs["default"].compute, "p", dynamic_form=True)
    with pytest.raises(PosencError, match="at_length is for a length_dependent"):
        rope_scaling.RopeScaling(
            specs["linear"].compute, "p", ("factor",), at_length=specs["dynamic"].at_length
        )


def test_one_parser_serves_both_grids_with_each_grids_rules():
    """The names, aliases and forms are one vocabulary; the grids differ only in what their models
    allow: compare always evaluates plain RoPE and builds every scaling itself (factors > 1),
    extend reads ``none`` and a checkpoint's own LongRoPE factors (factors in [1, 1024])."""
    assert grid.names() == ["linear", "ntk", "dynamic", "yarn", "yarn-dynamic", "llama3"]
    assert grid.names(checkpoint=True) == ["none", *grid.names()[:5], "llama3", "longrope"]
    for text in ("yarn:4", "YaRN:4", "yarn_dynamic", "dynamic-yarn", "dynamic:4"):
        assert grid.parse(text) == sc.parse(text, ())[0], text
    assert sc.parse("yarn", (2.0, 4.0)) == [grid.parse("yarn:2"), grid.parse("yarn:4")]
    for text, words in [("none", "plain RoPE is always evaluated"), ("yarn", "takes a factor"),
                        ("dynamic:1", "> 1 and finite"), ("longrope", "short_factor, long_factor")]:  # fmt: skip
        with pytest.raises(PosencError, match=words):
            grid.parse(text)
    assert (
        sc.parse("dynamic:1", ()) == [sc.Entry("dynamic", 1.0)]
        and sc.parse("longrope", ())[0].from_checkpoint
    )
    with pytest.raises(PosencError, match=r"in \[1, 1024\]"):
        sc.parse("yarn:2000", ())
