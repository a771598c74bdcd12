"""Hugging Face: configs <-> posenc RoPE configs, and posenc's encodings inside a loaded model.

* :func:`from_hf` / :func:`to_hf` / :func:`rope_from_hf` (:mod:`posenc.hf.config`): read a
  ``config.json`` (transformers 4 or 5 layout) into posenc RoPE arguments and back.
* :func:`apply` / :func:`remove` (:mod:`posenc.hf.model`): give a loaded transformers model
  posenc's RoPE (its cos/sin tables, computed from integer positions in float64, which the
  model's own attention code rotates with: the plain PyTorch path, not posenc's fused CPU
  kernel; any scaling, changeable after loading), a bias encoding through transformers'
  attention-function interface (posenc's row-chunked SDPA), or a per-layer schedule::

      handle = posenc.hf.apply(model, scaling={"rope_type": "yarn", "factor": 4.0})
      handle.set_scaling(None)          # later, without reloading
      posenc.hf.apply(model, "alibi")   # ALiBi in every layer (grouped-query attention included)

transformers is an optional peer: nothing here imports it until a model is given.
"""

from posenc.hf.config import (
    DEFAULT_THETA,
    ORIGINAL,
    UNSUPPORTED_ROPE_TYPES,
    config_dict,
    from_hf,
    rope_from_hf,
    to_hf,
)
from posenc.hf.families import FAMILIES, TESTED_TRANSFORMERS
from posenc.hf.model import ATTENTION, Applied, RotaryTables, apply, own_rope, remove

__all__ = [
    "ATTENTION",
    "DEFAULT_THETA",
    "ORIGINAL",
    "Applied",
    "FAMILIES",
    "RotaryTables",
    "TESTED_TRANSFORMERS",
    "UNSUPPORTED_ROPE_TYPES",
    "apply",
    "config_dict",
    "from_hf",
    "own_rope",
    "remove",
    "rope_from_hf",
    "to_hf",
]
