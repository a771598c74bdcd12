"""The package's layering, as docs/architecture.md draws it, read from the source with ``ast``.

The rules: no ``posenc`` import inside a function or class (imports are visible at the
top of every module), every import points to the same row of the layer table or a lower
one, the module graph has no cycle, the leaves (``posenc.core``) import nothing of posenc
outside ``posenc.core``, the fast paths (``posenc.kernels``) import only ``posenc.core`` (never
the encoding base classes, a family or the NumPy references), the packages the document lists
as independent reach neither the other through any chain of imports, and the top level of the
package holds a handful of modules beside its folders.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from posenc.encoding.base import KINDS
from posenc.registry import BUILTINS

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def layer_table() -> dict[str, int]:
    """``module prefix -> row`` from the table between the ``layers`` markers in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("<!-- layers:start -->")[1].split("<!-- layers:end -->")[0]
    table = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in re.findall(r"`([\w.]+)`", cells[1]):
                table[name] = int(cells[0])
    return table


def independent_pairs() -> list[tuple[str, str]]:
    """``(package, package)`` pairs from the list between the ``independent`` markers."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("<!-- independent:start -->")[1].split("<!-- independent:end -->")[0]
    pairs = []
    for line in block.splitlines():
        names = re.findall(r"`([\w.]+)`", line)
        if line.strip().startswith("-") and len(names) >= 2:
            pairs.append((names[0], names[1]))
    return pairs


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "posenc").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = modules()
LAYERS = layer_table()


def row(module: str) -> int:
    """The row of the longest listed prefix (bare ``posenc`` means the package's ``__init__`` only)."""
    matches = [p for p in LAYERS if module == p or (p != "posenc" and module.startswith(p + "."))]
    assert matches, f"{module} is in no row of docs/architecture.md's layer table"
    return LAYERS[max(matches, key=len)]


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(imported posenc module, line, inside a function or class)`` for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nested.update(id(sub) for sub in ast.walk(node) if sub is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from posenc.x import y` imports the module posenc.x.y when there is one
            targets = [
                f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target == "posenc" or target.startswith("posenc."):
                found.append((target, node.lineno, id(node) in nested))
    return found


GRAPH = {name: sorted({t for t, _, _ in imports(path) if t != name}) for name, path in MODULES.items()}


def test_every_module_has_a_row_and_the_table_names_only_real_modules():
    for name in MODULES:
        row(name)
    for name in LAYERS:
        assert name in MODULES, f"docs/architecture.md lists {name}, which does not exist"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_function_level_imports_between_library_modules(name):
    late = [(target, line) for target, line, nested in imports(MODULES[name]) if nested]
    assert not late, f"{name} imports {late} inside a function or class; import at the top"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down_the_layer_table(name):
    up = [t for t in GRAPH[name] if row(t) > row(name)]
    assert not up, f"{name} (row {row(name)}) imports {[(t, row(t)) for t in up]} from a higher row"


LEAF_ROWS = (0, 1)  # posenc.core (errors in row 0), and beside it the NumPy references, the kernel builder


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def kernel_imports_above_the_leaves(name: str) -> list[str]:
    """What a ``posenc.kernels`` module imports beyond ``posenc.core`` and the kernels themselves."""
    return [t for t in GRAPH[name] if not (_inside(t, "posenc.kernels") or _inside(t, "posenc.core"))]


def core_imports_outside_core(name: str) -> list[str]:
    """What a ``posenc.core`` module imports of posenc outside ``posenc.core``."""
    return [t for t in GRAPH[name] if not _inside(t, "posenc.core")]


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if n == "posenc.kernels" or n.startswith("posenc.kernels."))
)
def test_kernels_import_only_leaves(name):
    above = kernel_imports_above_the_leaves(name)
    assert not above, f"{name} imports {[(t, row(t)) for t in above]}; kernels import only the leaves"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _inside(n, "posenc.core")))
def test_the_leaves_import_nothing_above_them(name):
    outside = core_imports_outside_core(name)
    assert not outside, f"{name} imports {outside}; posenc.core imports only posenc.core"
    assert row(name) in LEAF_ROWS, f"{name} is in row {row(name)}, above the leaves"


#: The package's top level beside its folders: the public face, ``python -m posenc``, the registry,
#: the presets, the schedules and the tour. More than this many is a folder that is missing.
TOP_LEVEL_MODULES = 8


def test_the_top_level_holds_a_handful_of_modules():
    top = sorted(p.name for p in (SRC / "posenc").glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, f"{len(top)} modules at the top of src/posenc: {top}"
    assert {"__init__.py", "__main__.py", "registry.py"} <= set(top)


def test_the_module_graph_has_no_cycle():
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in GRAPH.get(name, []):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(target) :] + [target]))
            if target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in MODULES:
        if name not in state:
            visit(name, [name])


def reachable(start: str, graph: dict[str, list[str]]) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, []))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, []))
    return seen


def test_independent_packages_never_reach_each_other():
    pairs = independent_pairs()
    assert pairs, "docs/architecture.md lists no independent packages"
    for a, b in pairs:
        assert a in MODULES and b in MODULES, (a, b)
        for one, other in ((a, b), (b, a)):
            for name in MODULES:
                if _inside(name, one):
                    found = sorted(t for t in reachable(name, GRAPH) if _inside(t, other))
                    assert not found, f"{name} reaches {other} through its imports: {found}"


def test_the_rules_catch_what_they_forbid(tmp_path):
    """The checks can fail: a late import, an upward import and a cycle are each found."""
    source = "import posenc.core.checks\n\ndef f():\n    from posenc.cli import main\n"
    path = tmp_path / "m.py"
    path.write_text(source)
    found = imports(path)
    assert ("posenc.core.checks", 1, False) in found and ("posenc.cli", 4, True) in found
    assert row("posenc.cli") > row("posenc.core.checks")
    # a kernel importing the base classes or a family is caught
    GRAPH["posenc.kernels.fused_rope"] = [
        *GRAPH["posenc.kernels.fused_rope"],
        "posenc.encoding.base",
        "posenc.encoding.rotary.rope",
    ]
    try:
        assert kernel_imports_above_the_leaves("posenc.kernels.fused_rope") == [
            "posenc.encoding.base",
            "posenc.encoding.rotary.rope",
        ]
    finally:
        GRAPH["posenc.kernels.fused_rope"] = GRAPH["posenc.kernels.fused_rope"][:-2]
    # so is a kernel reading the NumPy references (a leaf, but not posenc.core)
    GRAPH["posenc.kernels.rotation"] = [*GRAPH["posenc.kernels.rotation"], "posenc.reference.rotary"]
    try:
        assert kernel_imports_above_the_leaves("posenc.kernels.rotation") == ["posenc.reference.rotary"]
    finally:
        GRAPH["posenc.kernels.rotation"] = GRAPH["posenc.kernels.rotation"][:-1]
    # and a leaf importing anything outside posenc.core
    GRAPH["posenc.core.sincos"] = [*GRAPH["posenc.core.sincos"], "posenc.kernels.rotation"]
    try:
        assert core_imports_outside_core("posenc.core.sincos") == ["posenc.kernels.rotation"]
    finally:
        GRAPH["posenc.core.sincos"] = GRAPH["posenc.core.sincos"][:-1]
    assert row("posenc.core.positions") in LEAF_ROWS and row("posenc.encoding.base") not in LEAF_ROWS
    graph = {"posenc.compare.x": ["posenc.records.y"], "posenc.records.y": ["posenc.results.z"]}
    assert "posenc.results.z" in reachable("posenc.compare.x", graph)  # a chain through records counts


# ---------------------------------------------------------------------------
# One name per thing: modules, public classes, the encodings table.
# ---------------------------------------------------------------------------

#: Basenames any number of modules share: package faces, ``python -m``, and the NumPy references,
#: which mirror posenc.encoding on purpose (reference/rotary.py is the reference of the rotary kind).
SHARED_BASENAMES = frozenset({"__init__", "__main__"})


def duplicate_basenames(names: list[str]) -> dict[str, list[str]]:
    by_base: dict[str, list[str]] = {}
    for name in names:
        path = MODULES.get(name)
        base = path.stem if path is not None else name.rpartition(".")[2]
        if base in SHARED_BASENAMES or _inside(name, "posenc.reference"):
            continue
        by_base.setdefault(base, []).append(name)
    return {base: found for base, found in by_base.items() if len(found) > 1}


def test_no_two_modules_share_a_name():
    assert not duplicate_basenames(list(MODULES)), duplicate_basenames(list(MODULES))


def public_classes(names: list[str]) -> dict[str, list[str]]:
    """``class name -> [module, ...]`` for every public top-level class outside the references."""
    found: dict[str, list[str]] = {}
    for name in names:
        if _inside(name, "posenc.reference"):
            continue
        tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(name)
    return found


def test_no_two_public_classes_share_a_name():
    shared = {cls: where for cls, where in public_classes(list(MODULES)).items() if len(where) > 1}
    assert not shared, shared


def test_one_encodings_table():
    """``ENCODINGS`` is the registry's view and nothing else's (``posenc.ENCODINGS`` re-exports it)."""
    defined = []
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == "ENCODINGS" for t in targets):
                defined.append(name)
    assert defined == ["posenc.registry"], defined


#: The kinds' homes in posenc.encoding: a package per kind with members, a module per small kind.
KIND_HOMES = {
    "additive": "posenc.encoding.absolute",
    "rotary": "posenc.encoding.rotary",
    "bias": "posenc.encoding.bias",
    "relative": "posenc.encoding.relative",
    "contextual": "posenc.encoding.contextual",
    "none": "posenc.encoding.none",
}


def test_every_encodings_module_belongs_to_one_kind():
    assert set(KIND_HOMES) == set(KINDS)
    shared = {"posenc.encoding", "posenc.encoding.base"}
    for name in MODULES:
        if _inside(name, "posenc.encoding") and name not in shared:
            homes = [kind for kind, home in KIND_HOMES.items() if _inside(name, home)]
            assert len(homes) == 1, f"{name} belongs to no kind's package"


def test_every_builtin_lives_in_its_kinds_home():
    for name, cls in BUILTINS.items():
        assert _inside(cls.__module__, KIND_HOMES[cls.kind]), (
            f"{name} ({cls.__module__}) is not in its kind's home"
        )


def test_the_name_rules_catch_what_they_forbid():
    assert duplicate_basenames(["posenc.core.checks", "posenc.hf.checks"]) == {
        "checks": ["posenc.core.checks", "posenc.hf.checks"]
    }
    assert not duplicate_basenames(["posenc.encoding.rotary", "posenc.reference.rotary", "posenc.nn"])
    assert set(public_classes(["posenc.encoding.rotary.scaling", "posenc.records.benchmark_scalings"])) >= {
        "Scaling",
        "BenchmarkScaling",
    }


def test_unit_tests_mirror_the_package():
    """``tests/unit/<package>/`` mirrors ``src/posenc/<package>/``: every folder there names a package
    of posenc (the concern suites, contract, fuzz, layouts, hf, robustness and repo, sit beside it)."""
    unit = Path(__file__).resolve().parents[1] / "unit"
    package = ROOT / "src" / "posenc"
    folders = [p.relative_to(unit) for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert folders, "tests/unit has no folders"
    missing = [str(f) for f in folders if not (package / f / "__init__.py").is_file()]
    assert not missing, f"tests/unit folders with no package of that name in src/posenc: {missing}"
