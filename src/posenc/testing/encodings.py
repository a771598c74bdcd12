"""The contract every encoding passes (``posenc.testing.check_encoding``); see :mod:`posenc.testing`.

The properties live by what they look at: the hook itself (:mod:`~posenc.testing.hook_properties`),
attention around it (:mod:`~posenc.testing.attention_properties`), the declared capabilities
(:mod:`~posenc.testing.capability_properties`) and numerics (:mod:`~posenc.testing.numeric_properties`),
all driven through :mod:`~posenc.testing.hook_driver`; this module runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from posenc.core.errors import PosencError, PosencTypeError
from posenc.encoding.base import PositionalEncoding
from posenc.registry import check_encoding_class, get_encoding_class, model_values
from posenc.testing.attention_properties import ATTENTION_PROPERTIES
from posenc.testing.capability_properties import CAPABILITY_PROPERTIES
from posenc.testing.contract_report import CheckReport, PropertyResult
from posenc.testing.hook_driver import TOLERANCES, HookFault, Subject, apply_hook, hook_inputs, watching
from posenc.testing.hook_properties import HOOK_PROPERTIES
from posenc.testing.numeric_properties import NUMERIC_PROPERTIES

#: Property name -> check, in the order they run and are reported.
PROPERTIES: dict[str, Callable[[Subject], PropertyResult]] = {
    **HOOK_PROPERTIES,
    **ATTENTION_PROPERTIES,
    **CAPABILITY_PROPERTIES,
    **NUMERIC_PROPERTIES,
}

#: The properties that get rotary instances whose ``rotate`` is watched (:func:`watching`):
#: those after the two that check its outputs themselves, but ``compile`` (a graph of its own).
_WATCHED = frozenset(PROPERTIES) - {"declares", "shapes_and_dtypes", "layout", "compile"}

#: The properties ``posenc compare`` checks an outside encoding against before training it
#: (every one but ``compile``, which takes seconds per encoding).
FAST_PROPERTIES: tuple[str, ...] = tuple(name for name in PROPERTIES if name != "compile")


# ---------------------------------------------------------------------------
# Entry points.
# ---------------------------------------------------------------------------


def _subject(encoding: Any, d_model: int, num_heads: int, config: dict[str, Any], backend: str):
    if isinstance(encoding, PositionalEncoding):
        cls, label = type(encoding), f"{type(encoding).__module__}:{type(encoding).__qualname__}"
        config = {**encoding.config.to_dict(), **config}
    elif isinstance(encoding, str):
        cls, label = get_encoding_class(encoding), encoding
    elif isinstance(encoding, type):
        cls = check_encoding_class(encoding, source="encoding")
        label = f"{cls.__module__}:{cls.__qualname__}"
    else:
        raise PosencTypeError(
            f"encoding must be a registry name, an import spec, an encoding class or instance, got {type(encoding).__name__}"
        )
    merged = {**model_values(cls, d_model=d_model, num_heads=num_heads, causal=True), **config}
    parsed = cls.Config.from_dict(merged, owner=label)  # a bad config fails here, before any property

    def make() -> PositionalEncoding:
        torch.manual_seed(0)
        return cls(parsed)

    return Subject(make, d_model, num_heads, backend), cls, label


def check_encoding(
    encoding: str | type[PositionalEncoding] | PositionalEncoding,
    *,
    properties: Iterable[str] | None = None,
    d_model: int = 16,
    num_heads: int = 2,
    compile_backend: str = "aot_eager",
    **config: Any,
) -> CheckReport:
    """Run the contract (:data:`PROPERTIES`, or the ``properties`` named) on ``encoding``.

    Args:
        encoding: a registry name, an import spec ``"package.module:Class"``, a class or an
            instance (its config is used; ``config`` overrides fields).
        properties: names from :data:`PROPERTIES` (default: all, in order).
        d_model, num_heads: the small model the encoding is built for.
        compile_backend: ``torch.compile`` backend of the ``compile`` property (``"aot_eager"``
            traces forward and backward without generating code; ``"inductor"`` compiles).
        config: Config fields of the encoding.

    Returns:
        A :class:`CheckReport`; a property that raises is a failure naming the exception.
    """
    names = list(PROPERTIES) if properties is None else list(properties)
    for name in names:
        if name not in PROPERTIES:
            raise PosencError(f"unknown property {name!r}; valid: {list(PROPERTIES)}")
    subject, cls, label = _subject(encoding, d_model, num_heads, config, compile_backend)
    watched = dataclasses.replace(subject, make=watching(subject.make))
    results = []
    for name in names:
        try:
            results.append(PROPERTIES[name](watched if name in _WATCHED else subject))
        except HookFault as fault:
            results.append(PropertyResult(name, False, str(fault)))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001  (a user's class may fail in any way, sys.exit too)
            results.append(PropertyResult(name, False, f"raised {type(exc).__name__}: {exc}"))
    return CheckReport(label, cls.kind, tuple(results))


def assert_encoding(
    encoding: str | type[PositionalEncoding] | PositionalEncoding, **kwargs: Any
) -> CheckReport:
    """:func:`check_encoding`, raising AssertionError with the failed properties (for pytest)."""
    report = check_encoding(encoding, **kwargs)
    report.raise_for_failures()
    return report


__all__ = [
    "FAST_PROPERTIES",
    "PROPERTIES",
    "TOLERANCES",
    "apply_hook",
    "assert_encoding",
    "check_encoding",
    "hook_inputs",
]
