"""The library needs only numpy and torch; click, rich, matplotlib and scipy (and tomli on Python
3.10 to read the benchmark's TOML profiles, tomlkit to write them back) serve the CLI, figures, report and benchmark (the ``cli`` extra). Importing posenc changes one thing outside it, the finder of
its old module paths on ``sys.meta_path``, and nothing else (but Python's random, which rich, of the
cli extra, draws from when it is imported).

Each check runs in a fresh interpreter: the parent test process has long imported everything.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import posenc

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(posenc.__file__).parent
EXTRAS = ("click", "rich", "matplotlib", "scipy", "tomli", "tomlkit")
# The parts of posenc that use the `cli` extra (everything else is the library).
USES_EXTRAS = (
    "posenc.compare",
    "posenc.extend",
    "posenc.results",
    "posenc.cli",
    "posenc.report",
    "posenc.tour",
    "posenc.viz",
    "posenc.__main__",
)

BLOCKER = textwrap.dedent(
    """
    import sys

    class Blocker:  # as if the cli extra were not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {extras!r}:
                raise ImportError(f"No module named {{name!r}}", name=name)

    sys.meta_path.insert(0, Blocker())
    """
).format(extras=set(EXTRAS))


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("posenc",) + path.relative_to(PACKAGE).with_suffix("").parts
        names.append(".".join(parts).removesuffix(".__init__"))
    return names


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_the_package_needs_numpy_and_torch_only_and_the_cli_extra_has_the_rest():
    """From the installed metadata (what pip resolves from pyproject.toml)."""
    requires = importlib.metadata.requires("posenc") or []

    def names(extra: str | None) -> list[str]:
        picked = [r for r in requires if (f'extra == "{extra}"' in r if extra else "extra ==" not in r)]
        return sorted(re.split(r"[<>=;\[ ]", r, maxsplit=1)[0] for r in picked)

    assert names(None) == ["numpy", "torch"]
    assert names("cli") == sorted(EXTRAS)
    assert any(r.startswith("posenc[cli]") and 'extra == "test"' in r for r in requires)  # tests run the CLI


def test_the_readme_setup_command_installs_the_cli_extra_by_default():
    """`bash scripts/setup.sh && .venv/bin/posenc compare` needs click, rich, matplotlib and scipy."""
    setup = (ROOT / "scripts/setup.sh").read_text()
    assert 'extras="${POSENC_EXTRAS-cli}"' in setup
    assert "bash scripts/setup.sh && .venv/bin/posenc compare" in (ROOT / "README.md").read_text()


def test_the_library_imports_and_runs_without_click_rich_matplotlib():
    library = [n for n in module_names() if not n.startswith(USES_EXTRAS)]
    assert {"posenc", "posenc.nn.transformer", "posenc.nn.attention", "posenc.hf", "posenc.schedules"} <= set(
        library
    )
    code = BLOCKER + textwrap.dedent(
        f"""
        import importlib
        for name in {library!r}:
            importlib.import_module(name)
        import torch, posenc
        from posenc import schedules
        from posenc.nn.transformer import Transformer, TransformerConfig
        for name in posenc.ENCODINGS:
            posenc.build_for_model(name, d_model=16, num_heads=2)
        for encoding in ("rope", "alibi", schedules.irope(2, nope_every=2)):
            model = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=2,
                                                  ffn_dim=8, encoding=encoding))
            assert model(torch.randint(0, 11, (2, 5))).shape == (2, 5, 11)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {set(EXTRAS)!r})
        assert not loaded, loaded
        print("ok")
        """
    )
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_import_posenc_loads_no_plotting_or_cli_module_and_sets_no_umask_or_backend():
    """Import every module, CLI included (the extras installed): none may call os.umask or
    matplotlib.use, and plain `import posenc` loads none of the extras at all."""
    code = textwrap.dedent(
        f"""
        import importlib, os, sys
        calls = []
        real_umask = os.umask
        os.umask = lambda mask: calls.append(("umask", mask)) or real_umask(mask)
        import posenc
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {set(EXTRAS)!r} or m.startswith("posenc.cli"))
        assert not loaded, loaded
        import matplotlib
        backend = matplotlib.rcParams._get_backend_or_none()
        matplotlib.use = lambda *a, **k: calls.append(("matplotlib.use", a))
        for name in {module_names()!r}:
            if name != "posenc.__main__":
                importlib.import_module(name)
        assert calls == [], calls
        assert matplotlib.rcParams._get_backend_or_none() == backend, backend
        print("ok")
        """
    )
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_cli_without_its_extra_says_how_to_install_it_in_one_line():
    for entry in (
        "from posenc.cli import main; main()",
        "import runpy; runpy.run_module('posenc', run_name='__main__')",
    ):
        result = run(BLOCKER + entry)
        assert result.returncode == 1, result
        assert "pip install 'posenc[cli]'" in result.stderr
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


STATE = textwrap.dedent(
    """
    import logging, os, random, sys, warnings
    import numpy as np
    import torch

    def state():
        return {
            "sys.path_hooks": list(sys.path_hooks), "sys.path": list(sys.path),
            "warnings.filters": list(warnings.filters), "os.environ": dict(os.environ),
            "logging": (logging.root.level, list(logging.root.handlers)),
            "torch": (torch.get_default_dtype(), torch.get_num_threads(),
                      torch.are_deterministic_algorithms_enabled(), torch.random.get_rng_state().tolist()),
            "numpy": (np.random.get_state()[1].tolist(), np.geterr()),
            "random": random.getstate(), "sys": (sys.excepthook, sys.getrecursionlimit()),
        }

    finders, before = list(sys.meta_path), state()
    """
)


def test_importing_posenc_adds_the_finder_of_old_paths_and_changes_nothing_else():
    """docs/architecture.md, "Dependencies": importing posenc and every module of the library puts one
    finder first on sys.meta_path, which answers only the old module paths of posenc.MOVED, and
    changes no other state a user's program shares (path hooks, warning filters, the environment,
    logging, torch's and numpy's settings and random states, Python's random). The modules that use
    the cli extra change nothing more but Python's random: rich draws 24 bits from it when imported."""
    library = [n for n in module_names() if not n.startswith(USES_EXTRAS)]
    extras = [n for n in module_names() if n.startswith(USES_EXTRAS) and n != "posenc.__main__"]
    code = STATE + textwrap.dedent(
        f"""
        import importlib
        for name in {library!r}:
            importlib.import_module(name)
        import posenc
        added = [f for f in sys.meta_path if f not in finders]
        assert [type(f).__name__ for f in added] == ["MovedModules"], added
        assert sys.meta_path == [added[0], *finders], sys.meta_path
        finder = added[0]
        assert finder.find_spec("json") is None and finder.find_spec("posenc.encoding.rotary") is None
        assert all(finder.find_spec(old) is not None for old in posenc.MOVED)
        after = state()
        changed = sorted(key for key in before if before[key] != after[key])
        assert not changed, changed
        for name in {extras!r}:
            importlib.import_module(name)
        after = state()
        changed = sorted(key for key in before if before[key] != after[key])
        assert changed == ["random"] and sys.meta_path == [added[0], *finders], changed
        print("ok")
        """
    )
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_state_check_sees_a_change():
    """The check above can fail: a module that sets a warning filter or seeds torch is caught."""
    code = STATE + textwrap.dedent(
        """
        warnings.simplefilter("ignore")
        torch.manual_seed(1)
        after = state()
        print(sorted(key for key in before if before[key] != after[key]))
        """
    )
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['torch', 'warnings.filters']"
