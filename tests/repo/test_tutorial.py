"""The seed tutorial's classes: its examples run with only the import changed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc.reference import absolute, tutorial
from posenc.reference.tutorial import Embedding, PositionalEncoding

# "Usage Example" from the tutorial (seed 004), verbatim except the import line
# (`from src.layers import Embedding, PositionalEncoding` there).
USAGE_EXAMPLE = """
import numpy as np
from posenc.reference.tutorial import Embedding, PositionalEncoding

# Create components
vocab_size = 1000
embed_dim = 128
max_seq_len = 512

embedding = Embedding(vocab_size, embed_dim)
pos_encoding = PositionalEncoding(max_seq_len, embed_dim)

# Input tokens
token_ids = np.array([[42, 156, 89]])  # Shape: (1, 3)

# Get token embeddings
token_embeds = embedding.forward(token_ids)  # Shape: (1, 3, 128)

# Get positional encodings
pos_encodes = pos_encoding.get_encoding(3)  # Shape: (3, 128)

# Add them together (broadcasting adds to each batch)
final_embeds = token_embeds + pos_encodes  # Shape: (1, 3, 128)

print(f"Token embedding range: [{token_embeds.min():.3f}, {token_embeds.max():.3f}]")
print(f"Position encoding range: [{pos_encodes.min():.3f}, {pos_encodes.max():.3f}]")
"""

# "Try It Yourself" from the same tutorial, import changed the same way.
TRY_IT_YOURSELF = """
from posenc.reference.tutorial import PositionalEncoding
import numpy as np

# Create positional encoding
pe = PositionalEncoding(max_sequence_length=512, embedding_dimension=128)

# Get encodings
encodings = pe.get_encoding(10)  # For positions 0-9
print(f"Shape: {encodings.shape}")  # (10, 128)

# Check properties
print(f"Position 0: {encodings[0, :4]}...")
print(f"Position 1: {encodings[1, :4]}...")

# Compute similarity between positions
def cosine_sim(a, b):
    return np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))

print(f"Similarity pos0-pos1: {cosine_sim(encodings[0], encodings[1]):.3f}")
print(f"Similarity pos0-pos5: {cosine_sim(encodings[0], encodings[5]):.3f}")
print(f"Similarity pos0-pos9: {cosine_sim(encodings[0], encodings[9]):.3f}")
# Note: closer positions are more similar
"""

# Step 3 of the tutorial's worked example (d = 8, positions 0..3), 3 decimals.
STEP3 = np.array(
    [
        [0.000, 1.000, 0.000, 1.000, 0.000, 1.000, 0.000, 1.000],
        [0.841, 0.540, 0.100, 0.995, 0.010, 1.000, 0.001, 1.000],
        [0.909, -0.416, 0.199, 0.980, 0.020, 1.000, 0.002, 1.000],
        [0.141, -0.990, 0.296, 0.955, 0.030, 1.000, 0.003, 1.000],
    ]
)


def test_usage_example_runs_unchanged(capsys):
    scope: dict = {}
    exec(compile(USAGE_EXAMPLE, "tutorial-usage", "exec"), scope)
    out = capsys.readouterr().out
    assert scope["token_embeds"].shape == (1, 3, 128)
    assert scope["pos_encodes"].shape == (3, 128)
    assert scope["final_embeds"].shape == (1, 3, 128)
    np.testing.assert_array_equal(scope["final_embeds"], scope["token_embeds"] + scope["pos_encodes"][None])
    # positions 0..2: the minimum is cos(2) = -0.416 (step 3 of the worked example), the max cos(0) = 1
    assert "Position encoding range: [-0.416, 1.000]" in out
    assert out.startswith("Token embedding range: [")


def test_try_it_yourself_runs_and_closer_positions_are_more_similar(capsys):
    scope: dict = {}
    exec(compile(TRY_IT_YOURSELF, "tutorial-try", "exec"), scope)
    out = capsys.readouterr().out
    assert "Shape: (10, 128)" in out
    sims = [float(line.rsplit(":", 1)[1]) for line in out.splitlines() if line.startswith("Similarity")]
    assert sims[0] > sims[1] > sims[2]


def test_worked_example_table_matches_the_tutorial():
    table = PositionalEncoding(4, 8).encoding_table
    np.testing.assert_allclose(table, STEP3, atol=5e-4)  # the tutorial rounds to 3 decimals


def test_table_agrees_with_reference_and_library():
    pe = PositionalEncoding(300, 32)
    assert pe.encoding_table.shape == (300, 32) and pe.encoding_table.dtype == np.float64
    np.testing.assert_allclose(pe.encoding_table, absolute.sinusoidal(np.arange(300), 32), rtol=0, atol=1e-12)
    lib = posenc.build("sinusoidal", dim=32).embed(torch.zeros(1, 300, 32, dtype=torch.float64))[0]
    np.testing.assert_allclose(pe.encoding_table, lib.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pe.get_encoding(7), pe.encoding_table[:7])


def test_embedding_forward_is_a_row_lookup():
    emb = Embedding(50, 6, seed=3)
    ids = np.array([[1, 4, 4], [0, 49, 7]])
    out = emb.forward(ids)
    assert out.shape == (2, 3, 6)
    np.testing.assert_array_equal(out, emb.weights[ids])
    np.testing.assert_array_equal(Embedding(50, 6, seed=3).weights, emb.weights)  # seeded
    assert not np.array_equal(Embedding(50, 6, seed=4).weights, emb.weights)


def test_reexported_from_reference_package():
    from posenc import reference

    assert reference.tutorial is tutorial


@pytest.mark.parametrize(
    ("call", "error", "word"),
    [
        (lambda: PositionalEncoding(0, 8), ValueError, "max_sequence_length"),
        (lambda: PositionalEncoding(10, 7), ValueError, "embedding_dimension"),
        (lambda: PositionalEncoding(10, 0), ValueError, "embedding_dimension"),
        (lambda: PositionalEncoding(10.0, 8), TypeError, "max_sequence_length"),
        (lambda: PositionalEncoding(10, 8).get_encoding(11), ValueError, "exceeds maximum 10"),
        (lambda: PositionalEncoding(10, 8).get_encoding(-1), ValueError, "sequence_length"),
        (lambda: PositionalEncoding(10, 8).get_encoding(2.0), TypeError, "sequence_length"),
        (lambda: Embedding(0, 8), ValueError, "vocab_size"),
        (lambda: Embedding(10, -3), ValueError, "embedding_dimension"),
        (lambda: Embedding(10, 4).forward(np.array([[1, 10]])), ValueError, "vocab_size=10"),
        (lambda: Embedding(10, 4).forward(np.array([[-1]])), ValueError, "token_ids"),
        (lambda: Embedding(10, 4).forward(np.array([1.0])), TypeError, "token_ids"),
    ],
)
def test_bad_arguments(call, error, word):
    with pytest.raises(error, match=word):
        call()
