"""``posenc extend`` protocols: TOML files (shipped ones under ``posenc/extend/protocols``, or yours).

Every key, with its meaning (``posenc extend --print-config`` writes them all)::

    name, description, needs     what it is; needs: what the user must supply (model, text)
    model = ""                   checkpoint directory, .gguf file or hub id ("" = SmolLM2-135M-Instruct)
    context = 0                  the trained context L0 (0 = the config's: the original_max_position_embeddings
                                 its RoPE scaling states, else max_position_embeddings)
    text = "python-docs"         real text: "python-docs" or a path (see posenc.extend.documents)
    documents = 2                documents (each as long as the longest length) perplexity averages over
    lengths = [...]              evaluation lengths in tokens (perplexity and loss by position)
    scalings = [...]             the grid's scalings, name or name:factor (posenc.extend.scalings;
                                 posenc.records.benchmark_scalings: the same names as posenc compare's)
    factors = [2.0]              factors of the scalings named without one
    chunk = 2048                 tokens per forward call (prefill in chunks through the KV cache)
    seed = 0                     draws the passkeys
    device = "auto"; precision = "fp32"; workers = 1
    [passkey] lengths = [...]; depths = [...]; trials = 1
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
from posenc.extend.scalings import Entry, parse_all

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_LENGTH = 1 << 21  # 2M tokens: past any context a model is trained for
MAX_BYTES = 1 << 20  # a protocol file is a few hundred bytes


@dataclass(frozen=True)
class Passkey:
    lengths: tuple[int, ...] = ()  # prompt lengths in tokens (none: no passkey test)
    depths: tuple[float, ...] = (0.1, 0.5, 0.9)  # where the key sits in the filler, 0 .. 1
    trials: int = 1  # prompts per length x depth (each its own key)


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str = ""
    needs: str = ""
    model: str = ""
    context: int = 0
    text: str = "python-docs"
    documents: int = 2
    lengths: tuple[int, ...] = (1024, 4096, 8192, 16384)
    scalings: tuple[str, ...] = ("none", "linear", "ntk", "dynamic:1", "yarn", "yarn-dynamic", "llama3")
    factors: tuple[float, ...] = (2.0,)
    chunk: int = 2048
    seed: int = 0
    device: str = "auto"
    precision: str = "fp32"
    workers: int = 1
    passkey: Passkey = field(default_factory=Passkey)

    @property
    def longest(self) -> int:
        return max((*self.lengths, *self.passkey.lengths))

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
        changes = parse_set(overrides)
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(table.get(key), dict):
                table[key] = {**table[key], **value}
            else:
                table[key] = value
        label = f"{label} with --set"
    protocol = typed(Protocol, table, Where(label))
    if options:
        protocol, label = _changed(protocol, options), f"{label} with options"
    return check(protocol, label)


def _positive(where: str, values: tuple[int, ...], label: str) -> None:
    for value in values:
        if not 2 <= value <= MAX_LENGTH:
            raise PosencError(f"{label}: {where} must be integers in [2, {MAX_LENGTH}], got {value}")
    if len(set(values)) != len(values):
        raise PosencError(f"{label}: {where} has a length twice: {list(values)}")


def check(protocol: Protocol, label: str = "protocol") -> Protocol:
    """Range checks of every key; the scalings parsed (:attr:`Protocol.entries`; whether the model
    takes each is checked against its config later)."""
    if not protocol.lengths:
        raise PosencError(f"{label}: lengths must name at least one evaluation length")
    _positive("lengths", protocol.lengths, label)
    _positive("passkey.lengths", protocol.passkey.lengths, label)
    if not all(math.isfinite(factor) and factor > 0 for factor in protocol.factors):
        raise PosencError(f"{label}: factors must be finite numbers > 0, got {list(protocol.factors)}")
    for depth in protocol.passkey.depths:
        if not 0.0 <= depth <= 1.0:
            raise PosencError(f"{label}: passkey.depths must be in [0, 1], got {depth}")
    if protocol.passkey.lengths and not protocol.passkey.depths:
        raise PosencError(f"{label}: passkey.depths must name at least one depth")
    limits = {
        "documents": (1, 10_000),
        "chunk": (16, MAX_LENGTH),
        "workers": (1, 256),
        "context": (0, MAX_LENGTH),
    }
    limits["passkey.trials"] = (1, 1000)
    limits["seed"] = (0, 2**32 - 1)
    for key, (low, high) in limits.items():
        value = protocol.passkey.trials if key == "passkey.trials" else getattr(protocol, key)
        if not low <= value <= high:
            raise PosencError(f"{label}: {key} must be in [{low}, {high}], got {value}")
    if protocol.precision not in PRECISIONS:
        raise PosencError(
            f"{label}: precision must be one of {', '.join(PRECISIONS)}, got {protocol.precision!r}"
        )
    check_device_text(protocol.device, f"{label}: device")
    try:
        protocol.entries  # noqa: B018  (parsed here, once, and kept: the cache check fills)
    except PosencError as exc:
        raise PosencError(f"{label}: {exc}") from None
    return protocol


def _changed(protocol: Protocol, changes: dict[str, Any]) -> Protocol:
    """The protocol with some keys changed (``passkey_KEY`` for a key of ``[passkey]``), not checked."""
    passkey = {k.removeprefix("passkey_"): v for k, v in changes.items() if k.startswith("passkey_")}
    top = {k: v for k, v in changes.items() if not k.startswith("passkey_")}
    if passkey:
        top["passkey"] = dataclasses.replace(protocol.passkey, **passkey)
    return dataclasses.replace(protocol, **top)


def replace(protocol: Protocol, **changes: Any) -> Protocol:
    """The protocol with some keys changed (command-line options), checked (the new protocol's own
    check: the keys it took from ``protocol`` were checked there, its scalings are parsed anew)."""
    return check(_changed(protocol, changes), "options")


def dump(protocol: Protocol, header: str = "") -> str:
    """The protocol as TOML (every key), ``header`` as comments first."""
    document = tomlkit.document()
    for line in header.splitlines():
        document.add(tomlkit.comment(line))
    data = dataclasses.asdict(protocol)
    passkey = data.pop("passkey")
    for key, value in data.items():
        document.add(key, list(value) if isinstance(value, tuple) else value)
    table = tomlkit.table()
    for key, value in passkey.items():
        table.add(key, list(value) if isinstance(value, tuple) else value)
    document.add("passkey", table)
    return tomlkit.dumps(document)


__all__ = ["Passkey", "Protocol", "check", "dump", "load", "replace", "shipped_names"]
