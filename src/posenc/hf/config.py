"""Hugging Face configs <-> posenc RoPE configs (``posenc.hf.from_hf`` / ``posenc.hf.to_hf``).

A Hugging Face ``config.json`` spreads RoPE over several places, and two
generations of transformers use different layouts:

* transformers 4.x: ``rope_scaling = {"type"|"rope_type": ..., "factor": ...}`` (or
  ``null``) with ``rope_theta`` and ``partial_rotary_factor`` at the top level;
* transformers 5.x: ``rope_parameters = {"rope_type": ..., "rope_theta": ..., ...}``;
* both: ``head_dim`` (else ``hidden_size // num_attention_heads``),
  ``max_position_embeddings`` and, in Phi-3 style configs, a top-level
  ``original_max_position_embeddings`` that wins over the one in the rope dict.

:func:`from_hf` reads any of these into posenc RoPE keyword arguments
(``head_dim, base, partial_rotary_factor, scaling, max_position_embeddings``,
the fields of :class:`posenc.encoding.rotary.rope.RoPEConfig`); :func:`to_hf` writes them back,
in the transformers-5 layout by default or in the layout of a given HF config
(``like=``), so that ``to_hf(from_hf(cfg), like=cfg) == cfg`` for every config
posenc can represent. The posenc ``scaling`` dict uses Hugging Face's own keys
(see :mod:`posenc.encoding.rotary.scaling`), so the mapping is one to one; what HF infers
from ``max_position_embeddings`` is inferred the same way by
:func:`posenc.encoding.rotary.scaling.resolve`.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
from typing import Any

from posenc.core import untrusted
from posenc.core.checks import check_float, check_int
from posenc.core.errors import PosencError, PosencTypeError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.registry import build

ORIGINAL = rope_scaling.ORIGINAL
DEFAULT_THETA = 10000.0  # transformers' RotaryEmbeddingConfigMixin.default_theta
_NOT_PARAMS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
# rope types of transformers' ROPE_INIT_FUNCTIONS that posenc does not implement, with what they
# are (tests/hf/test_hf_parity.py checks that every other one has posenc's parity).
UNSUPPORTED_ROPE_TYPES = {
    "proportional": "Gemma 4's proportional RoPE (a partial share of the head rotated, full-width "
    "tables with zero frequencies for the rest, per-layer configs)",
}


MAX_CONFIG_BYTES = 16 << 20  # a model's config.json is a few KB; never read an endless file whole
MAX_CONFIG_DEPTH = 32  # a config.json nests a few levels (a text_config, its rope dict, per-layer dicts)
#: The largest head size a config may give: real models use 64 .. 512; a table row per pair of
#: dimensions is allocated from it (``head_dim: 1e12`` asked for 4 TB), so it is bounded as
#: ``posenc rope inspect --head-dim`` is.
MAX_HEAD_DIM = 1 << 16


def read_config_file(path: str | os.PathLike) -> Any:
    """The JSON in file ``path``, read at most :data:`MAX_CONFIG_BYTES` (``/dev/zero`` fails fast).

    Raises OSError (missing, a directory, a FIFO or a device: regular files only, never a blocking
    open; unreadable) or PosencError naming the file (too large, nested deeper than
    :data:`MAX_CONFIG_DEPTH`, checked before parsing; not UTF-8, not JSON).
    """
    with untrusted.open_regular(path) as handle:
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    name = os.fsdecode(path)
    if len(raw) > MAX_CONFIG_BYTES:
        raise PosencError(f"{name!r} is larger than {MAX_CONFIG_BYTES >> 20} MiB; not a model config.json")
    try:
        config = untrusted.loads(raw.decode("utf-8"), max_depth=MAX_CONFIG_DEPTH)
    except UnicodeDecodeError as exc:
        raise PosencError(f"{name!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except untrusted.TooDeep:
        raise PosencError(_too_deep(name)) from None
    except json.JSONDecodeError as exc:
        raise PosencError(f"{name!r} is not valid JSON: {exc}") from None
    except ValueError:  # an integer of more digits than Python converts
        digits = getattr(sys, "get_int_max_str_digits", lambda: 4300)()  # Python >= 3.10.7
        raise PosencError(
            f"{name!r} holds a number of more than {digits} digits; not a model config.json"
        ) from None
    check_depth(config, name)
    return config


def _too_deep(name: str) -> str:
    return f"{name!r} nests lists or objects more than {MAX_CONFIG_DEPTH} deep; not a model config.json"


def check_depth(config: Any, name: str = "config") -> None:
    """Refuse ``config`` when its lists and dicts nest deeper than :data:`MAX_CONFIG_DEPTH` (read
    without recursion, so a hostile file cannot exhaust the stack)."""
    level: list[Any] = [config]
    for _ in range(MAX_CONFIG_DEPTH + 1):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())
            if isinstance(child, (dict, list))
        ]
        if not level:
            return
    raise PosencError(_too_deep(name))


def _as_dict(config: Any) -> dict[str, Any]:
    """A dict, a path to config.json, or a transformers config object -> a plain dict copy."""
    if isinstance(config, (str, os.PathLike)):
        config = read_config_file(config)
    elif not isinstance(config, dict) and hasattr(config, "to_dict"):
        config = config.to_dict()
    if not isinstance(config, dict):
        raise PosencTypeError(
            f"config must be a dict, a path to config.json or an HF config, got {type(config).__name__}"
        )
    check_depth(config)
    return copy.deepcopy(config)


_ALIASES = {
    "hidden_size": "n_embd",
    "num_attention_heads": "n_head",
    "max_position_embeddings": "n_positions",
}


def config_dict(config: Any) -> dict[str, Any]:
    """A config (dict, path to ``config.json``, or transformers config object) as a plain dict,
    with the names GPT-J style configs alias spelled out (``hidden_size`` for ``n_embd``, ...)."""
    cfg = _as_dict(config)
    for name, alias in _ALIASES.items():
        value = cfg.get(name)
        if value is None:
            value = getattr(config, name, None) if not isinstance(config, (dict, str, os.PathLike)) else None
        if value is None:
            value = cfg.get(alias)
        if value is not None:
            cfg[name] = value
    return cfg


def _hf_original(rope_type: Any) -> str | None:
    """Where HF reads the original context of ``rope_type`` (its registry entry's ``hf_original``)."""
    spec = rope_scaling.ROPE_SCALINGS.get(rope_type)
    return None if spec is None else spec.hf_original


def _rope_key(config: dict[str, Any]) -> str:
    """Which key holds the rope dict: HF lets a truthy ``rope_scaling`` win over ``rope_parameters``."""
    if config.get("rope_scaling"):
        return "rope_scaling"
    if "rope_parameters" in config or "rope_scaling" not in config:
        return "rope_parameters"
    return "rope_scaling"


def from_hf(config: Any, *, layer_type: str | None = None) -> dict[str, Any]:
    """Read a Hugging Face model config into posenc RoPE keyword arguments.

    Args:
        config: a config dict (as in ``config.json``), a path to one, or a
            ``transformers.PretrainedConfig``.
        layer_type: for configs with one rope dict per layer type (Gemma 3:
            ``rope_parameters = {"sliding_attention": {...}, "full_attention": {...}}``),
            which one to read.

    Returns:
        ``{"head_dim", "base", "partial_rotary_factor", "scaling", "max_position_embeddings"}``;
        ``posenc.build("rope", **from_hf(cfg))`` builds the matching encoding. ``scaling``
        is None for plain RoPE, else ``{"rope_type": ..., **HF rope keys}`` with HF's
        legacy ``"type"`` renamed, a Phi-3 top-level ``original_max_position_embeddings``
        moved in (HF gives it priority), and what HF infers from ``max_position_embeddings``
        made explicit (:func:`posenc.encoding.rotary.scaling.resolve`); :func:`to_hf` leaves those
        out again when the template did.

    Raises:
        ValueError/TypeError naming the key: conflicting ``type``/``rope_type``, per-layer
        (nested) rope dicts without a ``layer_type``, no ``head_dim`` nor ``hidden_size``/``num_attention_heads``,
        any error of :func:`posenc.encoding.rotary.scaling.validate`.
    """
    cfg = _as_dict(config)
    rope = _layer_rope(cfg, layer_type)
    rope_type = _rope_type(rope)
    head_dim, base, partial = _rope_numbers(cfg, rope)
    max_positions = cfg.get("max_position_embeddings")
    params = {key: value for key, value in rope.items() if key not in _NOT_PARAMS}
    hf_original = _hf_original(rope_type)
    if hf_original == "max_position_embeddings" and params.get(ORIGINAL) not in (None, max_positions):
        raise PosencError(
            "HF's dynamic scaling ignores rope_scaling['original_max_position_embeddings'] and uses "
            f"max_position_embeddings={max_positions}; got {params[ORIGINAL]}. Make them equal"
        )
    if hf_original == "rope" and cfg.get(ORIGINAL) is not None:
        params[ORIGINAL] = cfg[ORIGINAL]
    scaling = None if rope_type == "default" and not params else {"rope_type": rope_type, **params}
    # make explicit what HF infers from max_position_embeddings (L0, longrope's factor)
    scaling = rope_scaling.resolve(scaling, max_position_embeddings=max_positions)
    rope_scaling.validate(scaling, dim=int(head_dim * partial))  # HF: dim = int(head_dim * partial)
    return {
        "head_dim": head_dim,
        "base": base,
        "partial_rotary_factor": partial,
        "scaling": scaling,
        "max_position_embeddings": max_positions,
    }


def _layer_rope(cfg: dict[str, Any], layer_type: str | None) -> dict[str, Any]:
    """The rope dict of ``cfg`` (of ``layer_type``, where the config has one per layer type)."""
    rope = cfg.get(_rope_key(cfg)) or {}
    if not isinstance(rope, dict):
        raise PosencTypeError(
            f"rope_scaling / rope_parameters must be a dict or null, got {type(rope).__name__}"
        )
    nested = [key for key, value in rope.items() if isinstance(value, dict)]
    if nested:
        if layer_type not in nested:
            raise PosencError(
                f"this config has one rope dict per layer type ({', '.join(nested)}); "
                f"pass layer_type= one of them, got {layer_type!r}"
            )
        return rope[layer_type]
    if layer_type is not None:
        raise PosencError(f"layer_type={layer_type!r} given but the config has one rope dict for all layers")
    return rope


def _rope_type(rope: dict[str, Any]) -> str:
    """The ``rope_type`` of a rope dict (HF's legacy ``type`` read too), one posenc implements."""
    if "type" in rope and "rope_type" in rope and rope["type"] != rope["rope_type"]:
        raise PosencError(
            f"rope dict has type={rope['type']!r} and rope_type={rope['rope_type']!r}; they must agree"
        )
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type in UNSUPPORTED_ROPE_TYPES:
        raise PosencError(
            f"rope_type {rope_type!r} ({UNSUPPORTED_ROPE_TYPES[rope_type]}) is not implemented by posenc; "
            f"it implements {list(rope_scaling.ROPE_SCALINGS)}"
        )
    return rope_type


def _rope_numbers(cfg: dict[str, Any], rope: dict[str, Any]) -> tuple[int, float, float]:
    """``(head_dim, base, partial_rotary_factor)`` of a config and its rope dict, checked."""
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if "hidden_size" not in cfg or "num_attention_heads" not in cfg:
            raise PosencError("config needs head_dim, or hidden_size and num_attention_heads")
        head_dim = check_int("hidden_size", cfg["hidden_size"], minimum=1) // check_int(
            "num_attention_heads", cfg["num_attention_heads"], minimum=1
        )
    head_dim = check_int("head_dim", head_dim, minimum=2, maximum=MAX_HEAD_DIM)
    base = check_float(
        "rope_theta", rope.get("rope_theta", cfg.get("rope_theta", DEFAULT_THETA)), minimum=1.0
    )
    partial = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    partial = check_float(
        "partial_rotary_factor", 1.0 if partial is None else partial, minimum=0.0, maximum=1.0
    )
    rotary_dim = int(head_dim * partial)  # HF: dim = int(head_dim * partial_rotary_factor)
    if rotary_dim < 2 or rotary_dim % 2:
        where = (
            "head_dim"
            if partial == 1.0
            else f"int(head_dim * partial_rotary_factor) = int({head_dim} * {partial})"
        )
        raise PosencError(
            f"{where} must be an even integer >= 2 (RoPE rotates pairs of dimensions), got {rotary_dim}"
        )
    return head_dim, base, partial


def to_hf(rope: dict[str, Any], *, like: Any = None) -> dict[str, Any]:
    """Write posenc RoPE keyword arguments (or a RoPEConfig dict) as a Hugging Face config.

    Args:
        rope: ``head_dim`` (required), ``base``, ``partial_rotary_factor`` or
            ``rotary_dim``, ``scaling``, ``max_position_embeddings``, ``layout``.
        like: an HF config whose layout to follow (``rope_scaling`` vs
            ``rope_parameters``, ``type`` vs ``rope_type``, where ``rope_theta``,
            ``partial_rotary_factor`` and ``original_max_position_embeddings`` live,
            which keys HF may infer); its other keys are kept. Without it: the
            transformers-5 layout, every key explicit.

    Returns:
        A new config dict. ``to_hf(from_hf(cfg), like=cfg) == cfg``; the values always
        come from ``rope``, only their places from ``like``.

    Raises:
        ValueError when HF cannot represent the config: ``layout="interleaved"``
        (HF checkpoints use ``"half"``), a ``rotary_dim`` no ``partial_rotary_factor``
        reproduces, a ``dynamic`` original length other than ``max_position_embeddings``.
    """
    head_dim, partial, base, max_positions = _rope_arguments(rope)
    rope_type, params = rope_scaling.split(rope.get("scaling"))
    params = copy.deepcopy(params)
    spec = rope_scaling.ROPE_SCALINGS[rope_type]
    writer = _HFWriter.like(like)
    type_keys = [k for k in ("rope_type", "type") if k in writer.old] or ["rope_type"]
    for type_key in type_keys:
        writer.new[type_key] = rope_type
    writer.place("rope_theta", base, DEFAULT_THETA)
    writer.place("partial_rotary_factor", partial, 1.0)
    max_positions = writer.originals(spec, params, max_positions)
    writer.drop_inferred_factor(spec, params, max_positions)
    writer.new.update(params)
    return writer.finish(
        rope_type == "default" and set(writer.new) == set(type_keys), head_dim, max_positions
    )


#: The keyword arguments :func:`to_hf` reads.
_ROPE_KEYS = (
    "head_dim",
    "base",
    "partial_rotary_factor",
    "rotary_dim",
    "scaling",
    "max_position_embeddings",
    "layout",
)


def _rope_arguments(rope: Any) -> tuple[int, float, float, Any]:
    """``(head_dim, partial_rotary_factor, base, max_position_embeddings)`` of posenc RoPE
    keyword arguments, refused where a Hugging Face config cannot hold them."""
    if not isinstance(rope, dict):
        raise PosencTypeError(
            f"rope must be a dict of posenc RoPE keyword arguments, got {type(rope).__name__}"
        )
    for key in rope:
        if key not in _ROPE_KEYS:
            raise PosencError(f"unknown RoPE key {key!r}; valid keys: {list(_ROPE_KEYS)}")
    if rope.get("layout", "half") != "half":
        raise PosencError("layout must be 'half' for Hugging Face (rotate_half); permute the weights first")
    head_dim = check_int("head_dim", rope.get("head_dim"), minimum=2)
    partial = float(rope.get("partial_rotary_factor", 1.0))
    if rope.get("rotary_dim") is not None:
        partial = rope["rotary_dim"] / head_dim
        if int(head_dim * partial) != rope["rotary_dim"]:
            raise PosencError(
                f"rotary_dim={rope['rotary_dim']} has no partial_rotary_factor for head_dim={head_dim}"
            )
    return head_dim, partial, float(rope.get("base", DEFAULT_THETA)), rope.get("max_position_embeddings")


class _HFWriter:
    """The config :func:`to_hf` writes: ``out`` (a copy of the template ``like``, or a new dict),
    the key of its rope dict, the template's rope dict ``old`` and the one being written, ``new``."""

    def __init__(self, template: dict[str, Any] | None) -> None:
        self.template = template
        self.out: dict[str, Any] = template if template is not None else {}
        self.key = _rope_key(self.out) if template is not None else "rope_parameters"
        self.old: dict[str, Any] = (self.out.get(self.key) or {}) if template is not None else {}
        self.new: dict[str, Any] = {}

    @classmethod
    def like(cls, like: Any) -> _HFWriter:
        return cls(_as_dict(like) if like is not None else None)

    def place(self, name: str, value: Any, default: Any) -> None:
        """Put a rope key where the template had it; a template without it gets it only if
        HF could not infer it (value != default): in the rope dict, or at the top level
        for a legacy ``rope_scaling`` template."""
        template, out, old, new = self.template, self.out, self.old, self.new
        if template is None:
            if name != "partial_rotary_factor" or value != default:
                new[name] = value
            return
        if name in template:
            out[name] = value
        if name in old:
            new[name] = value
        if name not in template and name not in old and value != default:
            (out if self.key == "rope_scaling" else new)[name] = value

    def originals(self, spec: Any, params: dict[str, Any], max_positions: Any) -> Any:
        """Move the original context out of ``params`` to where HF reads it (the scaling's
        ``hf_original``); returns ``max_position_embeddings`` (dynamic scaling's original)."""
        template, out, old, new = self.template, self.out, self.old, self.new
        if spec.hf_original == "max_position_embeddings" and params.get(ORIGINAL) is not None:
            original = params.pop(ORIGINAL)
            max_positions = original if max_positions is None else max_positions
            if original != max_positions:
                raise PosencError(
                    "HF's dynamic scaling reads the original length from max_position_embeddings; got "
                    f"original_max_position_embeddings={original} != max_position_embeddings={max_positions}"
                )
            if ORIGINAL in old:
                new[ORIGINAL] = original
        if spec.hf_original == "rope" and ORIGINAL in params:
            original = params.pop(ORIGINAL)
            if template is None:  # both places: configs like Phi3Config prefer their top-level attribute
                new[ORIGINAL] = out[ORIGINAL] = original
            else:
                if ORIGINAL in template:
                    out[ORIGINAL] = original
                if ORIGINAL in old or (ORIGINAL not in template and original != max_positions):
                    new[ORIGINAL] = original
        return max_positions

    def drop_inferred_factor(self, spec: Any, params: dict[str, Any], max_positions: Any) -> None:
        """Leave out a ``factor`` HF infers from the contexts where the template left it out."""
        if spec.factor_from_context and params.get("factor") is not None and self.template is not None:
            original = self.new.get(ORIGINAL, self.out.get(ORIGINAL, max_positions))
            if (
                "factor" not in self.old
                and max_positions
                and math.isclose(params["factor"], max_positions / original)
            ):
                params.pop("factor")

    def finish(self, plain: bool, head_dim: int, max_positions: Any) -> dict[str, Any]:
        """The config: the rope dict in place (null where the template had null and the RoPE is
        ``plain``, without scaling), ``head_dim`` where HF cannot infer it, the context."""
        out, key = self.out, self.key
        if self.template is not None and self.template.get(key) is None and plain:
            out[key] = None  # e.g. a transformers-4 config with "rope_scaling": null
        else:
            out[key] = self.new
        hidden, heads = out.get("hidden_size"), out.get("num_attention_heads")
        if (
            "head_dim" in out
            or self.template is None
            or not hidden
            or not heads
            or hidden // heads != head_dim
        ):
            out["head_dim"] = head_dim
        if max_positions is not None:
            out["max_position_embeddings"] = max_positions
        return out


def rope_from_hf(config: Any, *, layer_type: str | None = None):
    """Build the posenc :class:`~posenc.encoding.rotary.rope.RoPE` a Hugging Face config describes."""
    return build("rope", **from_hf(config, layer_type=layer_type))
