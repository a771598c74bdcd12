"""RoPE context-extension scalings are an open registry, as encodings and tasks are: a scaling from
outside posenc (``tests/outoftree/posenc_halfscale``, installed nowhere; a dist-info on ``sys.path``
declares it in the entry-point group ``posenc.rope_scalings``, or ``posenc.register_scaling`` names
it) runs through ``RoPE.set_scaling``, ``posenc.hf.apply(...).set_scaling``, ``posenc compare
--scalings`` (the profile's ``scalings``, also set with ``--set``) and ``posenc extend --scalings``
(a tiny random-weight Llama saved as a checkpoint), with no edit of posenc."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

import posenc
from posenc.cli import main
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.sincos import inverse_frequencies
from posenc.encoding.rotary import scaling as rope_scaling

OUT_OF_TREE = Path(__file__).parents[3] / "outoftree"
HEAD_DIM = 16


def dist_info(root: Path) -> Path:
    """``root/posenc_halfscale-0.1.dist-info`` declaring ``halfscale`` in ``posenc.rope_scalings``."""
    info = root / "posenc_halfscale-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: posenc-halfscale\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[posenc.rope_scalings]\nhalfscale = posenc_halfscale:HALFSCALE\n")
    return root


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The out-of-tree scaling importable and declared by entry point; clean registry state after."""
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    monkeypatch.syspath_prepend(str(dist_info(tmp_path / "site")))
    rope_scaling.SCALINGS_GROUP.refresh()
    yield "halfscale"
    for name in list(rope_scaling.SCALINGS_GROUP.registered):
        rope_scaling.unregister_scaling(name)
    sys.modules.pop("posenc_halfscale", None)
    rope_scaling.SCALINGS_GROUP.refresh()


def expected(factor: float, dim: int = HEAD_DIM, base: float = 10000.0) -> torch.Tensor:
    inv = inverse_frequencies(dim, base).clone()
    inv[dim // 4 :] /= factor
    return inv


def test_an_entry_point_scaling_is_found_by_name_and_listed(installed):
    assert installed in rope_scaling.ROPE_SCALINGS and installed in list(rope_scaling.ROPE_SCALINGS)
    assert "halfscale" not in rope_scaling.BUILTIN_SCALINGS  # the built-ins stay posenc's own
    inv, attention = rope_scaling.compute(
        {"rope_type": "halfscale", "factor": 4.0}, dim=HEAD_DIM, base=10000.0
    )
    torch.testing.assert_close(inv, expected(4.0), rtol=0, atol=0)
    assert attention == 1.0


def test_rope_set_scaling_runs_the_out_of_tree_scaling(installed):
    rope = posenc.build("rope", head_dim=HEAD_DIM)
    q = torch.randn(1, 2, 12, HEAD_DIM, dtype=torch.float64)
    k = torch.randn(1, 2, 12, HEAD_DIM, dtype=torch.float64)
    plain = rope.rotate(q, k)
    rope.set_scaling({"rope_type": "halfscale", "factor": 2.0})
    inv, _ = rope.frequencies(12)
    torch.testing.assert_close(inv, expected(2.0), rtol=0, atol=0)
    scaled = rope.rotate(q, k)
    assert not torch.equal(scaled[0], plain[0])  # the scaling reached the rotation
    # the rotation uses exactly those frequencies: the same as RoPE whose pairs turn by them
    angles = torch.arange(12, dtype=torch.float64)[:, None] * expected(2.0)[None]  # (n, d/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    half = HEAD_DIM // 2
    x1, x2 = q[..., :half], q[..., half:]
    want = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # "half" layout (GPT-NeoX)
    torch.testing.assert_close(scaled[0], want)


def test_a_bad_value_of_an_out_of_tree_scaling_is_refused_naming_it(installed):
    rope = posenc.build("rope", head_dim=HEAD_DIM)
    with pytest.raises(PosencError, match="factor"):
        rope.set_scaling({"rope_type": "halfscale", "factor": 0.5})
    with pytest.raises(PosencError, match="requires key 'factor'"):
        rope.set_scaling({"rope_type": "halfscale"})
    with pytest.raises(PosencError, match=r"halfscale needs dim >= 4"):
        posenc.build("rope", head_dim=2).set_scaling({"rope_type": "halfscale", "factor": 2.0})


def test_register_scaling_at_run_time_and_by_import_spec():
    from_spec = None
    sys.path.insert(0, str(OUT_OF_TREE))
    try:
        from_spec = rope_scaling.register_scaling("half_by_spec", "posenc_halfscale:HALFSCALE")
        import posenc_halfscale

        assert from_spec is posenc_halfscale.HALFSCALE
        assert "half_by_spec" in rope_scaling.ROPE_SCALINGS
        with pytest.raises(PosencError, match="built-in rope scaling"):
            rope_scaling.register_scaling("yarn", posenc_halfscale.HALFSCALE)
        with pytest.raises(PosencTypeError, match="not a RoPE scaling"):
            rope_scaling.register_scaling("not_one", "posenc_halfscale:halfscale_frequencies")
    finally:
        sys.path.remove(str(OUT_OF_TREE))
        if from_spec is not None:
            rope_scaling.unregister_scaling("half_by_spec")
        sys.modules.pop("posenc_halfscale", None)
    assert "half_by_spec" not in rope_scaling.ROPE_SCALINGS


def test_a_rope_type_read_from_data_is_a_name_never_an_import_spec():
    with pytest.raises(PosencError, match="rope_type must be one of"):
        rope_scaling.split({"rope_type": "posenc_halfscale:HALFSCALE", "factor": 2.0})


def test_posenc_hf_apply_set_scaling_runs_the_out_of_tree_scaling(installed):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=16, rope_theta=10000.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    handle = posenc.hf.apply(model)
    assert handle.set_scaling({"rope_type": "halfscale", "factor": 2.0}) == 1
    (rope,) = {id(m): m for m in model.modules() if isinstance(m, posenc.PositionalEncoding)}.values()
    inv, _ = rope.frequencies(16)
    torch.testing.assert_close(inv, expected(2.0, dim=16), rtol=0, atol=0)


def test_posenc_compare_scalings_lists_and_takes_the_out_of_tree_scaling(installed, tmp_path):
    """``--scalings``' help is the registry's (the entry point's name included); the option sets the
    profile's key as ``--set scalings=[...]`` does, and a name that is none is one line, exit 2."""
    help_text = " ".join(CliRunner().invoke(main, ["compare", "--help"]).output.split())
    help_text = help_text.replace("- ", "-")  # click wraps lines after a hyphen ("yarn-" / "dynamic")
    assert "--scalings" in help_text and "halfscale" in help_text and "yarn-dynamic" in help_text
    printed = CliRunner().invoke(main, ["compare", "--profile", "smoke", "--scalings", "halfscale:2,yarn:4",
                                        "--print-config"])  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert 'scalings = ["halfscale:2", "yarn:4"]' in printed.output
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", "--scalings", "halfscal:2",
                                       "--out", str(tmp_path)])  # fmt: skip
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("posenc: error: --scalings: scalings = 'halfscal:2'")
    assert "did you mean 'halfscale'" in lines[0] and not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "given", [["--scalings", "halfscale:2"], ["--set", 'scalings=["halfscale:2"]']], ids=["option", "set"]
)
def test_posenc_compare_evaluates_the_out_of_tree_scaling(installed, tmp_path, given):
    args = [
        "compare", "--profile", "smoke", "--encodings", "rope", "--tasks", "copy", "--seeds", "0",
        *given, "--out", str(tmp_path), "--format", "json", "--no-report",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outcome"]["done"] == 1
    (record,) = [
        json.loads(p.read_text()) for p in tmp_path.rglob("*.json") if p.parent.parent.name == "runs"
    ]
    evaluated = record["result"]["eval"]
    assert set(evaluated) == {"default", "halfscale:2"}
    assert evaluated["halfscale:2"] != evaluated["default"]


# --- posenc extend --scalings: the same scaling, on a pretrained checkpoint -------------------------


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    """A random-weight Llama (trained context 64) and a byte-level tokenizer, saved as a checkpoint."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from posenc.extend.documents import python_docs_text

    root = tmp_path_factory.mktemp("tiny-llama")
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [python_docs_text()[:30_000]], vocab_size=280, min_frequency=2, show_progress=False
    )
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer).save_pretrained(root)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=len(transformers.AutoTokenizer.from_pretrained(root)), max_position_embeddings=64,
        initializer_range=0.5,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(root)
    return root


def _extend(model: Path, out: Path, *args: str) -> Any:
    return CliRunner().invoke(main, [
        "extend", "--model", str(model), "--out", str(out), "--device", "cpu", "--workers", "1",
        "--lengths", "32,96", "--documents", "2", "--chunk", "32", "--passkey-lengths", "", "--no-figures",
        *args,
    ])  # fmt: skip


def test_posenc_extend_scalings_lists_and_measures_the_out_of_tree_scaling(installed, tiny_llama, tmp_path):
    """``posenc extend --scalings``' help is the registry's (the entry point's name included); a grid
    with ``halfscale`` (its factor from ``--factors``, and one written ``halfscale:4``) measures a
    checkpoint with posenc's halfscale tables: each cell's record names the scaling, and its
    perplexity differs from plain RoPE's; a bad name is one line, exit 2."""
    help_text = " ".join(CliRunner().invoke(main, ["extend", "--help"]).output.split()).replace("- ", "-")
    assert "halfscale" in help_text and "yarn-dynamic" in help_text and "longrope" in help_text
    result = _extend(tiny_llama, tmp_path / "o", "--scalings", "none,halfscale,halfscale:4", "--factors", "2",
                     "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert [e["key"] for e in summary["entries"]] == ["none", "halfscale:2", "halfscale:4"]
    ppl = summary["perplexity"]
    assert ppl["halfscale x2"]["96"]["value"] != ppl["none"]["96"]["value"]
    assert ppl["halfscale x4"]["96"]["value"] != ppl["halfscale x2"]["96"]["value"]
    tables = {json.dumps(json.loads(p.read_text())["cell"]["scaling"], sort_keys=True)
              for p in (tmp_path / "o" / "cells").glob("*.json")}  # fmt: skip
    assert tables == {
        "null",
        '{"factor": 2.0, "rope_type": "halfscale"}',
        '{"factor": 4.0, "rope_type": "halfscale"}',
    }
    refused = _extend(tiny_llama, tmp_path / "p", "--scalings", "none,halfscal:2", "--plan")
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert refused.exit_code == 2 and len(lines) == 1 and "did you mean 'halfscale'" in lines[0], (
        refused.output
    )


def test_a_scaling_registered_at_run_time_is_a_name_of_posenc_extend(tiny_llama, tmp_path):
    """``posenc.register_scaling`` (public at the top level) is all it takes: the plan of a grid with
    the registered name checks it at every length against the model's rotary size."""
    sys.path.insert(0, str(OUT_OF_TREE))
    try:
        import posenc_halfscale

        assert posenc.register_scaling("halved", posenc_halfscale.HALFSCALE) is posenc_halfscale.HALFSCALE
        result = _extend(tiny_llama, tmp_path / "o", "--scalings", "none,halved:2", "--plan")
        assert result.exit_code == 0, result.output
        assert "halved x2: document 1, 96 tokens" in result.output
    finally:
        sys.path.remove(str(OUT_OF_TREE))
        if "halved" in rope_scaling.SCALINGS_GROUP.registered:
            rope_scaling.unregister_scaling("halved")
        sys.modules.pop("posenc_halfscale", None)
    assert "halved" not in rope_scaling.ROPE_SCALINGS
