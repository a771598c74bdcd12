"""RoPE scalings that each break posenc's expectations in one way, as a user's package might: the
suite holds them so that each is seen refused in one line naming it, where it is named, or failing
alone (this directory is put on ``sys.path`` by the tests, and installed nowhere).

- :data:`NANS`: returns NaN frequencies.
- :data:`RAISES`: its function raises.
- :data:`SHORT`: returns one frequency too few (shape ``(dim/2 - 1,)``).
- :data:`READS_FACTOR`: reads ``params["factor"]`` but declares no keys.
- :data:`NEGATIVE_ATTENTION`: an attention scaling of -1.
- :data:`AS_LIST`: frequencies as a list of floats, attention scaling a 0-d tensor (not broken:
  float64-castable).
- :data:`WRONG_ARITY`: its function takes ``(dim, base)`` positionally, not posenc's keywords.
- :data:`GRADLESS`: length-dependent; its function raises when called without gradients (inside a
  model's no-grad evaluation), so it passes every check made where it is named and fails only
  inside a run's evaluation.
- ``fails_on_import``: a module that raises on import (an entry point naming it cannot be loaded).
"""

from __future__ import annotations

import math

import torch

from posenc.core.sincos import inverse_frequencies
from posenc.encoding.rotary.scaling import ORIGINAL, RopeScaling

PAPER = "posenc's tests: a broken scaling"


def nan_frequencies(*, dim: int, base: float, seq_len: int | None, params: dict):
    return torch.full((dim // 2,), math.nan, dtype=torch.float64), 1.0


def raising(*, dim: int, base: float, seq_len: int | None, params: dict):
    raise RuntimeError("the scaling's own bug")


def one_short(*, dim: int, base: float, seq_len: int | None, params: dict):
    return inverse_frequencies(dim, base)[:-1].clone() / float(params["factor"]), 1.0


def reads_factor(*, dim: int, base: float, seq_len: int | None, params: dict):
    return inverse_frequencies(dim, base) / float(params["factor"]), 1.0


def negative_attention(*, dim: int, base: float, seq_len: int | None, params: dict):
    return inverse_frequencies(dim, base) / float(params["factor"]), -1.0


def as_list(*, dim: int, base: float, seq_len: int | None, params: dict):
    inv_freq = inverse_frequencies(dim, base) / float(params["factor"])
    return [float(x) for x in inv_freq], torch.tensor(1.0)


def positional(dim, base):
    return inverse_frequencies(dim, base), 1.0


def gradless(*, dim: int, base: float, seq_len: int | None, params: dict):
    if seq_len is not None and not torch.is_grad_enabled():
        raise RuntimeError("this scaling cannot run without gradients")
    return inverse_frequencies(dim, base) / float(params["factor"]), 1.0


NANS = RopeScaling(nan_frequencies, PAPER, ("factor",))
RAISES = RopeScaling(raising, PAPER, ("factor",))
SHORT = RopeScaling(one_short, PAPER, ("factor",))
READS_FACTOR = RopeScaling(reads_factor, PAPER)
NEGATIVE_ATTENTION = RopeScaling(negative_attention, PAPER, ("factor",))
AS_LIST = RopeScaling(as_list, PAPER, ("factor",))
WRONG_ARITY = RopeScaling(positional, PAPER, ("factor",))
GRADLESS = RopeScaling(gradless, PAPER, ("factor", ORIGINAL), length_dependent=True)

#: name -> scaling, as the tests register them.
BROKEN = {
    "nans": NANS,
    "raises": RAISES,
    "short": SHORT,
    "reads_factor": READS_FACTOR,
    "negative_attention": NEGATIVE_ATTENTION,
}
