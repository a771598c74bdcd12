"""Which bias-attention path a device runs, from measurements: the table ``bias_paths.json``.

Axis legend: i query positions, j key positions (``length`` below is ``j``).

Three paths compute the same attention with a bias encoding (:mod:`posenc.kernels.bias_attention`):
``"chunked"`` (SDPA over row blocks, each block's bias a view of one per-distance table: memory
that does not grow with ``i * j``), ``"flex"`` (compiled FlexAttention with the encoding's
``score_mod`` and a block mask) and ``"dense"`` (the whole ``(b, h, i, j)`` bias handed to SDPA).
Which is fastest depends on the device, the encoding, the length, the dtype and whether a
backward pass follows; on an H200 the dense bias was 13x faster than the chunked one for ALiBi at
L 1024, and FIRE slower chunked than dense. So a device runs a path other than ``"chunked"``
only where this table says it measured faster there, never by assumption; a device (or a case)
the table does not list runs the chunked path, as every device did before the table.

The table is data: one entry per device name (``torch.cuda.get_device_name()``), each a list of
rules ``(encoding, mode, dtype, from_length, path)`` with the times that chose the path
(``encoding``: the encoding's class name, ``ALiBi``, ``T5RelativeBias``, ...; ``mode``: ``fwd``,
or ``fwd+bwd`` when a gradient is needed). For a call, the rule of its encoding, mode and dtype
with the largest ``from_length`` at most its key count applies; the dense path never past the
longest length measured. ``benchmarks/bias_paths.py`` measures a device and writes its entry
(``scripts/gpu_check.sh`` runs it on a GPU); the entries are checked in by hand after review.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from posenc.core.datafiles import Where, read_json, typed

PATHS = ("chunked", "flex", "dense")
MODES = ("fwd", "fwd+bwd")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT = "chunked"  # where the table says nothing: the path every device ran before it


@dataclass(frozen=True)
class PathRule:
    """From ``from_length`` keys on, ``encoding`` in ``mode`` and ``dtype`` runs ``path``; ``ms``:
    the median times (milliseconds) of each path, measured at ``measured_at`` keys, that chose it."""

    encoding: str
    mode: str
    dtype: str
    from_length: int
    path: str
    measured_at: int
    ms: dict[str, float]


@dataclass(frozen=True)
class DeviceTable:
    """One device's rules and how they were measured (date, torch version, command)."""

    measured: str
    rules: tuple[PathRule, ...]


@dataclass(frozen=True)
class BiasPathTable:
    about: str
    devices: dict[str, DeviceTable]


def _check(cls, key: str, value, raw) -> None:
    where = Where("bias_paths.json")
    if cls is PathRule and key.endswith(".mode") and value not in MODES:
        raise where.error(key, value, f"must be one of {list(MODES)}")
    if cls is PathRule and key.endswith(".dtype") and value not in DTYPES:
        raise where.error(key, value, f"must be one of {list(DTYPES)}")
    if cls is PathRule and key.endswith(".path") and value not in PATHS:
        raise where.error(key, value, f"must be one of {list(PATHS)}")
    if cls is PathRule and key.endswith((".from_length", ".measured_at")) and value < 1:
        raise where.error(key, value, "must be >= 1")


def parse(raw, source: str = "bias_paths.json") -> BiasPathTable:
    """The table from parsed JSON; a wrong key, type or value is one PosencError naming it."""
    return typed(BiasPathTable, raw, Where(source), check=_check)


@functools.lru_cache(maxsize=1)
def table() -> BiasPathTable:
    """The shipped table (``posenc/kernels/bias_paths.json``), read once."""
    return parse(read_json("posenc.kernels", "bias_paths.json"))


def choose(device_name: str | None, encoding: str, mode: str, dtype: torch.dtype, length: int,
           paths: BiasPathTable | None = None) -> str:  # fmt: skip
    """The path the table gives (``"chunked"`` where it gives none); ``length`` is the key count."""
    entry = (paths or table()).devices.get(device_name or "")
    if entry is None:
        return DEFAULT
    name = next((k for k, v in DTYPES.items() if v == dtype), None)
    case = [rule for rule in entry.rules if (rule.encoding, rule.mode, rule.dtype) == (encoding, mode, name)]
    below = [rule for rule in case if rule.from_length <= length]
    if not below:
        return DEFAULT
    best = max(below, key=lambda rule: rule.from_length)
    if best.path == "dense" and length > max(rule.measured_at for rule in case):
        return DEFAULT  # the dense bias grows with i * j: never past the lengths it was measured at
    return best.path


@functools.lru_cache(maxsize=16)
def device_name(device: torch.device) -> str | None:
    """``torch.cuda.get_device_name`` of a CUDA device (None for any other device)."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_name(device)


def rules_from_times(
    encoding: str, mode: str, dtype: str, times: dict[int, dict[str, float]]
) -> list[PathRule]:
    """The rules for one (encoding, mode, dtype) from its measured medians ``{length: {path: ms}}``:
    at each length the fastest path measured there (a path that failed or disagreed is simply not in
    its cell); consecutive lengths with the same path make one rule. Missing a path to compare with
    (only one measured) still gives a rule: the path that ran."""
    rules: list[PathRule] = []
    for length in sorted(times):
        cell = {p: ms for p, ms in times[length].items() if p in PATHS}
        if not cell:
            continue
        fastest = min(cell, key=lambda p: cell[p])
        if rules and rules[-1].path == fastest:
            continue
        rules.append(PathRule(encoding, mode, dtype, length if rules else 1, fastest, length, dict(cell)))
    if len(rules) == 1 and rules[0].path == DEFAULT:
        return []  # the default everywhere: nothing to say
    return rules
