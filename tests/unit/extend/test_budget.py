"""posenc.extend.budget: the cost model fitted to measured passes, and what sharing the beginnings
of prompts through the KV cache saves."""

from __future__ import annotations

import re
import zlib

import pytest

from posenc.core.errors import PosencError
from posenc.extend import budget
from posenc.extend import haystacks as hs
from posenc.extend.plan import Shape

#: SmolLM2-135M's shape (30 layers, 9 heads of 64, 3 key-value heads, 49,152 tokens, 134.5M parameters)
SMOL = Shape(layers=30, heads=9, kv_heads=3, head_dim=64, hidden=576, intermediate=1536, vocab=49152,
             parameters=134_515_008)  # fmt: skip
KNOWN = budget.CostModel(
    dense=50.0, attention=35.0, call=0.08, chunk=1024, step=0.1, step_per_token=1e-5, where="made up"
)


def words(text: str) -> list[int]:
    return [zlib.crc32(piece.encode()) for piece in re.findall(r" ?\w+| ?[^\w\s]+|\s+", text)]


def test_the_fit_recovers_the_rates_that_made_the_passes():
    passes = [(0, n, True, KNOWN.seconds(SMOL, 0, n, logits=True)) for n in (2048, 4096, 8192, 16384)]
    passes += [(3072, 4096, False, KNOWN.seconds(SMOL, 3072, 4096, logits=False))]
    passes += [(n, n + 1, False, KNOWN.answer(n, 1)) for n in (2048, 8192, 16384)]  # decoding steps
    got = budget.fit(SMOL, passes, chunk=1024, where="test")
    assert (got.dense, got.attention, got.call) == pytest.approx((50.0, 35.0, 0.08), rel=1e-6)
    assert (got.step, got.step_per_token) == pytest.approx((0.1, 1e-5), rel=1e-6)
    with pytest.raises(PosencError, match="3 or more"):
        budget.fit(SMOL, passes[:2] + passes[-3:], chunk=1024, where="test")
    with pytest.raises(PosencError, match="decoding steps"):
        budget.fit(SMOL, passes[:5], chunk=1024, where="test")


def test_a_pass_costs_more_than_a_prompt_of_its_length_and_attention_grows_with_the_square():
    text, prompt = KNOWN.text_pass(SMOL, 8192), KNOWN.seconds(SMOL, 0, 8192, logits=False)
    assert text > prompt  # the output layer at every position
    short, long = (KNOWN.seconds(SMOL, 0, n, logits=False) for n in (4096, 16384))
    assert long / short > 4  # quadratic attention on top of linear layers
    assert KNOWN.answer(16384, 10) > KNOWN.answer(2048, 10) > 10 * KNOWN.step


def test_sharing_the_beginning_of_prompts_saves_what_they_share():
    prompts = hs.prompts("passkey", 4096, 10, seed=0, tokenize=words)
    order = hs.prefill_order(prompts)
    shared, alone = KNOWN.prompts(SMOL, order)
    assert shared < alone
    by_hand = sum(KNOWN.prompt(SMOL, p.length, p.budget, s) for p, s in order)
    assert shared == pytest.approx(by_hand)
    assert alone == pytest.approx(sum(KNOWN.prompt(SMOL, p.length, p.budget) for p in prompts))
