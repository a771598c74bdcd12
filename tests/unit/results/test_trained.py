"""Trained models of finished runs: loading (and refusing) kept weights, their attention
maps, the word-order probe, and the CLI commands that draw and probe them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from posenc import compare, results
from posenc.analysis import probes
from posenc.cli import main
from posenc.core.errors import PosencError
from posenc.records.store import checksum
from posenc.results import trained
from posenc.tasks import synthetic


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A smoke-profile run of learned (copy, LM) and rope (copy): a few seconds of training."""
    out = tmp_path_factory.mktemp("trained")
    for name, tasks in (("learned", ("copy", "lm")), ("rope", ("copy",))):
        compare.compare("smoke", encodings=(name,), tasks=tasks, seeds=(0,), out=out, show_progress=False, log=lambda _: None)  # fmt: skip
    found = {p.name.split("__")[0] + "/" + p.parent.name: p for p in out.glob("runs/*/*.json")}
    return found, out


def _copy(runs, key, tmp_path):
    """A private copy of one run (record and weights) to damage."""
    src = runs[0][key]
    for suffix in (".json", ".pt"):
        shutil.copy(src.with_suffix(suffix), tmp_path / src.with_suffix(suffix).name)
    return tmp_path / src.name


def _rewrite(path, change):
    data = json.loads(path.read_text())
    change(data)
    data["checksum"] = checksum(data)
    path.write_text(json.dumps(data))


def test_load_run_gives_back_the_trained_weights(runs):
    record = runs[0]["learned/copy"]
    model, spec = trained.load_run(record)
    saved = torch.load(record.with_suffix(".pt"), weights_only=True)
    torch.testing.assert_close(model.state_dict(), saved, rtol=0, atol=0)
    assert spec.encoding == "learned" and spec.task == "copy" and not model.training
    again, _ = trained.load_run(record.with_suffix(".pt"))  # the weights file names its run too
    torch.testing.assert_close(again.state_dict(), saved, rtol=0, atol=0)
    torch.testing.assert_close(results.load_model(record).state_dict(), saved, rtol=0, atol=0)


def test_attention_maps_come_from_the_models_own_forward(runs):
    model, spec = trained.load_run(runs[0]["rope/copy"])
    ex = trained.example(spec)
    maps = probes.model_attention_maps(model, ex.tokens)
    # The same layer by layer by hand: each block's attention asked for its weights.
    positions = torch.arange(ex.tokens.shape[1])[None]
    x, expected = model.embed(ex.tokens, positions), []
    with torch.no_grad():
        for block in model.blocks:
            _, weights = block.attn(block.ln_attn(x), positions=positions, return_weights=True)
            expected.append(weights[0].double().numpy())
            x = block(x, positions=positions, padding_mask=None, cache=None)
    np.testing.assert_allclose(maps, np.stack(expected), rtol=0, atol=0)
    n = ex.tokens.shape[1]
    assert maps.shape == (spec.model.num_layers, spec.model.num_heads, n, n)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-6)
    assert np.all(np.triu(maps, k=1) == 0)  # causal


def test_the_example_is_the_runs_own_input(runs):
    _, spec = trained.load_run(runs[0]["rope/copy"])
    ex = trained.example(spec)
    n = spec.train.max_len
    row = synthetic.eval_batch("copy", n, 1, seed=spec.eval.seed).inputs[0]
    torch.testing.assert_close(ex.tokens[0], row)  # copy at the training n: no padding
    assert ex.labels[0] == "BOS" and ex.labels[n + 1] == "SEP" and "the training length" in ex.description
    longer = trained.example(spec, 2 * n)
    assert longer.tokens.shape[1] == 2 * (2 * n) + 2  # BOS x SEP y (EOS is not read)
    assert "2x the training length" in longer.description
    _, lm = trained.load_run(runs[0]["learned/lm"])
    text = trained.example(lm, 10)
    assert (
        text.tokens.shape == (1, 10)
        and int(text.tokens.max()) < 256
        and "validation text" in text.description
    )


def test_word_order_change_aligns_multi_token_words():
    """A bidirectional model without positions is permutation equivariant: moving whole words
    (several tokens each) moves their outputs, so the word-aligned change is zero; any
    position signal or a causal mask makes it clearly positive."""
    words = {"The": [3, 4], "quick": [5], "brown": [6, 7, 8], "fox": [9], "jumps": [10, 11]}
    original, permuted = probes.PROBE_ORIGINAL, probes.PROBE_PERMUTED

    def change(name, causal):
        model = probes.small_model(name, causal=causal, vocab_size=16)
        return probes.word_order_change(model, original, permuted, words.__getitem__)

    token, pooled = change("nope", False)
    assert token < 1e-12 and pooled < 1e-12
    assert change("nope", True)[0] > 1e-3 and change("sinusoidal", False)[0] > 1e-3
    assert probes.word_order_change(probes.small_model("rope", vocab_size=16), original, original,
                                    words.__getitem__) == (0.0, 0.0)  # fmt: skip
    with pytest.raises(PosencError, match="must reorder the words"):
        probes.word_order(original, ("a", "b", "c", "d", "e"))


def test_probe_of_a_trained_run_is_the_models_own(runs):
    record = runs[0]["learned/copy"]
    got = trained.probe(record)
    model, _ = trained.load_run(record)
    ids = {w: synthetic.FIRST_SYMBOL + k for k, w in enumerate(probes.PROBE_ORIGINAL)}
    want = probes.word_order_change(model, probes.PROBE_ORIGINAL, probes.PROBE_PERMUTED, lambda w: [ids[w]],
                                    prefix=[synthetic.BOS])  # fmt: skip
    assert (got.token_change, got.pooled_change) == want and got.token_change > 0
    assert (got.label, got.task, got.seed) == ("learned", "copy", 0)
    lm = trained.probe(runs[0]["learned/lm"])
    assert lm.task == "lm" and lm.token_change > 0 and "bytes" in lm.words


def test_cli_plot_and_probe_a_run(runs, tmp_path):
    record = runs[0]["rope/copy"]
    cli = CliRunner()
    out = tmp_path / "att.png"
    result = cli.invoke(main, ["plot", "--run", str(record), "--kind", "attention", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = cli.invoke(main, ["plot", "rope", "--run", str(record), "--kind", "attention", "--positions", "12",
                               "-o", str(tmp_path / "long.svg")])  # fmt: skip
    assert result.exit_code == 0 and "<svg" in (tmp_path / "long.svg").read_text()
    result = cli.invoke(main, ["probe", "nope", "--run", str(record), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert rows[0]["token_change"] < 1e-12  # untrained, bidirectional, no positions
    assert rows[1]["token_change"] == trained.probe(record).token_change
    result = cli.invoke(main, ["probe", "--run", str(record)])
    assert result.exit_code == 0 and "rope (trained on copy, seed 0)" in result.output


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p, runs: p.unlink(), "no such file"),
        (lambda p, runs: p.write_text("{not json"), r"not a valid run record \(unreadable JSON"),
        (lambda p, runs: p.with_suffix(".pt").unlink(), "weights file .* unreadable"),
        (lambda p, runs: p.with_suffix(".pt").write_bytes(b"g" * p.with_suffix(".pt").stat().st_size),
         "does not match its checksum"),
        (lambda p, runs: p.with_suffix(".pt").write_bytes(b"garbage"), "holds 7 bytes, the record says"),
        (lambda p, runs: _rewrite(p, lambda d: d.pop("weights")), "keeps no weights"),
        # a file whose checksum is right but which is not a state dict / not this model's
        (lambda p, runs: (p.with_suffix(".pt").write_bytes(b"not torch"),
                          _rewrite(p, lambda d: d["weights"].update(**_seal(p.with_suffix(".pt"))))),
         "is not a saved state dict"),
        (lambda p, runs: (shutil.copy(runs[0]["learned/lm"].with_suffix(".pt"), p.with_suffix(".pt")),
                          _rewrite(p, lambda d: d["weights"].update(**_seal(p.with_suffix(".pt"))))),
         "does not fit the model the record describes"),
    ],
)  # fmt: skip
def test_missing_corrupt_or_mismatched_weights_are_one_line_errors(runs, tmp_path, damage, message):
    record = _copy(runs, "learned/copy", tmp_path)
    damage(record, runs)
    with pytest.raises(PosencError, match=message):
        trained.load_run(record)
    for args in (["plot", "--run", str(record), "--kind", "attention", "-o", str(tmp_path / "a.png")],
                 ["probe", "--run", str(record)]):  # fmt: skip
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert result.output.startswith("posenc: error: ") and result.output.count("\n") == 1, result.output


def _seal(path):
    """The ``weights`` entry of a record naming the file at ``path`` (its checksum and size)."""
    import hashlib

    return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "bytes": path.stat().st_size}


def test_cli_refuses_what_does_not_apply_to_a_run(runs, tmp_path):
    record = str(runs[0]["rope/copy"])
    out = str(tmp_path / "x.png")
    cases = [
        (["plot", "--run", record, "--kind", "heatmap", "-o", out], "--kind attention only"),
        (
            ["plot", "--run", record, "--kind", "attention", "--d-model", "32", "-o", out],
            "--d-model does not apply",
        ),
        (["plot", "alibi", "--run", record, "--kind", "attention", "-o", out], "does not match the run"),
        (["plot", "--run", str(tmp_path), "--kind", "attention", "-o", out], "a directory"),
        (["plot", "--kind", "attention", "-o", out], "missing NAME"),
        (["probe"], "give encoding NAMES"),
        (["probe", "ropee"], "did you mean"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
