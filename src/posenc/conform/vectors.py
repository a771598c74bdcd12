"""Golden test vectors for RoPE and position biases, and a checker: ``posenc conform export|check``.

Ports of a model to another runtime (MLX, llama.cpp, vLLM, ExLlama, ...) keep rewriting RoPE
scalings and comparing against transformers by hand. :func:`export` writes, from posenc's
NumPy float64 references (:mod:`posenc.reference`), the numbers a correct implementation must
give, for every RoPE scaling in :data:`posenc.encoding.rotary.scaling.BUILTIN_SCALINGS` (its ``example``) and
every model preset in :data:`posenc.presets.PRESETS` (each distinct RoPE layer of its schedule,
ALiBi slopes and bias rows, T5 buckets), and the M-RoPE of Qwen2-VL and Qwen3-VL
(:mod:`posenc.conform.mrope_vectors`: ``(t, h, w)`` coordinates per token). :func:`check` runs an implementation (an adapter:
posenc itself, or transformers) on the same inputs and compares, element by element, within
tolerances that depend on the dtype and, for angles, on the position (see :func:`bound`).

Files (schema ``posenc.conform/1``, documented in docs/conformance.md)::

    DIR/manifest.json          schema, tolerances, and per case: name, kind, source, config,
                               the transformers config (when transformers can express it), the
                               calls (positions) and the names of its arrays
    DIR/cases/NAME.npz         the arrays (float64; int64 for positions and buckets)
    DIR/cases/NAME.json        the same arrays as nested JSON lists (exact float64 round trip)

A RoPE call is a set of positions ``p``; its length is ``seq_len = max(p) + 1`` (what
transformers passes to length-dependent scalings). Per call: ``inv_freq (r/2,)``,
``attention_scaling ()``, ``cos``/``sin (n, r/2)`` = ``cos/sin(p * inv_freq) * attention_scaling``,
inputs ``q``/``k (2, n, d)`` and the rotated ``q_rot``/``k_rot (2, n, d)`` in the case's pair
layout, features past ``r`` passed through. Calls straddle the original context ``L0``
(``seq_len = L0`` and ``L0 + 1``: the dynamic-NTK and LongRoPE switch) and go well past it.

The module's parts: the cases and their golden numbers (:mod:`posenc.conform.vector_cases`), the
files (:mod:`posenc.conform.vector_files`); here, the tolerance rule, the adapters and the checker.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from posenc.conform import hf_families as conform_hf
from posenc.conform import mrope_vectors as conform_mrope
from posenc.conform.vector_cases import (
    BASE,
    CONTEXT,
    DTYPES,
    HEAD_DIM,
    HEADS,
    MAX_MANIFEST_BYTES,
    MROPE_MODEL_TYPES,
    SCHEMA,
    SEED,
    TOLERANCES,
    Case,
    NotSupported,
    cases,
    config_cases,
    golden,
    rope_case,
    text_part,
)
from posenc.conform.vector_files import export, load
from posenc.core.checks import check_choice
from posenc.core.errors import PosencError
from posenc.encoding.bias import ALiBi, t5_relative_position_bucket
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.encoding.rotary.rope import RoPE
from posenc.hf.families import FAMILIES, family_available
from posenc.registry import build

# ---------------------------------------------------------------------------
# Tolerances: one rule, element-wise.
# ---------------------------------------------------------------------------


def bound(quantity: str, arrays: dict[str, np.ndarray], call: str, dtype: str) -> np.ndarray:
    """The allowed ``|got - want|`` of ``call + quantity`` (element-wise, broadcast to its shape).

    With ``s`` the attention scaling, ``p`` the position, ``theta`` the golden inv_freq:

    * ``inv_freq``, ``attention_scaling``: ``frequency * |want|``;
    * ``cos``, ``sin``: ``s * (atol + angle * |p * theta_i|)``;
    * ``q_rot``, ``k_rot``: ``2 s max|x_row| (atol + angle * |p| * max(theta))`` per row;
    * M-RoPE: ``p`` is the coordinate pair ``i`` reads, ``positions[:, axis[i]]``;
    * ``slopes``, ``bias``: ``rtol * |want| + atol``; ``bucket``: 0 (exact).
    """
    tol = TOLERANCES[check_choice("dtype", dtype, tuple(TOLERANCES))]
    want = arrays[call + quantity]
    if quantity in ("inv_freq", "attention_scaling"):
        return tol["frequency"] * np.abs(want)
    if quantity in ("cos", "sin", "q_rot", "k_rot"):
        scale = float(arrays[call + "attention_scaling"])
        positions = np.abs(arrays[call + "positions"].astype(np.float64))
        theta = arrays[call + "inv_freq"]
        # (n, 1), or (n, r/2) for M-RoPE, where pair i reads coordinate axis[i] of (t, h, w)
        per_pair = positions[:, arrays[call + "axis"]] if positions.ndim == 2 else positions[:, None]
        if quantity in ("cos", "sin"):
            return scale * (tol["atol"] + tol["angle"] * per_pair * theta)  # (n, r/2)
        size = np.abs(arrays[call + quantity[0]]).max(axis=-1, keepdims=True)  # (h, n, 1)
        largest = per_pair.max(axis=-1, keepdims=True)  # (n, 1)
        return 2 * scale * size * (tol["atol"] + tol["angle"] * largest * theta.max())
    if quantity == "bucket":
        return np.zeros(want.shape)
    return tol["rtol"] * np.abs(want) + tol["atol"]


# ---------------------------------------------------------------------------
# Adapters: run an implementation on a case's inputs.
# ---------------------------------------------------------------------------


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(torch.float64).cpu().numpy() if tensor.is_floating_point() else tensor.numpy()


def _calls(arrays: dict[str, np.ndarray]) -> list[str]:
    return sorted({key.split(".")[0] + "." for key in arrays if key.startswith("call")})


def posenc_adapter(
    entry: dict[str, Any], arrays: dict[str, np.ndarray], dtype: torch.dtype
) -> dict[str, np.ndarray]:
    """posenc's own encodings: RoPE tables and rotation (fused kernel), ALiBi, T5 buckets."""
    c, out = entry["config"], {}
    if entry["kind"] == "rope":
        enc = cast(RoPE, build("rope", **{k: c[k] for k in ("head_dim", "rotary_dim", "base", "layout", "scaling")},
                    max_position_embeddings=c["max_position_embeddings"]))  # fmt: skip
        for call in _calls(arrays):
            pos = torch.from_numpy(arrays[call + "positions"])[None]  # (1, n)
            inv_freq, scale = enc.frequencies(int(pos.max()))
            cos, sin = enc.cos_sin(pos, dtype, inv_freq=inv_freq, attention_scaling=scale)
            q, k = (torch.from_numpy(arrays[call + name]).to(dtype)[None] for name in ("q", "k"))
            q_rot, k_rot = enc.rotate(q, k, q_positions=pos, k_positions=pos)
            out.update({call + "inv_freq": _numpy(inv_freq), call + "attention_scaling": np.asarray(scale),
                        call + "cos": _numpy(cos[0]), call + "sin": _numpy(sin[0]),
                        call + "q_rot": _numpy(q_rot[0]), call + "k_rot": _numpy(k_rot[0])})  # fmt: skip
    elif entry["kind"] == "alibi":
        alibi = cast(ALiBi, build("alibi", num_heads=c["num_heads"], bidirectional=c["bidirectional"]))
        q_pos, k_pos = (torch.from_numpy(arrays[name]) for name in ("q_positions", "k_positions"))
        heads = torch.arange(c["num_heads"])[:, None, None]
        bias = alibi.bias_fn(q_pos[None, :, None], k_pos[None, None, :], heads)  # (h, i, j), float64
        out["slopes"] = _numpy(alibi.slopes.to(dtype))
        out["bias"] = _numpy(bias.to(dtype))
    elif entry["kind"] == "mrope":
        out = conform_mrope.posenc_arrays(c, arrays, _calls(arrays), dtype)
    elif entry["kind"] == "t5":
        rel = torch.from_numpy(arrays["relative_position"])
        out["bucket"] = _numpy(t5_relative_position_bucket(
            rel, bidirectional=c["bidirectional"], num_buckets=c["num_buckets"], max_distance=c["max_distance"]
        ))  # fmt: skip
    return out


def _require_family(model_type: str) -> None:
    """Refuse (not computed) a case whose family the installed transformers predates."""
    if not family_available(model_type):
        family = FAMILIES[model_type]
        raise NotSupported(
            f"{family.label} is verified from transformers {family.since} on ({family.since_why})"
        )


def hf_adapter(
    entry: dict[str, Any], arrays: dict[str, np.ndarray], dtype: torch.dtype
) -> dict[str, np.ndarray]:
    """transformers: each RoPE case through its own family's rotary embedding module and rotation
    function (``hf_model_type``: Llama for the per-scaling cases, the preset's model for presets,
    the config's for ``export --hf-config``), BLOOM's ALiBi slopes, T5's buckets."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # the optional peer
    from transformers.models.t5.modeling_t5 import T5Attention

    c, out = entry["config"], {}
    if entry["kind"] == "rope":
        model_type = entry.get("hf_model_type")
        if entry.get("hf_config") is None:
            raise NotSupported(f"transformers has no rope_type {rope_scaling.split(c['scaling'])[0]!r}")
        if model_type not in FAMILIES:
            raise NotSupported(f"no verified transformers family for this case ({model_type!r})")
        _require_family(model_type)
        hf_config = json.loads(json.dumps(entry["hf_config"]))
        out.update(conform_hf.rope_arrays(model_type, c, hf_config, arrays, _calls(arrays), dtype))
    elif entry["kind"] == "alibi":
        alibi = build_alibi_tensor(torch.ones(1, 2), c["num_heads"], torch.float32)  # slope_h * key position
        out["slopes"] = _numpy(alibi[:, 0, 1])
        # bias rows n/a: BLOOM adds slope * key position, the same up to a per-row constant
    elif entry["kind"] == "mrope":
        _require_family("qwen2_vl_text")
        out = conform_mrope.hf_arrays(c, arrays, _calls(arrays), dtype)
    elif entry["kind"] == "t5":
        rel = torch.from_numpy(arrays["relative_position"])
        out["bucket"] = _numpy(T5Attention._relative_position_bucket(
            rel, bidirectional=c["bidirectional"], num_buckets=c["num_buckets"], max_distance=c["max_distance"]
        ))  # fmt: skip
    return out


ADAPTERS: dict[str, Callable[[dict[str, Any], dict[str, np.ndarray], torch.dtype], dict[str, np.ndarray]]] = {
    "posenc": posenc_adapter,
    "hf": hf_adapter,
}


# ---------------------------------------------------------------------------
# Checking.
# ---------------------------------------------------------------------------


@dataclass
class Row:
    case: str
    quantity: str
    max_error: float  # max |got - want| over the case's calls (nan: not computed)
    worst: float  # max |got - want| / allowed (<= 1 passes)
    status: str  # "ok" | "FAIL" | "n/a"
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "quantity": self.quantity, "max_error": self.max_error,
                "worst": self.worst, "status": self.status, "note": self.note}  # fmt: skip


QUANTITIES = {
    "rope": ("inv_freq", "attention_scaling", "cos", "sin", "q_rot", "k_rot"),
    "mrope": ("inv_freq", "cos", "sin", "q_rot", "k_rot"),
    "alibi": ("slopes", "bias"),
    "t5": ("bucket",),
}


def check(
    directory: str | Path, *, against: str = "posenc", dtype: str = "float32", only: tuple[str, ...] = ()
) -> list[Row]:
    """Run adapter ``against`` on every case of an export (or the cases named in ``only``) in
    ``dtype``; one :class:`Row` per case and quantity."""
    adapter = ADAPTERS[check_choice("against", against, tuple(ADAPTERS))]
    torch_dtype = DTYPES[check_choice("dtype", dtype, tuple(DTYPES))]
    manifest, arrays_of = load(directory)
    names = [entry["name"] for entry in manifest["cases"]]
    for name in only:
        check_choice("case", name, tuple(names))
    rows = []
    for entry in manifest["cases"]:
        if only and entry["name"] not in only:
            continue
        arrays = arrays_of(entry["name"])
        try:
            got, reason = adapter(entry, arrays, torch_dtype), ""
        except NotSupported as exc:
            got, reason = {}, str(exc)
        calls = _calls(arrays) if entry["kind"] in ("rope", "mrope") else [""]
        for quantity in QUANTITIES[entry["kind"]]:
            keys = [call + quantity for call in calls]
            if not all(key in got for key in keys):
                rows.append(Row(entry["name"], quantity, math.nan, math.nan, "n/a", reason or "not computed"))
                continue
            error, worst = 0.0, 0.0
            for call, key in zip(calls, keys):
                diff = np.abs(np.asarray(got[key], dtype=np.float64) - arrays[key])
                if diff.shape != arrays[key].shape:
                    raise PosencError(
                        f"{entry['name']}: {key} has shape {diff.shape}, expected {arrays[key].shape}"
                    )
                allowed = np.broadcast_to(bound(quantity, arrays, call, dtype), diff.shape)
                error = max(error, float(diff.max(initial=0.0)))
                ratio = np.where(
                    allowed > 0, diff / np.where(allowed > 0, allowed, 1.0), np.where(diff > 0, np.inf, 0.0)
                )
                worst = max(worst, float(ratio.max(initial=0.0)))
            rows.append(Row(entry["name"], quantity, error, worst, "ok" if worst <= 1.0 else "FAIL"))
    return rows


__all__ = [
    "ADAPTERS",
    "SCHEMA",
    "TOLERANCES",
    "Case",
    "NotSupported",
    "Row",
    "bound",
    "cases",
    "check",
    "config_cases",
    "export",
    "golden",
    "load",
]


__all__ = [
    "ADAPTERS",
    "BASE",
    "CONTEXT",
    "DTYPES",
    "HEADS",
    "HEAD_DIM",
    "MAX_MANIFEST_BYTES",
    "MROPE_MODEL_TYPES",
    "QUANTITIES",
    "SCHEMA",
    "SEED",
    "TOLERANCES",
    "Case",
    "NotSupported",
    "Row",
    "bound",
    "cases",
    "check",
    "config_cases",
    "export",
    "golden",
    "hf_adapter",
    "load",
    "posenc_adapter",
    "rope_case",
    "text_part",
]
