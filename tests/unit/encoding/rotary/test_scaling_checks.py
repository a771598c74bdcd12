"""RoPE scalings from outside posenc are isolated as encodings are: a scaling's function is checked
when the scaling is named, before any run (``RoPE.set_scaling``, ``posenc.hf.apply(...).set_scaling``,
``posenc compare --scalings`` and a profile's ``scalings``, ``posenc extend --scalings``), and refused
in one line naming it and what is wrong (NaN is "returns NaN", a wrong shape names the shape
expected and got, a key it reads but does not declare names the keys it declares, a function posenc
cannot call names the signature expected); a failure inside one scaled evaluation of a
``posenc compare`` run loses that evaluation only (the record keeps the others, the table says
``failed`` and why); one broken entry point of ``posenc.rope_scalings`` names itself and blocks
nothing else. The broken scalings are ``tests/outoftree/posenc_broken_scalings``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import posenc
from posenc.cli import main
from posenc.core.checks import did_you_mean
from posenc.core.errors import PosencError, PosencTypeError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.records import benchmark_scalings
from posenc.records.store import ResultStore

OUT_OF_TREE = Path(__file__).parents[3] / "outoftree"
HEAD_DIM = 16


def refusal(name: str, dim: int = HEAD_DIM) -> str:
    """What the one-line refusal of broken scaling ``name`` says at rotated dimension ``dim`` (a regex)."""
    return {
        "nans": rf"rope scaling 'nans' called with dim={dim}, base=10000 and keys \{{'factor': 2.0\}} returns NaN "
        "frequencies",
        "raises": r"rope scaling 'raises' called with .* raised RuntimeError: the scaling's own bug",
        "short": rf"rope scaling 'short' called with .* returned inv_freq of shape \({dim // 2 - 1},\); expected "
        rf"\({dim // 2},\)",
        "reads_factor": r"rope scaling 'reads_factor' .* raised KeyError: 'factor' \(it reads a key it does not "
        r"declare; the keys it declares: none\)",
        "negative_attention": r"rope scaling 'negative_attention' .* returns attention_scaling -1; it must be a "
        "number > 0",
    }[name]


REFUSED = ["nans", "negative_attention", "raises", "reads_factor", "short"]


def _given(name: str) -> dict:
    return {"rope_type": name} if name == "reads_factor" else {"rope_type": name, "factor": 2.0}


@pytest.fixture
def broken(monkeypatch):
    """The broken scalings registered under their names; the registry as it was after."""
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    import posenc_broken_scalings as module

    for name, spec in module.BROKEN.items():
        rope_scaling.register_scaling(name, spec)
    yield module
    for name in list(rope_scaling.SCALINGS_GROUP.registered):
        rope_scaling.unregister_scaling(name)
    sys.modules.pop("posenc_broken_scalings", None)


def _one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    return lines[0]


# --- where a scaling is named: RoPE.set_scaling, posenc.hf.apply(...).set_scaling ----------------


@pytest.mark.parametrize("name", REFUSED)
def test_rope_set_scaling_refuses_a_broken_scaling_in_one_line_naming_it(broken, name):
    rope = posenc.build("rope", head_dim=HEAD_DIM)
    q = torch.randn(1, 2, 6, HEAD_DIM)
    before = rope.rotate(q, q)[0]
    with pytest.raises(PosencError, match=refusal(name)) as refused:
        rope.set_scaling(_given(name))
    assert "\n" not in str(refused.value) and "overflows" not in str(refused.value)
    torch.testing.assert_close(rope.rotate(q, q)[0], before, rtol=0, atol=0)  # nothing was installed


def test_a_scaling_in_a_config_is_checked_when_the_encoding_is_built(broken):
    with pytest.raises(PosencError, match=refusal("nans")):
        posenc.build("rope", head_dim=HEAD_DIM, scaling={"rope_type": "nans", "factor": 2.0})


def test_a_float64_castable_result_is_taken_and_posens_own_overflow_is_said_so(monkeypatch):
    """A list of floats and a 0-d tensor are what the contract allows (castable); posenc's own
    formulas out of range are float overflow, and said so."""
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    import posenc_broken_scalings as module

    rope_scaling.register_scaling("as_list", module.AS_LIST)
    try:
        rope = posenc.build("rope", head_dim=HEAD_DIM)
        rope.set_scaling({"rope_type": "as_list", "factor": 2.0})
        inv, attention = rope.frequencies(10)
        assert inv.dtype == torch.float64 and inv.shape == (HEAD_DIM // 2,) and attention == 1.0
    finally:
        rope_scaling.unregister_scaling("as_list")
        sys.modules.pop("posenc_broken_scalings", None)
    with pytest.raises(PosencError, match="overflows float64/float32.*use a smaller factor"):
        rope_scaling.compute({"rope_type": "ntk", "factor": 1e300}, dim=HEAD_DIM, base=1e300)


def test_a_function_posenc_cannot_call_is_refused_at_registration_naming_the_signature(monkeypatch):
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    import posenc_broken_scalings as module

    try:
        with pytest.raises(PosencTypeError) as refused:
            rope_scaling.register_scaling("wrong_arity", module.WRONG_ARITY)
    finally:
        sys.modules.pop("posenc_broken_scalings", None)
    said = str(refused.value)
    assert "'wrong_arity'" in said and "positional(dim, base)" in said
    assert "fn(*, dim, base, seq_len, params)" in said
    assert "wrong_arity" not in rope_scaling.ROPE_SCALINGS


def test_hf_apply_set_scaling_refuses_before_any_layer_changes(broken):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=16,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    handle = posenc.hf.apply(model)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    before = model(ids).logits
    with pytest.raises(PosencError, match=refusal("short")):
        handle.set_scaling({"rope_type": "short", "factor": 2.0})
    torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=0)


# --- posenc compare --scalings / a profile's scalings -----------------------------------------------


@pytest.mark.parametrize("name", REFUSED)
def test_posenc_compare_refuses_a_broken_scaling_before_any_run(broken, name, tmp_path):
    given = name if name == "reads_factor" else f"{name}:2"
    result = CliRunner().invoke(main, [
        "compare", "--profile", "smoke", "--encodings", "rope", "--tasks", "copy", "--seeds", "0",
        "--scalings", given, "--out", str(tmp_path / "o"),
    ])  # fmt: skip
    line = _one_line(result)
    assert line.startswith(f"posenc: error: --scalings: scalings = {given!r}: "), line
    assert re.search(refusal(name, dim=8), line), line  # the smoke profile's heads: d_model 16 / 2 heads
    assert line.endswith("(as a copy run evaluates it)"), line
    assert not (tmp_path / "o" / "runs").exists()


def test_a_factor_given_to_a_scaling_that_declares_none_says_which_keys_it_declares(broken):
    with pytest.raises(PosencError, match=r"reads_factor takes no factor \(its RopeScaling declares no keys"):
        benchmark_scalings.parse("reads_factor:2")


# --- posenc extend --scalings ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tests.extend_models import tiny_llama

    return tiny_llama(tmp_path_factory.mktemp("tiny-llama-scalings"))


@pytest.mark.parametrize("name", ["nans", "short"])
def test_posenc_extend_plan_refuses_a_broken_scaling_before_any_cell(broken, llama, tmp_path, name):
    result = CliRunner().invoke(main, [
        "extend", "--model", str(llama), "--out", str(tmp_path / "o"), "--device", "cpu", "--lengths", "32,96",
        "--documents", "1", "--passkey-lengths", "", "--no-figures", "--scalings", f"none,{name}:2", "--plan",
    ])  # fmt: skip
    line = _one_line(result)
    assert f"--scalings {name}:2 at 32 tokens: rope scaling {name!r}" in line, line
    assert not list((tmp_path / "o").glob("cells/*.json"))


# --- a failure inside one scaled evaluation loses that evaluation only ------------------------------


@pytest.mark.slow
def test_a_scaling_that_fails_inside_a_run_loses_its_evaluation_only(tmp_path, monkeypatch):
    """GRADLESS passes every check made where it is named and raises inside the model's no-grad
    evaluation: the run's record is written with plain RoPE's and the other scaling's evaluations,
    the failed one named with why; the table says failed and the notes why; a reader reads it."""
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    import posenc_broken_scalings as module

    rope_scaling.register_scaling("gradless", module.GRADLESS)
    args = ["compare", "--profile", "smoke", "--encodings", "rope", "--tasks", "copy", "--seeds", "0",
            "--scalings", "gradless:2,dynamic:2", "--out", str(tmp_path), "--no-report"]  # fmt: skip
    try:
        result = CliRunner().invoke(main, args)
        again = CliRunner().invoke(main, args)  # the record is complete: resumed, not run again
    finally:
        rope_scaling.unregister_scaling("gradless")
        sys.modules.pop("posenc_broken_scalings", None)
    assert result.exit_code == 0, result.output
    (path,) = [p for p in tmp_path.rglob("*.json") if p.parent.parent.name == "runs"]
    record = json.loads(path.read_text())
    assert set(record["result"]["eval"]) == {"default", "dynamic:2"}
    reason = record["result"][benchmark_scalings.FAILED_KEY]["gradless:2"]
    assert reason.startswith("PosencError: rope scaling 'gradless'") and "without gradients" in reason
    output = " ".join(result.output.split())
    assert "rope[gradless:2]" in output and "failed" in output
    assert "FAILED evaluation rope[gradless:2] / copy: evaluation failed in 1 of 1 seeds (seed 0)" in output
    (read,) = ResultStore(tmp_path).records()  # the schema takes it: a reader reads it, nothing set aside
    assert read["run_id"] == record["run_id"]
    summary = posenc.results.summarize([read])
    cell = summary["rows"]["rope[gradless:2]"]["copy:em_in"]
    assert posenc.results.tables.format_cell(cell, True) == "failed"
    assert "rope[dynamic:2]" in summary["rows"] and "rope" in summary["rows"]
    assert again.exit_code == 0 and "runs: 0 done, 1 resumed, 0 failed" in again.output, again.output
    assert "FAILED evaluation rope[gradless:2] / copy" in " ".join(again.output.split())
    measured = posenc.results.tables.format_cell({**summary["rows"]["rope"]["copy:em_in"], "failed": 1}, True)
    assert measured.endswith(" (1 failed)") and measured != " (1 failed)"  # some seeds measured, one failed


# --- one broken entry point names itself and blocks nothing else -----------------------------------


@pytest.fixture
def broken_entry_points(tmp_path, monkeypatch):
    """A dist-info declaring halfscale (fine) and three broken entry points of posenc.rope_scalings:
    a missing attribute, a module that fails on import, a function posenc cannot call."""
    info = tmp_path / "site" / "posenc_mixed-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: posenc-mixed\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[posenc.rope_scalings]\nhalfscale = posenc_halfscale:HALFSCALE\n"
        "missing = posenc_broken_scalings:NOT_THERE\n"
        "unimportable = posenc_broken_scalings.fails_on_import:ANY\n"
        "wrong_arity = posenc_broken_scalings:WRONG_ARITY\n"
    )
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    rope_scaling.SCALINGS_GROUP.refresh()
    yield ("missing", "unimportable", "wrong_arity")
    for name in ("posenc_halfscale", "posenc_broken_scalings", "posenc_broken_scalings.fails_on_import"):
        sys.modules.pop(name, None)
    rope_scaling.SCALINGS_GROUP.refresh()


def test_a_broken_entry_point_names_itself_and_blocks_nothing_else(broken_entry_points, tmp_path):
    # the other scalings work, in both commands (grid and help) and in the library
    printed = CliRunner().invoke(main, ["compare", "--profile", "smoke", "--scalings", "halfscale:2,yarn:4",
                                        "--print-config"])  # fmt: skip
    assert printed.exit_code == 0, printed.output
    for command in ("compare", "extend"):
        helped = CliRunner().invoke(main, [command, "--help"])
        assert helped.exit_code == 0 and "halfscale" in helped.output, helped.output
    rope = posenc.build("rope", head_dim=HEAD_DIM)
    rope.set_scaling({"rope_type": "halfscale", "factor": 2.0})
    listed = list(rope_scaling.ROPE_SCALINGS)
    assert "halfscale" in listed and "yarn" in listed and not set(broken_entry_points) & set(listed)
    # the broken one, named, says what is wrong with it
    with pytest.raises(PosencError, match="entry point 'missing'.*cannot be loaded"):
        rope.set_scaling({"rope_type": "missing", "factor": 2.0})
    line = _one_line(CliRunner().invoke(main, ["compare", "--profile", "smoke", "--scalings", "unimportable:2",
                                               "--out", str(tmp_path / "o")]))  # fmt: skip
    assert "entry point 'unimportable'" in line and "ImportError" in line and "did you mean" not in line
    said = rope_scaling.broken_scalings()  # each, with why (what a listing says it left out)
    assert set(said) == set(broken_entry_points)
    assert all(f"entry point {name!r}" in said[name] and "posenc-mixed" in said[name] for name in said)
    assert "fn(*, dim, base, seq_len, params)" in said["wrong_arity"]


def test_did_you_mean_never_suggests_the_name_typed(broken):
    assert did_you_mean("nans", ["nans", "nan"]) == "; did you mean 'nan'?"
    assert did_you_mean("nans", ["nans"]) == ""
    for grid in ("compare", "extend"):
        with pytest.raises(PosencError) as refused:
            benchmark_scalings.parse_grid("nans", checkpoint=grid == "extend")
        assert "did you mean 'nans'" not in str(refused.value)
