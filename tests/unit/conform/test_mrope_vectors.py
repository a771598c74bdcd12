"""M-RoPE conformance cases (Qwen2-VL, Qwen3-VL): exported golden vectors, checked by posenc and
by transformers, and failed by an implementation that gets the sections wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest

from posenc import reference
from posenc.conform import mrope_vectors as conform_mrope
from posenc.conform import vectors as conform
from posenc.hf.families import family_available


def test_export_has_the_mrope_cases_with_coordinates(vectors):
    manifest, arrays_of = conform.load(vectors)
    cases = {c["name"]: c for c in manifest["cases"] if c["kind"] == "mrope"}
    assert set(cases) == set(conform_mrope.CASES)
    qwen3 = cases["mrope-qwen3-vl"]
    assert qwen3["hf_config"]["rope_parameters"]["mrope_interleaved"] is True
    for name in cases:
        arrays = arrays_of(name)
        pos = arrays["call0.positions"]
        assert pos.ndim == 2 and pos.shape[1] == 3 and (pos[:, 1] != pos[:, 2]).any()  # an image in it
        assert int(arrays["call1.positions"].max()) > 4000  # past a long text
        as_json = json.loads((vectors / "cases" / f"{name}.json").read_text())
        np.testing.assert_array_equal(np.asarray(as_json["call0.cos"]), arrays["call0.cos"])


def test_golden_mrope_on_text_is_rope_and_rotations_match_the_angles(vectors):
    _, arrays_of = conform.load(vectors)
    for name, (_, config) in conform_mrope.CASES.items():
        arrays = arrays_of(name)
        pos, cos = arrays["call0.positions"], arrays["call0.cos"]
        text = (pos[:, 0] == pos[:, 1]) & (pos[:, 1] == pos[:, 2])
        theta = reference.rope_inv_freq(config["head_dim"], config["base"])
        np.testing.assert_array_equal(cos[text], np.cos(pos[text, :1].astype(np.float64) * theta))
        want = reference.rope(arrays["call0.q"][:, text], pos[text, 0], base=config["base"])
        np.testing.assert_allclose(arrays["call0.q_rot"][:, text], want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("against", ["posenc", "hf"])
def test_posenc_and_transformers_pass_the_mrope_vectors(vectors, against):
    rows = conform.check(vectors, against=against, dtype="float32", only=tuple(conform_mrope.CASES))
    assert {row.quantity for row in rows} == set(conform.QUANTITIES["mrope"])
    if against == "hf" and not family_available("qwen2_vl_text"):  # verified from transformers 5.24
        assert all(row.status == "n/a" and "5.24" in row.note for row in rows)
        pytest.skip("transformers' M-RoPE before 5.24: every case named as not computed")
    assert rows and all(row.status == "ok" for row in rows), [r for r in rows if r.status != "ok"]
    for row in rows:
        print(
            f"conform {against} {row.case} {row.quantity}: max abs error {row.max_error:.3g}, worst ratio {row.worst:.3g}"
        )


@pytest.mark.parametrize(
    ("case", "change"),
    [
        ("mrope-qwen2-vl", {"mrope_section": [24, 20, 20]}),  # Qwen3-VL's sections on Qwen2-VL
        ("mrope-qwen3-vl", {"mrope_interleaved": False}),  # contiguous sections instead of interleaved
    ],
)
def test_wrong_sections_fail(vectors, monkeypatch, case, change):
    def broken(entry, arrays, dtype):
        entry = json.loads(json.dumps(entry))
        entry["config"].update(change)
        return conform.posenc_adapter(entry, arrays, dtype)

    monkeypatch.setitem(conform.ADAPTERS, "broken", broken)
    rows = conform.check(vectors, against="broken", dtype="float32", only=(case,))
    assert {row.quantity for row in rows if row.status == "FAIL"} == {"cos", "sin", "q_rot", "k_rot"}
