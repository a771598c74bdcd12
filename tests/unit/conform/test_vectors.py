"""The conformance suite: golden vectors from the float64 references, and the checker."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import posenc
from posenc.cli import main
from posenc.conform import vectors as conform
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.hf.families import family_available


def test_the_export_covers_every_rope_scaling_and_every_preset_with_a_closed_form(vectors):
    manifest, arrays_of = conform.load(vectors)
    assert manifest["schema"] == conform.SCHEMA and manifest["tolerances"] == conform.TOLERANCES
    sources = {case["source"].split(" (")[0] for case in manifest["cases"]}
    assert {f"rope_type {name}" for name in rope_scaling.ROPE_SCALINGS} <= sources
    for name, preset in posenc.presets.PRESETS.items():
        # conform's case kinds are RoPE and the ALiBi / T5 biases; additive presets (the learned
        # tables of BERT, GPT-2, GPT-3; the original Transformer's sinusoid) and relative ones
        # (Transformer-XL) have none
        covered = posenc.ENCODINGS[preset.encoding].kind in ("rotary", "bias")
        assert (f"preset {name}" in sources) == covered, name
    gemma = [case["name"] for case in manifest["cases"] if case["source"].startswith("preset gemma-3-12b")]
    assert gemma == ["preset-gemma-3-12b-local", "preset-gemma-3-12b-global"]  # both bases of Gemma 3
    for case in manifest["cases"]:
        arrays = arrays_of(case["name"])
        assert sorted(arrays) == case["arrays"]
        as_json = json.loads((vectors / "cases" / f"{case['name']}.json").read_text())
        for key, value in arrays.items():  # the JSON copy round-trips float64 exactly
            np.testing.assert_array_equal(np.asarray(as_json[key], dtype=value.dtype), value)


def test_rope_calls_straddle_the_original_context(vectors):
    manifest, arrays_of = conform.load(vectors)
    case = next(c for c in manifest["cases"] if c["name"] == "rope_type-longrope")
    original = case["config"]["scaling"]["original_max_position_embeddings"]
    lengths = [max(call) + 1 for call in case["calls"]]
    assert original in lengths and original + 1 in lengths and max(lengths) > 2 * original
    arrays = arrays_of("rope_type-longrope")
    short = next(i for i, n in enumerate(lengths) if n == original)
    long = next(i for i, n in enumerate(lengths) if n == original + 1)
    factors = case["config"]["scaling"]
    theta = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    np.testing.assert_allclose(arrays[f"call{short}.inv_freq"], theta / factors["short_factor"], rtol=1e-15)
    np.testing.assert_allclose(arrays[f"call{long}.inv_freq"], theta / factors["long_factor"], rtol=1e-15)


def test_golden_rotations_are_the_rotation_of_the_golden_angles(vectors):
    """q_rot (from RoFormer's matrix form) == q rotated pair by pair with the golden cos/sin."""
    manifest, arrays_of = conform.load(vectors)
    for case in manifest["cases"]:
        if case["kind"] != "rope":
            continue
        arrays, c = arrays_of(case["name"]), case["config"]
        half, r = c["rotary_dim"] // 2, c["rotary_dim"]
        pairs = (
            [(i, i + half) for i in range(half)]
            if c["layout"] == "half"
            else [(2 * i, 2 * i + 1) for i in range(half)]
        )
        a, b = (np.array(side) for side in zip(*pairs))
        q, cos, sin = arrays["call0.q"], arrays["call0.cos"], arrays["call0.sin"]
        want = q.copy()
        want[..., a] = q[..., a] * cos - q[..., b] * sin
        want[..., b] = q[..., a] * sin + q[..., b] * cos
        np.testing.assert_allclose(arrays["call0.q_rot"], want, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(
            arrays["call0.q_rot"][..., r:], q[..., r:]
        )  # partial rotary passes through


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_posenc_passes_its_own_vectors(vectors, dtype):
    rows = conform.check(vectors, against="posenc", dtype=dtype)
    assert rows and all(row.status == "ok" for row in rows), [r for r in rows if r.status != "ok"]


def test_transformers_passes_the_vectors_it_can_compute(vectors):
    rows = conform.check(vectors, against="hf", dtype="float32")
    not_computed = {(row.case, row.quantity) for row in rows if row.status == "n/a"}
    ntk = {("rope_type-ntk", q) for q in conform.QUANTITIES["rope"]}
    alibi = {("preset-bloom", "bias"), ("preset-mpt", "bias")}  # BLOOM shifts each row by a constant
    gptj = {("preset-gpt-j", "inv_freq"), ("preset-gpt-j", "attention_scaling")}  # a table, no frequencies
    if not family_available("gptj"):  # no rotary module before transformers 5.24
        gptj = {("preset-gpt-j", q) for q in conform.QUANTITIES["rope"]}
    mrope = set()
    if not family_available("qwen2_vl_text"):  # M-RoPE verified from transformers 5.24
        mrope = {(row.case, row.quantity) for row in rows if row.case.startswith("mrope")}
        assert mrope
    assert not_computed == ntk | alibi | gptj | mrope
    assert all(row.status == "ok" for row in rows if row.status != "n/a"), [
        r for r in rows if r.status == "FAIL"
    ]


def _broken(change):
    """posenc's adapter with one thing done wrong, as a port might."""

    def adapter(entry, arrays, dtype):
        entry = json.loads(json.dumps(entry))
        change(entry)
        return conform.posenc_adapter(entry, arrays, dtype)

    return adapter


@pytest.mark.parametrize(
    "name,change,case,failing",
    [
        ("base off by 1e-4", lambda e: e["config"].update(base=e["config"]["base"] * 1.0001), "preset-llama-2",
         {"inv_freq", "cos", "sin", "q_rot", "k_rot"}),
        ("pairs in the wrong layout", lambda e: e["config"].update(layout="half"), "preset-gpt-j", {"q_rot", "k_rot"}),
        ("yarn without its attention factor", lambda e: e["config"]["scaling"].update(attention_factor=1.0),
         "rope_type-yarn", {"attention_scaling", "cos", "sin", "q_rot", "k_rot"}),
        ("dynamic NTK with the wrong L0", lambda e: e["config"]["scaling"].update(original_max_position_embeddings=2047),
         "rope_type-dynamic", {"inv_freq", "cos", "sin", "q_rot", "k_rot"}),
        ("causal T5 buckets for the encoder", lambda e: e["config"].update(bidirectional=False),
         "preset-t5-encoder", {"bucket"}),
    ],
)  # fmt: skip
def test_a_wrong_implementation_fails_where_it_is_wrong(vectors, monkeypatch, name, change, case, failing):
    monkeypatch.setitem(conform.ADAPTERS, "broken", _broken(change))
    rows = conform.check(vectors, against="broken", dtype="float32", only=(case,))
    assert {row.quantity for row in rows if row.status == "FAIL"} == failing, name


def test_angles_computed_in_half_precision_fail_the_bfloat16_check(vectors, monkeypatch):
    """Rounding p * theta to bfloat16 loses the position; the angle tolerance catches it."""

    def bf16_angles(entry, arrays, dtype):
        out = conform.posenc_adapter(entry, arrays, dtype)
        for call in {key.split(".")[0] for key in out if key.endswith(".cos")}:
            positions = torch.from_numpy(arrays[f"{call}.positions"]).to(torch.bfloat16)
            theta = torch.from_numpy(arrays[f"{call}.inv_freq"]).to(torch.bfloat16)
            angle = positions[:, None] * theta
            scale = float(arrays[f"{call}.attention_scaling"])
            out[f"{call}.cos"] = (angle.cos() * scale).double().numpy()
        return out

    monkeypatch.setitem(conform.ADAPTERS, "bf16-angles", bf16_angles)
    rows = conform.check(vectors, against="bf16-angles", dtype="bfloat16", only=("preset-llama-3.1",))
    assert {row.quantity: row.status for row in rows}["cos"] == "FAIL"


def test_bound_is_the_documented_rule():
    arrays = {
        "call0.positions": np.array([0, 1000]),
        "call0.inv_freq": np.array([1.0, 0.01]),
        "call0.attention_scaling": np.array(2.0),
        "call0.cos": np.zeros((2, 2)),
        "call0.q": np.array([[[1.0, -3.0, 0.5, 0.0], [2.0, 0.0, 0.0, 0.0]]]),
        "call0.q_rot": np.zeros((1, 2, 4)),
    }
    tol = conform.TOLERANCES["float32"]
    cos = conform.bound("cos", arrays, "call0.", "float32")
    np.testing.assert_allclose(cos, 2.0 * (tol["atol"] + tol["angle"] * np.array([[0, 0], [1000, 10]])))
    rot = conform.bound("q_rot", arrays, "call0.", "float32")
    np.testing.assert_allclose(
        rot[0, :, 0], 2 * 2.0 * np.array([3.0, 2.0]) * (tol["atol"] + tol["angle"] * np.array([0, 1000]))
    )
    np.testing.assert_allclose(
        conform.bound("inv_freq", arrays, "call0.", "float64"), 1e-12 * np.array([1.0, 0.01])
    )


def test_exporting_twice_into_one_folder_gives_the_same_complete_files(tmp_path):
    conform.export(tmp_path)
    first = {p.name: p.read_bytes() for p in (tmp_path / "cases").iterdir()}
    conform.export(tmp_path)
    second = {p.name: p.read_bytes() for p in (tmp_path / "cases").iterdir()}
    assert first.keys() == second.keys() and all(first[k] == second[k] for k in first if k.endswith(".json"))
    assert not list(tmp_path.rglob(".*.tmp"))


def test_cli_export_then_check_against_transformers(tmp_path):
    runner = CliRunner()
    exported = runner.invoke(main, ["conform", "export", str(tmp_path)])
    assert exported.exit_code == 0, exported.output
    assert f"wrote {len(conform.cases())} cases" in exported.output
    checked = runner.invoke(main, ["conform", "check", str(tmp_path), "--against", "hf"])
    assert checked.exit_code == 0, checked.output
    assert "preset-llama-3.1" in checked.output and "0 failed" in checked.output
    as_json = runner.invoke(
        main, ["conform", "check", str(tmp_path), "--case", "preset-qwen2", "--format", "json"]
    )
    rows = json.loads(as_json.stdout)
    assert {row["quantity"] for row in rows} == set(conform.QUANTITIES["rope"])
    assert all(
        row["status"] == "ok" and row["worst"] <= 1 and not math.isnan(row["max_error"]) for row in rows
    )


def test_cli_check_fails_with_exit_1_and_bad_input_in_one_line(tmp_path, monkeypatch):
    runner = CliRunner()
    missing = runner.invoke(main, ["conform", "check", str(tmp_path)])
    assert missing.exit_code == 2 and "conform export" in missing.output
    conform.export(tmp_path)
    bad_case = runner.invoke(main, ["conform", "check", str(tmp_path), "--case", "preset-lama-2"])
    assert bad_case.exit_code == 2 and "did you mean 'preset-llama-2'" in bad_case.output
    monkeypatch.setitem(
        conform.ADAPTERS, "posenc", _broken(lambda e: e["config"].update(base=1.5 * e["config"]["base"]))
    )
    failing = runner.invoke(
        main, ["conform", "check", str(tmp_path), "--case", "preset-llama-2", "--failures-only"]
    )
    assert failing.exit_code == 1 and "FAIL" in failing.output and "attention_scaling" not in failing.output


def test_damaged_exports_are_one_line_errors(tmp_path):
    conform.export(tmp_path)
    runner = CliRunner()
    case = tmp_path / "cases" / "preset-qwen2.npz"
    case.write_bytes(case.read_bytes()[:100])  # cut short
    cut = runner.invoke(main, ["conform", "check", str(tmp_path), "--case", "preset-qwen2"])
    assert (
        cut.exit_code == 2
        and "preset-qwen2.npz is damaged" in cut.stderr
        and len(cut.stderr.splitlines()) == 1
    )
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"schema": "other/2", "cases": []}')
    other = runner.invoke(main, ["conform", "check", str(tmp_path)])
    assert other.exit_code == 2 and "posenc.conform/1" in other.stderr
    manifest.write_text("{not json")
    broken = runner.invoke(main, ["conform", "check", str(tmp_path)])
    assert broken.exit_code == 2 and "not valid JSON" in broken.stderr and "Traceback" not in broken.output


def test_each_preset_runs_through_its_own_familys_rotary_code(vectors):
    """GPT-J (sin/cos table, rotate_every_two), Llama 4 (complex tables), DeepSeek-V3 (interleaved
    MLA block), Gemma 3 (per layer type) ... each through its own transformers module and rotation."""
    manifest, _ = conform.load(vectors)
    families = {e["name"]: e["hf_model_type"] for e in manifest["cases"] if e["kind"] == "rope"}
    assert families["preset-gpt-j"] == "gptj" and families["preset-llama-4-scout"] == "llama4_text"
    assert (
        families["preset-deepseek-v3"] == "deepseek_v3"
        and families["preset-gemma-3-12b-global"] == "gemma3_text"
    )
    assert families["rope_type-yarn"] == "llama"
    for name in ("preset-gpt-j", "preset-llama-4-scout", "preset-deepseek-v3", "preset-gpt-neox"):
        if not family_available(families[name]):
            continue
        rows = conform.check(vectors, against="hf", only=(name,))
        assert {r.quantity for r in rows if r.status == "ok"} >= {"cos", "sin", "q_rot", "k_rot"}, name
        assert not [r for r in rows if r.status == "FAIL"], name


def test_a_family_rotating_other_pairs_fails_the_rotation(vectors, monkeypatch):
    """The check can fail: Llama 4's interleaved case through Llama's half-pair code rotates other pairs."""
    manifest, arrays_of = conform.load(vectors)
    entry = next(e for e in manifest["cases"] if e["name"] == "preset-llama-4-scout")
    wrong = conform.hf_adapter({**entry, "hf_model_type": "llama"}, arrays_of(entry["name"]), torch.float32)
    right = conform.hf_adapter(entry, arrays_of(entry["name"]), torch.float32)
    call = "call0."
    assert np.abs(wrong[call + "q_rot"] - right[call + "q_rot"]).max() > 0.1
    np.testing.assert_allclose(wrong[call + "cos"], right[call + "cos"], atol=1e-6)  # same angles


def test_export_from_a_users_own_config_json_checks_against_its_family(tmp_path):
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=6,
        max_position_embeddings=4096,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6}},
    )  # fmt: skip
    path = tmp_path / "config.json"
    config.to_json_file(path)
    runner = CliRunner()
    out = tmp_path / "vectors"
    exported = runner.invoke(main, ["conform", "export", "--hf-config", str(path), str(out)])
    assert exported.exit_code == 0, exported.output
    manifest, _ = conform.load(out)
    cases = {e["name"]: e for e in manifest["cases"]}
    assert set(cases) == {"config-gemma3_text-sliding_attention", "config-gemma3_text-full_attention"}
    assert cases["config-gemma3_text-full_attention"]["config"]["scaling"]["rope_type"] == "linear"
    assert cases["config-gemma3_text-sliding_attention"]["config"]["scaling"] is None
    rows = conform.check(out, against="hf")
    assert rows and all(r.status == "ok" for r in rows), [r for r in rows if r.status != "ok"]


def test_export_of_a_composite_config_reads_its_text_config(tmp_path):
    """Found: a config with top-level sizes and a text_config (a vision-language model) was exported
    as plain RoPE at base 10000 with the top-level head size."""
    from transformers import LlamaConfig, LlavaConfig

    text = LlamaConfig(
        hidden_size=64, num_attention_heads=4, max_position_embeddings=8192,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 2048},
    )  # fmt: skip
    composite = {
        **LlavaConfig(text_config=text.to_dict()).to_dict(),
        "hidden_size": 4096,
        "num_attention_heads": 32,
    }
    (case,) = conform.config_cases(composite)
    assert case.kind == "rope" and "text_config" in case.source
    assert case.config["head_dim"] == 16 and case.config["base"] == 500000.0
    assert case.config["scaling"]["rope_type"] == "llama3"
    buried = {"model_type": "mystery_vl", "llm_config": {"hidden_size": 64, "num_attention_heads": 4}}
    with pytest.raises(posenc.PosencError, match="'llm_config'.*text_config"):
        conform.config_cases(buried)


@pytest.mark.skipif(
    not family_available("qwen2_vl_text"), reason="Qwen2-VL's seam needs a newer transformers"
)
@pytest.mark.parametrize("interleaved", [False, True])
def test_export_of_a_qwen_vl_config_is_its_m_rope_and_transformers_passes_it(tmp_path, interleaved):
    """Found: a Qwen2-VL config.json could not be exported at all."""
    from transformers import Qwen2VLConfig, Qwen3VLConfig

    rope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2]}
    text = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "rope_parameters": rope}
    config = (Qwen3VLConfig if interleaved else Qwen2VLConfig)(text_config=text)
    path = tmp_path / "config.json"
    config.to_json_file(path)
    out = tmp_path / "vectors"
    exported = CliRunner().invoke(main, ["conform", "export", "--hf-config", str(path), str(out)])
    assert exported.exit_code == 0, exported.output
    manifest, _ = conform.load(out)
    (entry,) = manifest["cases"]
    assert entry["kind"] == "mrope" and entry["config"]["mrope_section"] == [4, 2, 2]
    assert entry["config"]["base"] == 1e6 and entry["config"]["mrope_interleaved"] is interleaved
    for against in ("posenc", "hf"):
        rows = conform.check(out, against=against)
        assert rows and all(r.status == "ok" for r in rows), [r for r in rows if r.status != "ok"]


def test_a_flat_qwen2_vl_config_and_m_rope_posenc_has_not_verified():
    flat = {"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 1e6,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}  # fmt: skip
    (case,) = conform.config_cases(flat)  # transformers 4.x wrote Qwen2-VL's text sizes at the top
    assert case.kind == "mrope" and case.config["base"] == 1e6 and case.config["mrope_section"] == [2, 3, 3]
    with pytest.raises(posenc.PosencError, match="model_type 'glm4v'.*Qwen2-VL"):
        conform.config_cases({**flat, "model_type": "glm4v"})
    with pytest.raises(posenc.PosencError, match="rope_theta"):  # no base given: refused, not guessed
        conform.config_cases({k: v for k, v in flat.items() if k != "rope_theta"})
    with pytest.raises(posenc.PosencError, match="context-extension"):
        conform.config_cases(
            {**flat, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mrope_section": [2, 3, 3]}}
        )
