"""A widely shared tutorial's NumPy classes, runnable as written there.

The tutorial "Positional Encoding: Teaching the Model Word Order" uses
``from src.layers import Embedding, PositionalEncoding``; here the same usage
works with ``from posenc.reference.tutorial import Embedding, PositionalEncoding``.
``python -m posenc.reference.tutorial`` (the tutorial's ``python -m src.layers``) runs its
usage example (shapes and value ranges) and its "try it yourself" block:
:func:`usage_example` and :func:`try_it_yourself` return what they print.

Axis legend: b batch, n sequence, d embedding_dimension, v vocabulary.

These are plain float64 NumPy (no torch), like the rest of :mod:`posenc.reference`,
and agree with :func:`posenc.reference.absolute.sinusoidal` and ``posenc.build("sinusoidal")``.
"""

from __future__ import annotations

import numbers

import numpy as np

from posenc.core.errors import PosencError, PosencTypeError

__all__ = ["Embedding", "PositionalEncoding", "try_it_yourself", "usage_example"]


def _positive_int(name: str, value: object, *, even: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PosencTypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
    if value < 1 or (even and value % 2):
        kind = "a positive even integer" if even else "a positive integer (>= 1)"
        raise PosencError(f"{name} must be {kind}, got {value}")
    return int(value)


class PositionalEncoding:
    """Sinusoidal encoding of "Attention Is All You Need" (sec. 3.5), precomputed.

    Attributes:
        max_sequence_length: number of positions precomputed.
        embedding_dimension: d (even).
        encoding_table: ``(max_sequence_length, embedding_dimension)`` float64 array with
            ``PE[pos, 2i] = sin(pos / 10000^(2i/d))`` and ``PE[pos, 2i+1] = cos(...)``.
    """

    def __init__(self, max_sequence_length: int, embedding_dimension: int) -> None:
        self.max_sequence_length = _positive_int("max_sequence_length", max_sequence_length)
        self.embedding_dimension = _positive_int("embedding_dimension", embedding_dimension, even=True)
        self.encoding_table = self._compute_encoding()

    def _compute_encoding(self) -> np.ndarray:
        positions = np.arange(self.max_sequence_length, dtype=np.float64)[:, None]  # (n, 1)
        two_i = np.arange(0, self.embedding_dimension, 2, dtype=np.float64)  # (d/2,)
        divisors = 10000.0 ** (two_i / self.embedding_dimension)  # 1, 10, 100, 1000 for d = 8
        angles = positions / divisors  # (n, d/2)
        table = np.zeros((self.max_sequence_length, self.embedding_dimension))
        table[:, 0::2] = np.sin(angles)  # even dimensions
        table[:, 1::2] = np.cos(angles)  # odd dimensions
        return table

    def get_encoding(self, sequence_length: int) -> np.ndarray:
        """Rows ``0 .. sequence_length-1`` of the table: ``(sequence_length, d)``.

        Raises:
            ValueError: if ``sequence_length`` exceeds ``max_sequence_length`` or is negative.
        """
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, numbers.Integral):
            raise PosencTypeError(
                f"sequence_length must be an integer, got {type(sequence_length).__name__} {sequence_length!r}"
            )
        if sequence_length < 0:
            raise PosencError(f"sequence_length must be >= 0, got {sequence_length}")
        if sequence_length > self.max_sequence_length:
            raise PosencError(
                f"Sequence length {sequence_length} exceeds maximum {self.max_sequence_length} "
                f"(max_sequence_length)"
            )
        return self.encoding_table[:sequence_length]


class Embedding:
    """Token-embedding lookup table, as in the tutorial's ``src.layers.Embedding``.

    Attributes:
        vocab_size: v.
        embedding_dimension: d.
        weights: ``(vocab_size, embedding_dimension)`` float64, ``N(0, 1/d)`` so each
            row has norm about 1 (seeded by ``seed`` for reproducibility).
    """

    def __init__(self, vocab_size: int, embedding_dimension: int, *, seed: int | None = 0) -> None:
        self.vocab_size = _positive_int("vocab_size", vocab_size)
        self.embedding_dimension = _positive_int("embedding_dimension", embedding_dimension)
        rng = np.random.default_rng(seed)
        self.weights = rng.standard_normal((self.vocab_size, self.embedding_dimension)) / np.sqrt(
            self.embedding_dimension
        )

    def forward(self, token_ids: np.ndarray) -> np.ndarray:
        """``token_ids (...)`` integers in ``[0, vocab_size)`` -> ``(..., d)`` embeddings."""
        ids = np.asarray(token_ids)
        if ids.dtype.kind not in "iu":
            raise PosencTypeError(f"token_ids must be integers, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise PosencError(
                f"token_ids must be in [0, {self.vocab_size - 1}] (vocab_size={self.vocab_size}), "
                f"got range [{ids.min()}, {ids.max()}]"
            )
        return self.weights[ids]

    __call__ = forward


# ---------------------------------------------------------------------------
# The tutorial's two runnable blocks, as functions (``python -m posenc.reference.tutorial``).
# ---------------------------------------------------------------------------


def cosine_sim(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors, as the tutorial defines it."""
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def usage_example(*, seed: int | None = 0) -> dict:
    """The tutorial's "Usage Example": vocabulary 1000, d 128, 512 positions, tokens [[42, 156, 89]].

    Returns the arrays, their ``shapes`` (token embeddings, position encodings, sum) and
    value ranges, and ``lines``: what the tutorial's block prints. The tutorial does not
    say how its ``Embedding`` is initialised; this one draws ``N(0, 1/d)`` from ``seed``.
    """
    embedding = Embedding(1000, 128, seed=seed)
    pos_encoding = PositionalEncoding(512, 128)
    token_ids = np.array([[42, 156, 89]])  # (1, 3)
    token_embeds = embedding.forward(token_ids)  # (1, 3, 128)
    pos_encodes = pos_encoding.get_encoding(3)  # (3, 128)
    final_embeds = token_embeds + pos_encodes  # (1, 3, 128): broadcast over the batch
    token_range = (float(token_embeds.min()), float(token_embeds.max()))
    pos_range = (float(pos_encodes.min()), float(pos_encodes.max()))
    lines = [
        f"Token embedding range: [{token_range[0]:.3f}, {token_range[1]:.3f}]",
        f"Position encoding range: [{pos_range[0]:.3f}, {pos_range[1]:.3f}]",
    ]
    return {
        "token_embeds": token_embeds,
        "pos_encodes": pos_encodes,
        "final_embeds": final_embeds,
        "shapes": [token_embeds.shape, pos_encodes.shape, final_embeds.shape],
        "token_range": token_range,
        "pos_range": pos_range,
        "lines": lines,
    }


def try_it_yourself() -> dict:
    """The tutorial's "Try It Yourself": 10 positions at d 128, and cosine similarity to position 0.

    Returns ``encodings (10, 128)``, ``similarities`` (position 0 against 0..9) and
    ``lines``: what the tutorial's block prints (positions 1, 5 and 9).
    """
    pe = PositionalEncoding(max_sequence_length=512, embedding_dimension=128)
    encodings = pe.get_encoding(10)  # positions 0..9
    sims = [cosine_sim(encodings[0], encodings[k]) for k in range(10)]
    lines = [
        f"Shape: {encodings.shape}",
        f"Position 0: {encodings[0, :4]}...",
        f"Position 1: {encodings[1, :4]}...",
        f"Similarity pos0-pos1: {sims[1]:.3f}",
        f"Similarity pos0-pos5: {sims[5]:.3f}",
        f"Similarity pos0-pos9: {sims[9]:.3f}",
    ]
    return {"encodings": encodings, "similarities": sims, "lines": lines}
