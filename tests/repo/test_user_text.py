"""Text users read names papers and models, never internal notes, issue numbers or machine paths.

Scanned: the registry's paper strings and summaries, RoPE scaling and preset sources,
benchmark profile descriptions, the docstrings of every public module, class, function
and method, README.md and docs/*.md, and ``--help`` of every CLI command.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import posenc
from posenc import presets
from posenc.cli import main
from posenc.compare.profile import PROFILES
from posenc.encoding.rotary import scaling as rope_scaling

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = [
    re.compile(r"\bseeds?[ _]?0\d\d\b", re.I),  # "seed 003", the project's source notes by number
    re.compile(r"\b(the seeds|seeds'|seed notes|seed tutorial|seed's)\b", re.I),
    re.compile(r"\bissue \d+\b", re.I),
    re.compile(r"/work/|/shared/|\.\./shared"),  # machine paths
    re.compile(r"\b(BENCHMARK|DESIGN|STYLE)\.md\b"),  # internal design notes
    re.compile(r"\bhelper [A-Z]\b"),
]


def offending(text: str) -> list[str]:
    return [m.group(0) for pattern in FORBIDDEN for m in pattern.finditer(text or "")]


def public_docstrings():
    """``(where, docstring)`` for every public module, class, function and method of posenc."""
    names = ["posenc"] + [m.name for m in pkgutil.walk_packages(posenc.__path__, "posenc.")]
    for name in names:
        if name.split(".")[-1].startswith("_") and name != "posenc.__main__":
            continue
        module = importlib.import_module(name)
        yield name, module.__doc__
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                yield f"{name}.{attr}", obj.__doc__
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    if not member.startswith("_") and (
                        inspect.isfunction(value) or isinstance(value, property)
                    ):
                        yield f"{name}.{attr}.{member}", value.__doc__


def data_strings():
    for row in posenc.list_encodings():
        yield f"ENCODINGS[{row['name']}]", f"{row['paper']} {row['summary']}"
    for name, paper in rope_scaling.PAPERS.items():
        yield f"ROPE_SCALINGS[{name}]", paper
    for name, preset in presets.PRESETS.items():
        yield f"PRESETS[{name}]", f"{preset.paper} {preset.note} {preset.layout} {preset.source}"
    for name, profile in PROFILES.items():
        yield f"PROFILES[{name}]", f"{profile.description} {profile.why}"


def cli_help():
    def walk(command: click.Command, path: list[str]):
        yield path
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                yield from walk(sub, [*path, sub_name])

    for path in walk(main, []):
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        yield "posenc " + " ".join(path), result.output


def test_the_scan_finds_what_it_forbids():
    for bad in ("seed 004's table", "see /work/shared/x", "BENCHMARK.md rules", "issue 10", "helper E's"):
        assert offending(bad), bad
    assert not offending("seed 0 (random), 3 seeds, --seeds 0,1, docs/benchmark.md")


@pytest.mark.parametrize("source", ["docstrings", "data", "cli", "docs"])
def test_user_facing_text_names_sources_not_internal_notes(source):
    if source == "docstrings":
        items = list(public_docstrings())
    elif source == "data":
        items = list(data_strings())
    elif source == "cli":
        items = list(cli_help())
    else:
        items = [(p.name, p.read_text()) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    assert len(items) >= 5
    bad = {where: offending(text) for where, text in items if offending(text)}
    assert not bad, bad
