"""``posenc.reference`` mirrors ``posenc.encoding``: one module per kind's home, each re-exported by
the package, so ``from posenc import reference`` gives every function."""

from __future__ import annotations

import importlib
import pkgutil

import posenc
from posenc import reference
from posenc.registry import BUILTINS


def family_modules() -> set[str]:
    """The public modules of posenc.reference that hold references (the tutorial is a package of classes)."""
    return {
        info.name
        for info in pkgutil.iter_modules(reference.__path__)
        if not info.name.startswith("_") and info.name != "tutorial"
    }


def test_one_reference_module_per_kinds_home_in_posenc_encoding():
    homes = {cls.__module__.split(".")[2] for cls in BUILTINS.values()}  # posenc.encoding.<home>[...]
    assert "none" in homes  # NoPE adds nothing: it has no reference
    assert family_modules() == homes - {"none"}


def test_the_package_gives_every_function_of_every_module():
    for name in family_modules():
        module = importlib.import_module(f"posenc.reference.{name}")
        assert module.__all__, name
        for function in module.__all__:
            assert getattr(reference, function) is getattr(module, function), f"{name}.{function}"
    assert posenc.reference is reference
