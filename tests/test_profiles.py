"""The shipped profiles: each expands to the very runs (content-hashed run ids) it did before
the profiles became data files, so records on disk and the shipped learning-rate choices
still match them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.compare.grid import build_grid
from posenc.compare.profile import PROFILES
from posenc.registry import ENCODINGS

PINNED = json.loads((Path(__file__).parent / "data" / "profile_run_ids.json").read_text())["profiles"]


def _key(spec) -> str:
    return f"{spec.task} {spec.label} seed{spec.seed}"


def test_every_shipped_profile_is_pinned():
    assert set(PINNED) == set(PROFILES)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_shipped_profile_gives_the_pinned_run_ids(name):
    specs = build_grid(PROFILES[name]).specs
    produced = {_key(spec): spec.run_id for spec in specs}
    assert len(produced) == len(specs)  # one run per (task, label, seed)
    assert all(spec.profile == name for spec in specs)
    pinned = PINNED[name]
    missing = sorted(set(pinned) - set(produced))
    assert not missing, f"{name}: runs no longer in the grid: {missing[:5]}"
    changed = sorted(k for k in pinned if produced[k] != pinned[k])
    assert not changed, f"{name}: run ids changed: {changed[:5]}"
    # Runs beyond the pinned ones may only come from encodings registered since (profiles
    # that take every registered encoding grow with the registry).
    pinned_encodings = {spec.encoding for spec in specs if _key(spec) in pinned}
    extra = [spec for spec in specs if _key(spec) not in pinned]
    assert all(spec.encoding not in pinned_encodings and spec.encoding in ENCODINGS for spec in extra), [
        _key(spec) for spec in extra[:5]
    ]
