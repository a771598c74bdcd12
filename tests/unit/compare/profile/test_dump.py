"""--print-config (posenc.compare.profile.dump): the effective profile written as TOML, in time linear in its size, and read back as the same profile."""

from __future__ import annotations

import dataclasses

import tomlkit

from posenc.compare.profile import (
    PROFILES,
    dump_profile,
    load_profile,
)


def test_print_config_builds_a_long_list_in_one_step(monkeypatch):
    """Found: --print-config with 16k seeds took 28 s (100k: killed after 12 min): tomlkit adds
    array items one at a time, re-indexing the whole array each time. Counted, not timed: the
    per-item inserts must not grow with the number of seeds."""
    inserts = []
    original = tomlkit.items.Array.insert
    monkeypatch.setattr(
        tomlkit.items.Array, "insert", lambda self, *a: (inserts.append(1), original(self, *a))[1]
    )
    counts = {}
    for n in (100, 2000):
        inserts.clear()
        prof = dataclasses.replace(PROFILES["smoke"], seeds=tuple(range(n)))
        text = dump_profile(prof)
        counts[n] = len(inserts)
        assert tomlkit.parse(text)["seeds"] == list(range(n))
    assert counts[2000] == counts[100], counts


def test_a_long_seed_list_round_trips_through_a_file(tmp_path):
    path = tmp_path / "long.toml"
    prof = dataclasses.replace(PROFILES["smoke"], seeds=tuple(range(500)))
    path.write_text(dump_profile(prof))
    assert load_profile(path) == dataclasses.replace(prof, name="long")
