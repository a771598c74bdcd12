"""The grid's RoPE scalings: the entries ``posenc extend --scalings`` names and the posenc scaling
each one is at a length.

The names and forms are one vocabulary with ``posenc compare --scalings``
(:mod:`posenc.records.benchmark_scalings`): every scaling of the registry
(:data:`posenc.encoding.rotary.scaling.ROPE_SCALINGS`, ``posenc.register_scaling`` and entry points
included), ``NAME:FACTOR`` or a bare ``NAME`` (one entry per factor of the protocol's ``factors``),
``NAME-dynamic`` where the scaling's spec has that form, and ``none``. Every entry is turned, for
an evaluation length ``L``, into the Hugging Face style scaling dict (``{"rope_type": ..., **keys}``,
or None for plain RoPE) that :meth:`posenc.hf.Applied.set_scaling` takes (:meth:`Entry.at`):
posenc's own formulas (:mod:`posenc.encoding.rotary.scaling`) compute every table the model sees.
The built-ins:

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
``yarn-dynamic``   YaRN with the factor ``L / L0`` once ``L > L0`` (the YaRN paper's Dynamic-YaRN;
                   ``dynamic-yarn``, as this command first spelled it, is the same entry)
``llama3:s``       Llama 3.1's bands (low_freq_factor 1, high_freq_factor 4)
``longrope``       LongRoPE's per-frequency factors (long ones past ``L0``), only where the
                   model's config carries them (they come from a search made for that model)
=================  ========================================================================

A scaling whose keys no benchmark can choose (LongRoPE's) takes them from the checkpoint's config
(:func:`own_keys`). ``L0`` is :func:`trained_context`: the original context the config's RoPE scaling states
(``original_max_position_embeddings``, which transformers reads for YaRN, Llama 3 and LongRoPE;
Phi-3's 128k checkpoints: 4,096 tokens, their ``max_position_embeddings`` of 131,072 being the
window its longrope scaling extends it to), else ``max_position_embeddings``. Every entry scales from that one
``L0``, and ``none`` is plain RoPE even where the config carries a scaling (on a LongRoPE
checkpoint the model as it ships is the ``longrope`` entry).

Length-dependent scalings (``dynamic``, ``yarn-dynamic``, ``longrope``) take, for a sequence of
``L`` tokens, the frequencies one forward pass over those ``L`` tokens would use, for every
token (the YaRN paper's sliding-window evaluation does exactly that): the scaling's spec says how
it reads at ``L`` (``RopeScaling.at_length``), and :func:`check_equivalent` checks that against
posenc's own length-dependent formula at ``L``. Two entries whose dicts at ``L`` are equal give the
same tables, so the measurement is made once (``dynamic:1`` at ``2 L0`` is ``ntk:2``; every dynamic
entry up to ``L0`` is ``none``). A cell is named by its tables, not by how its entries are spelled.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.records.benchmark_scalings import MAX_FACTOR, BenchmarkScaling, forms, parse_grid

ORIGINAL = rope_scaling.ORIGINAL

#: One scaling of the grid: a name and its factor (the grids' one type).
Entry = BenchmarkScaling


def parse(text: str, factors: tuple[float, ...], option: str = "scalings") -> list[Entry]:
    """``"yarn"`` (one entry per factor of ``factors``), ``"yarn:4"``, ``"none"`` -> entries."""
    return parse_grid(text, factors=factors, checkpoint=True, option=option)


def parse_all(texts: tuple[str, ...], factors: tuple[float, ...], option: str = "scalings") -> list[Entry]:
    entries: list[Entry] = []
    for text in texts:
        for entry in parse(text, factors, option):
            if entry not in entries:
                entries.append(entry)
    if not entries:
        raise PosencError(f"{option}: name at least one scaling ({forms(checkpoint=True)})")
    return entries


def tables_key(scaling: dict[str, Any] | None) -> str:
    """A canonical text of a static scaling dict: equal keys, equal tables."""
    return json.dumps(scaling, sort_keys=True, separators=(",", ":"))


def own_type(config: dict[str, Any]) -> str | None:
    """The ``rope_type`` of the config's RoPE scaling (None without one)."""
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        return None
    found = rope.get("rope_type", rope.get("type"))
    return found if isinstance(found, str) else None


def own_keys(config: dict[str, Any], rope_type: str) -> dict[str, Any] | None:
    """The keys of the config's RoPE scaling when it is ``rope_type`` (None otherwise): the ones the
    scaling takes, the original context (a top-level key wins over the rope dict's, as Phi-3 writes
    it and transformers reads it, else max_position_embeddings) and the factor (where the config
    has none: max_position_embeddings / that context for a scaling that fills it so, else 1)."""
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if own_type(config) != rope_type or rope_type not in rope_scaling.ROPE_SCALINGS:
        return None
    spec = rope_scaling.ROPE_SCALINGS[rope_type]
    keep = {k: rope[k] for k in spec.takes if k not in ("factor", ORIGINAL) and rope.get(k) is not None}
    context = config.get(ORIGINAL) or rope.get(ORIGINAL) or config.get("max_position_embeddings")
    maximum = config.get("max_position_embeddings")
    if "factor" in spec.takes:
        filled = maximum / context if spec.factor_from_context and maximum and context else 1.0
        keep["factor"] = float(rope.get("factor") or filled)
    if context and ORIGINAL in spec.takes:
        keep[ORIGINAL] = int(context)
    return keep


def longrope_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """The LongRoPE keys of a model config (``short_factor``, ``long_factor``, ``factor``,
    ``attention_factor``), or None when the config has no LongRoPE scaling (:func:`own_keys`)."""
    return own_keys(config, "longrope")


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
    "MAX_FACTOR",
    "Entry",
    "check_equivalent",
    "longrope_of",
    "own_keys",
    "own_type",
    "parse",
    "parse_all",
    "tables_key",
    "trained_context",
]
