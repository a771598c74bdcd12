"""Declared capabilities match what the encodings do (attention reads the declarations).

``translation_invariant`` of bias encodings is checked in tests/unit/kernels/test_bias_attention.py; here
``cache_unrotated_keys`` (rotary) and ``has_values`` (relative), for every registered
encoding of the kind and, for RoPE, every scaling.
"""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.encoding.rotary.scaling import ROPE_SCALINGS

ROTARY = [n for n, c in posenc.ENCODINGS.items() if c.kind == "rotary"]
RELATIVE = [n for n, c in posenc.ENCODINGS.items() if c.kind == "relative"]
SCALINGS = {  # one valid dict per scaling, for head_dim 8 (4 pairs), original context 16
    "default": None,
    "linear": {"factor": 2.0},
    "ntk": {"factor": 2.0},
    "dynamic": {"factor": 2.0, "original_max_position_embeddings": 16},
    "yarn": {"factor": 2.0, "original_max_position_embeddings": 16},
    "llama3": {
        "factor": 2.0,
        "original_max_position_embeddings": 16,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
    "longrope": {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4, "original_max_position_embeddings": 16},
}


def rotated_key(enc, length: int) -> torch.Tensor:
    """Key at position 3 rotated in a call whose largest position is ``length - 1``."""
    heads = getattr(enc.config, "num_heads", 1)  # per-head rotations (RoPE-Mixed) need every head
    k = torch.randn(1, heads, length, enc.config.head_dim, generator=torch.Generator().manual_seed(0))
    _, rotated = enc.rotate(k, k)
    return rotated[0, 0, 3]


def test_every_scaling_has_an_example():
    assert set(SCALINGS) == set(ROPE_SCALINGS)


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_rope_cache_unrotated_keys_is_declared_exactly_when_keys_change_with_length(name):
    scaling = None if SCALINGS[name] is None else {"rope_type": name, **SCALINGS[name]}
    enc = posenc.build("rope", head_dim=8, scaling=scaling)
    changes = not torch.equal(rotated_key(enc, 8), rotated_key(enc, 64))  # 64 > the original 16
    assert enc.cache_unrotated_keys == changes
    assert enc.cache_unrotated_keys == ROPE_SCALINGS[name].length_dependent


@pytest.mark.parametrize("name", ROTARY)
def test_rotary_defaults_rotate_keys_independently_of_length(name):
    enc = posenc.build_for_model(name, d_model=16, num_heads=2)
    assert not enc.cache_unrotated_keys
    assert torch.equal(rotated_key(enc, 8), rotated_key(enc, 64))


@pytest.mark.parametrize("name", RELATIVE)
@pytest.mark.parametrize("values", [False, True])
def test_has_values_is_declared_exactly_when_values_adds_a_term(name, values):
    config = {"values": values} if "values" in posenc.ENCODINGS[name].Config.field_names() else {}
    enc = posenc.build_for_model(name, d_model=16, num_heads=2, **config)
    probs = torch.softmax(torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(0)), -1)
    assert enc.has_values == (enc.values(probs) is not None)
