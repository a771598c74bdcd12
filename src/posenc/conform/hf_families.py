"""``posenc conform check --against hf`` for RoPE: each case through its own transformers family.

A case names the family whose code it is checked against (``hf_model_type``: Llama for the
per-scaling cases, a preset's model, a user's config). The family's rotary-embedding module is
built from a small config of that family carrying the case's RoPE (:func:`family_config`), and
the family's own module-level rotation function rotates the inputs: GPT-J's
``apply_rotary_pos_emb(x, sin, cos)`` on ``(b, n, h, r)``, Llama 4's complex ``apply_rotary_emb``,
DeepSeek-V3's ``apply_rotary_pos_emb_interleave`` (whose output is in the half layout), and
``apply_rotary_pos_emb(q, k, cos, sin)`` for the others. Nothing of transformers is copied:
its classes and functions are called.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from posenc.hf.families import FAMILIES
from posenc.kernels.rotation import layout_permutation

HEADS = 2  # heads of a case's q/k inputs (posenc.conform writes them)


class NotSupported(Exception):
    """An adapter cannot compute this case (the table shows n/a and the reason)."""


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(torch.float64).cpu().numpy()


def family_config(
    model_type: str, c: dict[str, Any], hf_config: dict[str, Any], positions: torch.Tensor
) -> dict[str, Any]:
    """A small config of transformers family ``model_type`` whose RoPE is the case's ``c``."""
    family = FAMILIES[model_type]
    d, r = c["head_dim"], c["rotary_dim"]
    if model_type == "gptj":  # GPT-J: base 10000, no scaling, rotary_dim in its own key
        if c["base"] != 10000.0 or c["scaling"] is not None:
            raise NotSupported("GPT-J's rotary embedding has base 10000 and no scaling")
        rows = max(c["max_position_embeddings"] or 0, int(positions.max()) + 1)  # one table row per position
        return family.small_config(n_embd=HEADS * d, n_head=HEADS, rotary_dim=r, n_positions=rows)
    kwargs = {
        **hf_config,
        "hidden_size": HEADS * d,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "partial_rotary_factor": r / d,
    }
    if model_type == "deepseek_v3":  # multi-head latent attention: the rotated block has its own size
        kwargs.update(qk_rope_head_dim=r, qk_nope_head_dim=d, rope_interleave=c["layout"] == "interleaved")
    if family.layer_types:  # one rope dict per layer type: the case's in both
        rope = kwargs["rope_parameters"]
        kwargs["rope_parameters"] = {t: dict(rope) for t in ("sliding_attention", "full_attention")}
        kwargs["layer_types"] = ["sliding_attention", "full_attention", "full_attention"]  # 3 small layers
    return family.small_config(**kwargs)


@functools.cache
def _family_code(model_type: str) -> tuple[type, Any]:
    """``(rotary embedding class, modeling module)`` of a transformers family (a model built on
    the meta device shows which class its ``rotary_emb`` is)."""
    import sys

    import transformers  # the optional peer

    family = FAMILIES[model_type]
    with torch.device("meta"):
        model = getattr(transformers, family.model_class)(
            getattr(transformers, family.config_class)(**family.small_config())
        )
    rotary = next(m for name, m in model.named_modules() if name.endswith("rotary_emb"))
    return type(rotary), sys.modules[type(model).__module__]


def _family_rope(
    model_type: str, c: dict[str, Any], hf_config: dict[str, Any], positions: torch.Tensor, dtype: torch.dtype
) -> tuple[Any, torch.Tensor, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """transformers family ``model_type``'s own rotary embedding on ``positions (1, n)``:
    ``(module, cos (n, r/2), sin (n, r/2), rotate)`` with ``rotate(x (h, n, r)) -> (h, n, r)``
    the family's own rotation function, in the case's pair layout."""
    import transformers  # the optional peer

    family = FAMILIES[model_type]
    rotary_class, code = _family_code(model_type)
    config = getattr(transformers, family.config_class)(**family_config(model_type, c, hf_config, positions))
    rotary = rotary_class(config)  # a fresh one per call: dynamic scalings keep state
    x = torch.zeros(1, positions.shape[1], HEADS * c["head_dim"], dtype=dtype)
    layer_type = ("full_attention",) if family.layer_types else ()
    tables = rotary(x, positions, *layer_type)
    half = c["rotary_dim"] // 2
    if family.tables == "cat":
        cos, sin = tables[0][0, :, :half], tables[1][0, :, :half]
    elif family.tables == "repeat":
        cos, sin = tables[0][0, :, ::2], tables[1][0, :, ::2]
    elif family.tables == "sin_cos":
        sin, cos = tables[0][0], tables[1][0]
    else:  # complex
        cos, sin = tables[0].real, tables[0].imag

    def rotate(x: torch.Tensor) -> torch.Tensor:  # x (h, n, r) -> (h, n, r)
        if family.tables == "sin_cos":  # GPT-J: (b, n, h, r), one tensor at a time
            return code.apply_rotary_pos_emb(x.transpose(0, 1)[None], *tables)[0].transpose(0, 1)
        if family.tables == "complex":  # Llama 4: (b, n, h, r), complex tables
            out, _ = code.apply_rotary_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], tables)
            return out[0].transpose(0, 1)
        if model_type == "deepseek_v3" and c["layout"] == "interleaved":  # returns the half layout
            out, _ = code.apply_rotary_pos_emb_interleave(x[None], x[None], *tables)
            return out[0][..., layout_permutation(c["rotary_dim"], src="half", dst="interleaved")]
        out, _ = code.apply_rotary_pos_emb(x[None], x[None], *tables)
        return out[0]

    return rotary, cos, sin, rotate


def rope_arrays(
    model_type: str,
    c: dict[str, Any],
    hf_config: dict[str, Any],
    arrays: dict[str, np.ndarray],
    calls: list[str],
    dtype: torch.dtype,
) -> dict[str, np.ndarray]:
    """A RoPE case's arrays from family ``model_type``'s own code: per call ``cos``/``sin``, the
    rotated ``q_rot``/``k_rot`` (features past the rotary block passed through) and, where the
    module keeps them, ``inv_freq`` and ``attention_scaling``."""
    out: dict[str, np.ndarray] = {}
    r = c["rotary_dim"]
    for call in calls:
        pos = torch.from_numpy(arrays[call + "positions"])[None]
        rotary, cos, sin, rotate = _family_rope(model_type, c, hf_config, pos, dtype)
        rotated = {}
        for name in ("q", "k"):
            x = torch.from_numpy(arrays[call + name]).to(dtype)  # (h, n, d)
            rotated[name] = torch.cat((rotate(x[..., :r]), x[..., r:]), dim=-1)
        out.update({call + "cos": _numpy(cos), call + "sin": _numpy(sin),
                    call + "q_rot": _numpy(rotated["q"]), call + "k_rot": _numpy(rotated["k"])})  # fmt: skip
        suffix = "full_attention_" if FAMILIES[model_type].layer_types else ""
        inv_freq = getattr(rotary, f"{suffix}inv_freq", None)
        if inv_freq is not None:  # GPT-J's module keeps a sin/cos table, not frequencies
            out[call + "inv_freq"] = _numpy(inv_freq)
            out[call + "attention_scaling"] = np.asarray(getattr(rotary, f"{suffix}attention_scaling"))
    return out


__all__ = ["HEADS", "NotSupported", "family_config", "rope_arrays"]
