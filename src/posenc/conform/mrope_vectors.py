"""M-RoPE cases of the conformance vectors (``posenc conform``): Qwen2-VL and Qwen3-VL.

:mod:`posenc.conform` exports and checks them with its RoPE cases; this module holds what is
particular to M-RoPE: the cases, their golden arrays from the float64 references
(:func:`posenc.reference.mrope_frequencies`, :func:`posenc.reference.pair_rope`), and how
posenc and transformers compute them. A call is a list of ``(t, h, w)`` coordinates (text,
an image and a video laid out as Qwen2-VL's ``get_rope_index`` does); per call the arrays are
``positions (n, 3)``, ``axis (r/2,)`` (the coordinate each pair reads), ``inv_freq (r/2,)``,
``attention_scaling ()`` (1), ``cos``/``sin (n, r/2)`` of ``positions[:, axis] * inv_freq``,
inputs ``q``/``k (2, n, d)`` and their rotations ``q_rot``/``k_rot`` (docs/conformance.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from posenc import reference
from posenc.core.axes import multimodal_positions
from posenc.encoding.rotary.rope_axial import MRoPE

#: name -> (source, config): the text models' M-RoPE of Qwen2-VL / Qwen2.5-VL and Qwen3-VL.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mrope-qwen2-vl": (
        "Qwen2-VL / Qwen2.5-VL (M-RoPE, mrope_section [16, 24, 24])",
        {"head_dim": 128, "base": 1000000.0, "mrope_section": [16, 24, 24], "mrope_interleaved": False,
         "layout": "half"},
    ),
    "mrope-qwen3-vl": (
        "Qwen3-VL (interleaved M-RoPE, mrope_section [24, 20, 20])",
        {"head_dim": 128, "base": 5000000.0, "mrope_section": [24, 20, 20], "mrope_interleaved": True,
         "layout": "half"},
    ),
}  # fmt: skip


def calls() -> list[list[list[int]]]:
    """Coordinates per call: a short multimodal prompt (text, image, text, video, text), and a
    long one sampled (text up to position 4000, a 16 x 16 image after it, text past it)."""
    short = multimodal_positions([5, (1, 4, 6), 3, (2, 3, 3), 4])[0]
    long = multimodal_positions([4000, (1, 16, 16), 40])[0]
    rows = (
        list(range(0, 8)) + list(range(3990, 4000)) + list(range(4000, 4256, 17)) + list(range(4256, 4296, 9))
    )
    return [short.tolist(), long[rows].tolist()]


def hf_config(config: dict[str, Any]) -> dict[str, Any]:
    """The case as the rotary part of a transformers-5 Qwen-VL text config."""
    rope = {"rope_type": "default", "rope_theta": config["base"], "mrope_section": config["mrope_section"]}
    if config["mrope_interleaved"]:
        rope["mrope_interleaved"] = True
    model = "qwen3_vl_text" if config["mrope_interleaved"] else "qwen2_vl_text"
    return {"model_type": model, "head_dim": config["head_dim"], "rope_parameters": rope}


def golden(config: dict[str, Any], positions: list[list[list[int]]], rng: np.random.Generator, heads: int):
    """The float64 reference arrays of an M-RoPE case (inputs included)."""
    inv_freq, axis = reference.mrope_frequencies(
        config["head_dim"], config["base"], config["mrope_section"], interleaved=config["mrope_interleaved"]
    )
    out: dict[str, np.ndarray] = {}
    for index, call in enumerate(positions):
        pos = np.asarray(call, dtype=np.int64)  # (n, 3)
        angles = pos[:, axis].astype(np.float64) * inv_freq  # (n, r/2)
        q, k = (rng.standard_normal((heads, len(pos), config["head_dim"])) for _ in range(2))
        rotate = {"inv_freq": inv_freq, "axis": axis, "layout": config["layout"]}
        out.update({
            f"call{index}.positions": pos, f"call{index}.axis": axis, f"call{index}.inv_freq": inv_freq,
            f"call{index}.attention_scaling": np.asarray(1.0),
            f"call{index}.cos": np.cos(angles), f"call{index}.sin": np.sin(angles),
            f"call{index}.q": q, f"call{index}.k": k,
            f"call{index}.q_rot": reference.pair_rope(q, pos, **rotate),
            f"call{index}.k_rot": reference.pair_rope(k, pos, **rotate),
        })  # fmt: skip
    return out


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(torch.float64).cpu().numpy()


def posenc_arrays(
    config: dict[str, Any], arrays: dict[str, np.ndarray], calls_: list[str], dtype: torch.dtype
) -> dict[str, np.ndarray]:
    """posenc's M-RoPE (``posenc.build("mrope", ...)``): its tables and fused rotation."""
    enc = MRoPE(MRoPE.Config(**{key: config[key] for key in MRoPE.Config.field_names()}))
    out: dict[str, np.ndarray] = {}
    for call in calls_:
        pos = torch.from_numpy(arrays[call + "positions"])[None]  # (1, n, 3)
        cos, sin = enc.cos_sin(pos, dtype)
        q, k = (torch.from_numpy(arrays[call + name]).to(dtype)[None] for name in ("q", "k"))
        q_rot, k_rot = enc.rotate(q, k, q_positions=pos, k_positions=pos)
        out.update({call + "inv_freq": _numpy(enc.inv_freq), call + "attention_scaling": np.asarray(1.0),
                    call + "cos": _numpy(cos[0]), call + "sin": _numpy(sin[0]),
                    call + "q_rot": _numpy(q_rot[0]), call + "k_rot": _numpy(k_rot[0])})  # fmt: skip
    return out


def hf_arrays(
    config: dict[str, Any], arrays: dict[str, np.ndarray], calls_: list[str], dtype: torch.dtype
) -> dict[str, np.ndarray]:
    """transformers: the Qwen2-VL text rotary embedding (Qwen3-VL's for interleaved sections) on
    ``(3, 1, n)`` position ids, and the model file's ``apply_rotary_pos_emb``."""
    if config["mrope_interleaved"]:
        from transformers.models.qwen3_vl import modeling_qwen3_vl
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

        module: Any = modeling_qwen3_vl
        text_cls: Any = Qwen3VLTextConfig
        rotary_cls: Any = modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding
    else:
        from transformers.models.qwen2_vl import modeling_qwen2_vl
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

        module, text_cls, rotary_cls = (
            modeling_qwen2_vl,
            Qwen2VLTextConfig,
            modeling_qwen2_vl.Qwen2VLRotaryEmbedding,
        )
    spec = hf_config(config)
    text = text_cls(hidden_size=2 * config["head_dim"], num_attention_heads=2, num_key_value_heads=2,
                head_dim=spec["head_dim"], rope_parameters=spec["rope_parameters"])  # fmt: skip
    rotary = rotary_cls(text)
    half = config["head_dim"] // 2
    out: dict[str, np.ndarray] = {}
    for call in calls_:
        pos = torch.from_numpy(arrays[call + "positions"]).T[:, None]  # (3, 1, n)
        cos, sin = rotary(torch.zeros(1, pos.shape[-1], dtype=dtype), pos)  # (1, n, d), in dtype
        q, k = (torch.from_numpy(arrays[call + name]).to(dtype)[None] for name in ("q", "k"))
        q_rot, k_rot = module.apply_rotary_pos_emb(q, k, cos, sin)
        out.update({call + "inv_freq": _numpy(rotary.inv_freq), call + "attention_scaling": np.asarray(rotary.attention_scaling),
                    call + "cos": _numpy(cos[0, :, :half]), call + "sin": _numpy(sin[0, :, :half]),
                    call + "q_rot": _numpy(q_rot[0]), call + "k_rot": _numpy(k_rot[0])})  # fmt: skip
    return out


__all__ = ["CASES", "calls", "golden", "hf_arrays", "hf_config", "posenc_arrays"]
