"""The grid's RoPE scalings: ``name[:factor]`` entries and the posenc scaling each one is at a length.

Every entry is turned, for an evaluation length ``L``, into the Hugging Face style scaling dict
(``{"rope_type": ..., **keys}``, or None for plain RoPE) that :meth:`posenc.hf.Applied.set_scaling`
takes: posenc's own formulas (:mod:`posenc.encoding.rotary.scaling`) compute every table the model sees.

=================  ========================================================================
entry              what the model runs at length ``L`` (``L0`` its trained context, ``s`` the factor)
=================  ========================================================================
``none``           plain RoPE (the config's base)
``linear:s``       position interpolation, positions / s (Chen et al. 2023)
``ntk:s``          NTK-aware: base * s^(d/(d-2)) (bloc97 2023)
``dynamic:s``      dynamic NTK (emozilla 2023, as transformers): NTK-aware with the factor
                   ``s L / L0 - (s - 1)`` once ``L > L0``, plain RoPE up to ``L0``;
                   ``dynamic:1`` is the YaRN paper's Dynamic NTK (scale ``L / L0``)
``yarn:s``         YaRN (Peng et al. 2023): NTK-by-parts and its attention temperature
``dynamic-yarn``   YaRN with the factor ``L / L0`` once ``L > L0`` (the YaRN paper's Dynamic-YaRN)
``llama3:s``       Llama 3.1's bands (low_freq_factor 1, high_freq_factor 4)
``longrope``       LongRoPE's per-frequency factors (long ones past ``L0``), only where the
                   model's config carries them (they come from a search made for that model)
=================  ========================================================================

``L0`` is :func:`trained_context`: the original context the config's RoPE scaling states
(``original_max_position_embeddings``, which transformers reads for YaRN, Llama 3 and LongRoPE;
Phi-3's 128k checkpoints: 4,096 tokens, their ``max_position_embeddings`` of 131,072 being the
window its longrope scaling extends it to), else ``max_position_embeddings``. Every entry scales from that one
``L0``, and ``none`` is plain RoPE even where the config carries a scaling (on a LongRoPE
checkpoint the model as it ships is the ``longrope`` entry).

Length-dependent scalings (``dynamic``, ``dynamic-yarn``, ``longrope``) take, for a sequence of
``L`` tokens, the frequencies one forward pass over those ``L`` tokens would use, for every
token (the YaRN paper's sliding-window evaluation does exactly that); the entry's static dict at
``L`` says so, and :func:`check_equivalent` checks it against posenc's own length-dependent
formula at ``L``. Two entries whose dicts at ``L`` are equal give the same tables, so the
measurement is made once (``dynamic:1`` at ``2 L0`` is ``ntk:2``; every dynamic entry up to
``L0`` is ``none``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import torch

from posenc.core.checks import did_you_mean
from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling

ORIGINAL = rope_scaling.ORIGINAL

#: name -> (takes a factor, what it is): the grid's scaling names, in the tables' order.
NAMES: dict[str, tuple[bool, str]] = {
    "none": (False, "plain RoPE"),
    "linear": (True, "position interpolation (Chen et al. 2023)"),
    "ntk": (True, "NTK-aware base scaling (bloc97 2023)"),
    "dynamic": (True, "dynamic NTK (emozilla 2023; transformers' 'dynamic')"),
    "yarn": (True, "YaRN (Peng et al. 2023)"),
    "dynamic-yarn": (False, "YaRN with factor L/L0 past the context (Peng et al. 2023, sec. 3.4)"),
    "llama3": (True, "Llama 3.1's frequency bands (Meta 2024)"),
    "longrope": (False, "LongRoPE's searched factors (Ding et al. 2024), from the model's config"),
}
MAX_FACTOR = 1024.0


@dataclass(frozen=True)
class Entry:
    """One scaling of the grid: a name of :data:`NAMES` and its factor (None: takes none)."""

    name: str
    factor: float | None = None

    @property
    def label(self) -> str:
        if self.factor is None:
            return self.name
        return f"{self.name} x{self.factor:g}"

    @property
    def key(self) -> str:
        """How the entry is written: ``yarn:4``, ``none``."""
        return self.name if self.factor is None else f"{self.name}:{self.factor:g}"

    @property
    def length_dependent(self) -> bool:
        return self.name in ("dynamic", "dynamic-yarn", "longrope")

    def at(self, length: int, context: int, longrope: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The static scaling dict this entry is for a sequence of ``length`` tokens (trained
        context ``context``); None for plain RoPE."""
        s = self.factor
        if self.name == "none":
            return None
        if self.name == "linear":
            return {"rope_type": "linear", "factor": s}
        if self.name == "ntk":
            return {"rope_type": "ntk", "factor": s}
        if self.name == "dynamic":
            assert s is not None
            if length <= context:
                return None
            # transformers' (and posenc's) dynamic NTK at this length, term for term
            return {"rope_type": "ntk", "factor": s * length / context - (s - 1)}
        if self.name == "yarn":
            return {"rope_type": "yarn", "factor": s, ORIGINAL: context}
        if self.name == "dynamic-yarn":
            if length <= context:
                return None
            return {"rope_type": "yarn", "factor": length / context, ORIGINAL: context}
        if self.name == "llama3":
            return {
                "rope_type": "llama3",
                "factor": s,
                ORIGINAL: context,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
            }
        assert self.name == "longrope" and longrope is not None
        factors = longrope["long_factor"] if length > context else longrope["short_factor"]
        static = {
            "rope_type": "longrope",
            "short_factor": list(factors),
            "long_factor": list(factors),
            ORIGINAL: context,
            "factor": float(longrope["factor"]),
        }
        if longrope.get("attention_factor") is not None:
            static["attention_factor"] = float(longrope["attention_factor"])
        return static

    def dynamic_dict(self, context: int, longrope: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """posenc's own length-dependent scaling this entry stands for (None: not length-dependent
        or not in posenc's registry)."""
        if self.name == "dynamic":
            return {"rope_type": "dynamic", "factor": self.factor, ORIGINAL: context}
        if self.name == "longrope" and longrope is not None:
            return {"rope_type": "longrope", **longrope, ORIGINAL: context}
        return None


def parse(text: str, factors: tuple[float, ...], option: str = "scalings") -> list[Entry]:
    """``"yarn"`` (one entry per factor of ``factors``), ``"yarn:4"``, ``"none"`` -> entries."""
    name, sep, value = text.strip().partition(":")
    name = name.strip().lower().replace("_", "-")
    if name not in NAMES:
        raise PosencError(
            f"{option}: {text!r} is not a scaling{did_you_mean(name, NAMES)}; valid: {', '.join(NAMES)} "
            "(with :FACTOR for those that take one, e.g. yarn:4)"
        )
    takes = NAMES[name][0]
    if sep and not takes:
        raise PosencError(f"{option}: {name} takes no factor, got {text!r}")
    if not takes:
        return [Entry(name)]
    if sep:
        try:
            chosen: tuple[float, ...] = (float(value),)
        except ValueError:
            raise PosencError(f"{option}: the factor of {text!r} must be a number, e.g. {name}:4") from None
    else:
        chosen = factors
    out = []
    for factor in chosen:
        if not (math.isfinite(factor) and 1.0 <= factor <= MAX_FACTOR):
            raise PosencError(
                f"{option}: the factor of {name} must be in [1, {MAX_FACTOR:g}], got {factor!r}"
            )
        out.append(Entry(name, float(factor)))
    return out


def parse_all(texts: tuple[str, ...], factors: tuple[float, ...], option: str = "scalings") -> list[Entry]:
    entries: list[Entry] = []
    for text in texts:
        for entry in parse(text, factors, option):
            if entry not in entries:
                entries.append(entry)
    if not entries:
        raise PosencError(f"{option}: name at least one scaling ({', '.join(NAMES)})")
    return entries


def tables_key(scaling: dict[str, Any] | None) -> str:
    """A canonical text of a static scaling dict: equal keys, equal tables."""
    return json.dumps(scaling, sort_keys=True, separators=(",", ":"))


def longrope_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """The LongRoPE keys of a model config (``short_factor``, ``long_factor``, ``factor``,
    ``attention_factor``), or None when the config has no LongRoPE scaling."""
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if not isinstance(rope, dict) or rope.get("rope_type", rope.get("type")) != "longrope":
        return None
    keep = {
        k: rope[k] for k in ("short_factor", "long_factor", "attention_factor") if rope.get(k) is not None
    }
    # the original context its factors switch at: a top-level key wins over the rope dict's (Phi-3
    # writes it there; transformers reads it so), else max_position_embeddings
    context = config.get(ORIGINAL) or rope.get(ORIGINAL) or config.get("max_position_embeddings")
    maximum = config.get("max_position_embeddings")
    keep["factor"] = float(rope.get("factor") or (maximum / context if maximum and context else 1.0))
    if context:
        keep[ORIGINAL] = int(context)
    return keep


def trained_context(
    config: dict[str, Any], scaling: dict[str, Any] | None, given: int = 0
) -> tuple[int, str]:
    """``(L0, where it comes from)``: the trained context every entry scales from.

    ``given`` (``--context``) where set; else the original context the config's RoPE scaling
    states (``scaling``: the config's scaling dict as :func:`posenc.hf.apply` resolves it, whose
    ``original_max_position_embeddings`` transformers reads for YaRN, Llama 3 and LongRoPE, a
    top-level key winning); else ``max_position_embeddings``. The text is empty for the last.
    """
    maximum = int(config.get("max_position_embeddings") or 0)
    if given:
        said = f"; the config's max_position_embeddings is {maximum}" if maximum and maximum != given else ""
        return given, f"set by --context{said}"
    original = int((scaling or {}).get(ORIGINAL) or 0)
    if not original or original == maximum:
        return maximum, ""
    name = (scaling or {}).get("rope_type", "")
    spec = rope_scaling.ROPE_SCALINGS.get(name)
    source = spec.paper.split(", ")[0] if spec is not None else ""  # "Ding et al. 2024"
    paper = f"its {name} scaling" + (f" ({source})" if source else "")
    if original < maximum:
        return original, (
            f"the config's {ORIGINAL}; its max_position_embeddings {maximum} is the window {paper} extends it to"
        )
    return original, f"the config's {ORIGINAL}, which {paper} scales from (max_position_embeddings {maximum})"


def check_equivalent(
    entry: Entry, length: int, context: int, *, dim: int, base: float, longrope: dict[str, Any] | None = None
) -> None:
    """The static dict of a length-dependent entry at ``length`` has posenc's own
    length-dependent frequencies at that length (a bug here would mislabel a whole row)."""
    own = entry.dynamic_dict(context, longrope)
    if own is None:
        return
    want = rope_scaling.compute(own, dim=dim, base=base, seq_len=length)
    got = rope_scaling.compute(entry.at(length, context, longrope), dim=dim, base=base, seq_len=length)
    if not (torch.equal(want[0], got[0]) and want[1] == got[1]):
        raise PosencError(
            f"internal: {entry.label} at {length} tokens does not reproduce posenc's {own['rope_type']} "
            "frequencies; please report it"
        )


__all__ = [
    "NAMES",
    "Entry",
    "check_equivalent",
    "longrope_of",
    "parse",
    "parse_all",
    "tables_key",
    "trained_context",
]
