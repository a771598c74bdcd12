"""``posenc extend`` protocols: TOML files (shipped ones under ``posenc/extend/protocols``, or yours).

Every key, with its meaning (``posenc extend --print-config`` writes them all)::

    name, description, needs     what it is; needs: what the user must supply (model, text)
    model = ""                   checkpoint directory, .gguf file or hub id ("" = SmolLM2-135M-Instruct)
    context = 0                  the trained context L0 (0 = the config's: the original_max_position_embeddings
                                 its RoPE scaling states, else max_position_embeddings)
    text = "shakespeare"         long natural documents: "shakespeare" (the plays, posenc.extend.books) or a
                                 path of your own (.txt / .jsonl files: posenc.extend.documents)
    documents = 3                documents (each as long as the longest length) perplexity averages over
    lengths = [...]              evaluation lengths in tokens (perplexity and loss by position)
    scalings = [...]             the grid's scalings, name or name:factor (posenc.extend.scalings;
                                 posenc.records.benchmark_scalings: the same names as posenc compare's)
    factors = [2.0]              factors of the scalings named without one
    chunk = 2048                 tokens per forward call (prefill in chunks through the KV cache)
    seed = 0                     draws the retrieval prompts (keys, depths, names)
    device = "auto"; precision = "fp32"; workers = 1
    attention = ""               the model's attention kernel ("" = transformers' default; "sdpa", "eager",
                                 "flash_attention_2" where installed)
    [tasks.NAME] lengths = [...]; prompts = 20
                                 retrieval prompts of task NAME (posenc.extend.haystacks.TASKS: passkey, and
                                 RULER's multikey, multivalue, variables, frequent) at each length, for every
                                 scaling (the same prompts: a paired design)
    [margin] perplexity = 1.1; rate = 0.2
                                 what "holds" means for the effective context length: perplexity within 1.1x
                                 of plain RoPE's at the shortest length, a retrieval rate within 0.2 of it
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import tomlkit

from posenc.compare.device import PRECISIONS, check_device_text
from posenc.core import untrusted
from posenc.core.checks import did_you_mean
from posenc.core.datafiles import Where, typed
from posenc.core.dotted_keys import parse_set
from posenc.core.errors import PosencError
from posenc.extend.haystacks import TASKS
from posenc.extend.scalings import Entry, parse_all

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_LENGTH = 1 << 21  # 2M tokens: past any context a model is trained for
MAX_BYTES = 1 << 20  # a protocol file is a few hundred bytes


MAX_PROMPTS = 1000  # per cell (scaling x task x length)
ATTENTION = ("", "sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True)
class RetrievalCells:
    """The prompts of one retrieval task (:data:`posenc.extend.haystacks.TASKS`): at each of
    ``lengths`` (tokens, prompt and answer together), ``prompts`` prompts for every scaling."""

    lengths: tuple[int, ...] = ()
    prompts: int = 20


@dataclass(frozen=True)
class Margin:
    """What "holds" means for an effective context length: perplexity at most ``perplexity`` times
    the reference's, a retrieval rate at most ``rate`` below it (the reference: plain RoPE at the
    shortest length measured; :mod:`posenc.extend.evidence`)."""

    perplexity: float = 1.1
    rate: float = 0.2


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str = ""
    needs: str = ""
    model: str = ""
    context: int = 0
    text: str = "shakespeare"
    documents: int = 3
    lengths: tuple[int, ...] = (1024, 4096, 8192, 16384)
    scalings: tuple[str, ...] = ("none", "linear", "ntk", "dynamic:1", "yarn", "yarn-dynamic", "llama3")
    factors: tuple[float, ...] = (2.0,)
    chunk: int = 2048
    seed: int = 0
    device: str = "auto"
    precision: str = "fp32"
    workers: int = 1
    attention: str = ""
    tasks: dict[str, RetrievalCells] = field(default_factory=dict)
    margin: Margin = field(default_factory=Margin)

    @property
    def longest(self) -> int:
        return max((*self.lengths, *self.prompt_lengths))

    @property
    def prompt_lengths(self) -> tuple[int, ...]:
        """Every length some task has prompts at, shortest first."""
        return tuple(sorted({n for task in self.tasks.values() for n in task.lengths}))

    def cells(self) -> list[tuple[str, int, int]]:
        """``(task, length, prompts)`` of every retrieval cell of one scaling, in the registry's order."""
        return [(name, n, self.tasks[name].prompts) for name in TASKS if name in self.tasks
                for n in sorted(self.tasks[name].lengths)]  # fmt: skip

    @functools.cached_property
    def entries(self) -> list[Entry]:
        """The grid's scalings parsed (:func:`posenc.extend.scalings.parse_all`): a cache, filled
        when :func:`check` reads it (so a checked protocol holds them, parsed once) and kept, since a
        frozen protocol never changes its ``scalings`` or ``factors``; not data (no TOML key)."""
        return parse_all(self.scalings, self.factors, "scalings")


def shipped_dir() -> Any:
    return resources.files("posenc.extend").joinpath("protocols")


def shipped_names() -> tuple[str, ...]:
    return tuple(sorted(p.name[:-5] for p in shipped_dir().iterdir() if p.name.endswith(".toml")))


def _read(source: str) -> tuple[str, str, str]:
    """``(name, label, text)`` of a shipped protocol name or a TOML file path."""
    if source in shipped_names():
        return source, f"{source}.toml", shipped_dir().joinpath(f"{source}.toml").read_text(encoding="utf-8")
    path = Path(source)
    if not source.endswith(".toml") and not path.exists():
        raise PosencError(
            f"--protocol {source!r} is not a shipped protocol{did_you_mean(source, shipped_names())}; "
            f"shipped: {', '.join(shipped_names())} (or --config FILE.toml)"
        )
    if not path.is_file():
        raise PosencError(f"--config {source!r}: {untrusted.what_is(path)}; give a protocol file (TOML)")
    with untrusted.open_regular(path) as handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise PosencError(f"--config {source!r}: larger than {MAX_BYTES >> 10} KiB; not a protocol file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PosencError(f"--config {source!r}: not UTF-8 text") from None
    return path.stem, os.path.basename(source), text


def load(
    source: str, overrides: tuple[str, ...] | list[str] = (), options: dict[str, Any] | None = None
) -> Protocol:
    """The protocol ``source`` (a shipped name or a TOML file) with ``--set KEY=VALUE`` items on top,
    then ``options`` (command-line options, named as :func:`replace` names them); checked once."""
    name, label, text = _read(source)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PosencError(f"{label}: not valid TOML ({exc})") from None
    table.setdefault("name", name)
    if overrides:
        _merge(table, parse_set(overrides))
        label = f"{label} with --set"
    protocol = typed(Protocol, table, Where(label))
    if options:
        protocol, label = _changed(protocol, options), f"{label} with options"
    return check(protocol, label)


def is_shipped(protocol: Protocol) -> bool:
    """Whether ``protocol`` is a shipped protocol as it ships (no key changed): what its description
    says it decides is then what it decides."""
    return protocol.name in shipped_names() and load(protocol.name) == protocol


def _merge(table: dict[str, Any], changes: dict[str, Any]) -> None:
    """``changes`` over ``table``, table by table (``tasks.passkey.prompts=5`` keeps the task's lengths)."""
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(table.get(key), dict):
            _merge(table[key], value)
        else:
            table[key] = value


def _positive(where: str, values: tuple[int, ...], label: str) -> None:
    for value in values:
        if not 2 <= value <= MAX_LENGTH:
            raise PosencError(f"{label}: {where} must be integers in [2, {MAX_LENGTH}], got {value}")
    if len(set(values)) != len(values):
        raise PosencError(f"{label}: {where} has a length twice: {list(values)}")


def _check_tasks(protocol: Protocol, label: str) -> None:
    for name, task in protocol.tasks.items():
        if name not in TASKS:
            raise PosencError(
                f"{label}: tasks.{name} is not a task{did_you_mean(name, tuple(TASKS))}; tasks: {', '.join(TASKS)}"
            )
        _positive(f"tasks.{name}.lengths", task.lengths, label)
        if not 1 <= task.prompts <= MAX_PROMPTS:
            raise PosencError(
                f"{label}: tasks.{name}.prompts must be in [1, {MAX_PROMPTS}], got {task.prompts}"
            )
    margin = protocol.margin
    if not (math.isfinite(margin.perplexity) and 1.0 <= margin.perplexity <= 100.0):
        raise PosencError(f"{label}: margin.perplexity must be a ratio in [1, 100], got {margin.perplexity}")
    if not (math.isfinite(margin.rate) and 0.0 <= margin.rate <= 1.0):
        raise PosencError(f"{label}: margin.rate must be in [0, 1], got {margin.rate}")


def check(protocol: Protocol, label: str = "protocol") -> Protocol:
    """Range checks of every key; the scalings parsed (:attr:`Protocol.entries`; whether the model
    takes each is checked against its config later)."""
    if not protocol.lengths:
        raise PosencError(f"{label}: lengths must name at least one evaluation length")
    _positive("lengths", protocol.lengths, label)
    if not all(math.isfinite(factor) and factor > 0 for factor in protocol.factors):
        raise PosencError(f"{label}: factors must be finite numbers > 0, got {list(protocol.factors)}")
    _check_tasks(protocol, label)
    limits = {"documents": (1, 10_000), "chunk": (16, MAX_LENGTH), "workers": (1, 256), "context": (0, MAX_LENGTH),
              "seed": (0, 2**32 - 1)}  # fmt: skip
    for key, (low, high) in limits.items():
        value = getattr(protocol, key)
        if not low <= value <= high:
            raise PosencError(f"{label}: {key} must be in [{low}, {high}], got {value}")
    if protocol.precision not in PRECISIONS:
        raise PosencError(
            f"{label}: precision must be one of {', '.join(PRECISIONS)}, got {protocol.precision!r}"
        )
    if protocol.attention not in ATTENTION:
        raise PosencError(
            f"{label}: attention must be one of {', '.join(repr(a) for a in ATTENTION)}, got {protocol.attention!r}"
        )
    check_device_text(protocol.device, f"{label}: device")
    try:
        protocol.entries  # noqa: B018  (parsed here, once, and kept: the cache check fills)
    except PosencError as exc:
        raise PosencError(f"{label}: {exc}") from None
    return protocol


def _changed(protocol: Protocol, changes: dict[str, Any]) -> Protocol:
    """The protocol with some keys changed, not checked: ``passkey_lengths`` sets the passkey task's
    lengths (an empty tuple removes the task), ``prompts`` the prompts of every task."""
    top = {k: v for k, v in changes.items() if k not in ("passkey_lengths", "prompts")}
    tasks = dict(protocol.tasks)
    if "passkey_lengths" in changes:
        lengths = tuple(changes["passkey_lengths"])
        tasks.pop("passkey", None)
        if lengths:
            tasks["passkey"] = dataclasses.replace(
                protocol.tasks.get("passkey", RetrievalCells()), lengths=lengths
            )
    if "prompts" in changes:
        tasks = {name: dataclasses.replace(task, prompts=changes["prompts"]) for name, task in tasks.items()}
    if tasks != protocol.tasks:
        top["tasks"] = tasks
    return dataclasses.replace(protocol, **top)


def replace(protocol: Protocol, **changes: Any) -> Protocol:
    """The protocol with some keys changed (command-line options), checked (the new protocol's own
    check: the keys it took from ``protocol`` were checked there, its scalings are parsed anew)."""
    return check(_changed(protocol, changes), "options")


def _toml_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def dump(protocol: Protocol, header: str = "") -> str:
    """The protocol as TOML (every key), ``header`` as comments first."""
    document = tomlkit.document()
    for line in header.splitlines():
        document.add(tomlkit.comment(line))
    data = dataclasses.asdict(protocol)
    tasks, margin = data.pop("tasks"), data.pop("margin")
    for key, value in data.items():
        document.add(key, _toml_value(value))
    table = tomlkit.table(is_super_table=True)
    for name, task in tasks.items():
        inner = tomlkit.table()
        for key, value in task.items():
            inner.add(key, _toml_value(value))
        table.add(name, inner)
    document.add("tasks", table)
    limits = tomlkit.table()
    for key, value in margin.items():
        limits.add(key, value)
    document.add("margin", limits)
    return tomlkit.dumps(document)


__all__ = [
    "Margin",
    "Protocol",
    "RetrievalCells",
    "check",
    "dump",
    "is_shipped",
    "load",
    "replace",
    "shipped_names",
]
