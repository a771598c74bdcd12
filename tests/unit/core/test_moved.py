"""The module paths of the previous release still import for one release, with a DeprecationWarning.

``posenc.MOVED`` (old module -> new module) and ``posenc.MOVED_NAMES`` (names that left their
module) are the one table; ``posenc.core.moved`` serves it to ``import posenc.old``, ``from
posenc.old import Name`` and ``posenc.old`` read as an attribute. ``tests/data/moved_module_names.json``
pins every public name each moved module had: each must still be found through the old path.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import pytest

import posenc
from posenc.core import moved

ROOT = Path(__file__).resolve().parents[3]
PINNED: dict[str, list[str]] = json.loads((ROOT / "tests" / "data" / "moved_module_names.json").read_text())[
    "modules"
]


def forget(old: str) -> None:
    """Undo an earlier import of the old path ``old`` (never of a real module), so it warns again."""
    if old not in posenc.MOVED and not any(old.startswith(o + ".") for o in posenc.MOVED):
        return
    sys.modules.pop(old, None)
    parent, _, leaf = old.rpartition(".")
    holder = sys.modules.get(parent)
    if holder is not None and leaf in vars(holder) and getattr(holder, "__name__", "") != old:
        real = f"{holder.__name__}.{leaf}"
        given = vars(holder)[leaf]  # the import system set the alias there (never over a function)
        if isinstance(given, types.ModuleType) and given is not sys.modules.get(real):
            delattr(holder, leaf)


def deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old", sorted(PINNED))
def test_every_old_module_path_still_gives_every_public_name(old):
    forget(old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        missing = [name for name in PINNED[old] if not hasattr(module, name)]
    assert not missing, f"{old} no longer gives {missing}"
    said = deprecations(caught)
    if old in posenc.MOVED:
        new = posenc.MOVED[old]
        assert any(m.startswith(f"{old} is deprecated") and new in m for m in said), said
        assert importlib.import_module(new).__name__ == new
    else:  # not moved: a real module, imported without a word
        assert module.__name__ == old and not said, said


def test_the_table_points_at_real_modules_and_leaves_no_file_behind():
    package = ROOT / "src"
    for old, new in posenc.MOVED.items():
        path = package / Path(*old.split("."))
        assert not path.with_suffix(".py").exists() and not path.is_dir(), f"{old} is still a file: no shims"
        assert importlib.util.find_spec(new) is not None, f"{old} -> {new}, which does not exist"
        assert sys.modules.get(new) is None or sys.modules[new].__name__ == new
    for old, new in posenc.MOVED_NAMES.items():
        module, _, name = new.rpartition(".")
        assert hasattr(importlib.import_module(module), name), f"{old} -> {new}, which does not exist"
        assert old.rpartition(".")[0] in posenc.MOVED, f"{old}: its module is not an old path"


def test_import_from_and_attribute_forms_warn_once_at_the_user_line():
    for old in ("posenc.rotary", "posenc.model", "posenc.encoding.rotary.scaling"):
        forget(old)
    forget("posenc.rope_scaling")
    code = textwrap.dedent(
        """
        from posenc.rotary import RoPE
        from posenc import rope_scaling
        import posenc
        transformer = posenc.model.Transformer
        """
    )
    namespace: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, "user_code.py", "exec"), namespace)
    said = [
        (str(w.message).split(" ")[0], w.filename, w.lineno)
        for w in caught
        if w.category is DeprecationWarning
    ]
    assert said == [
        ("posenc.rotary", "user_code.py", 2),
        ("posenc.rope_scaling", "user_code.py", 3),
        ("posenc.model", "user_code.py", 5),
    ]
    from posenc.encoding.rotary import RoPE, scaling
    from posenc.nn.transformer import Transformer

    assert namespace["RoPE"] is RoPE and namespace["rope_scaling"] is scaling  # the module itself
    assert namespace["transformer"] is Transformer
    assert sys.modules["posenc.rotary"] is sys.modules["posenc.encoding.rotary"]  # nothing loaded twice


def test_a_submodule_of_an_old_package_is_the_new_one():
    forget("posenc.bias.alibi")
    forget("posenc.bias")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import posenc.bias.alibi as old_alibi
    from posenc.encoding.bias import alibi

    assert old_alibi is alibi
    assert [m.split(" ")[0] for m in deprecations(caught)] == ["posenc.bias", "posenc.bias.alibi"]


def test_an_old_path_named_like_a_function_of_its_package_leaves_the_function():
    """posenc.reference.hierarchical was a module and is the package's function ``hierarchical``:
    importing the old path (now posenc.reference.absolute) must not put a module over the function."""
    code = textwrap.dedent(
        """
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        import posenc.reference
        function = posenc.reference.hierarchical
        import posenc.reference.hierarchical
        from posenc.reference.hierarchical import hierarchical_sinusoidal
        import posenc.reference.multiaxis
        print(posenc.reference.hierarchical is function, callable(posenc.reference.hierarchical),
              posenc.reference.multiaxis.sincos_axial is posenc.reference.sincos_axial)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "True"], result.stdout


def test_only_the_tables_names_are_answered():
    finder = next(f for f in sys.meta_path if isinstance(f, moved.MovedModules))
    assert finder is sys.meta_path[0]
    assert finder.find_spec("posenc.no_such_module") is None
    assert finder.find_spec("posenc.encoding.rotary") is None  # a real module goes to Python's finders
    assert finder.find_spec("numpy") is None
    with pytest.raises(AttributeError, match="no attribute 'no_such_module'"):
        posenc.no_such_module  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("posenc.no_such_module")


def test_posenc_itself_never_imports_an_old_path():
    """Every module of the package imports with the old paths' warnings made errors."""
    names = []
    for path in sorted((ROOT / "src" / "posenc").rglob("*.py")):
        parts = ("posenc", *path.relative_to(ROOT / "src" / "posenc").with_suffix("").parts)
        if parts[-1] != "__main__":
            names.append(".".join(parts).removesuffix(".__init__"))
    code = textwrap.dedent(
        f"""
        import importlib, warnings
        warnings.filterwarnings("error", message=r"posenc\\.\\S+ is deprecated", category=DeprecationWarning)
        for name in {names!r}:
            importlib.import_module(name)
        try:
            import posenc.rotary
        except DeprecationWarning as exc:
            print("refused:", exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: posenc.rotary is deprecated"), result.stdout
