"""A run's spec (posenc.records.spec.RunSpec): picklable, round-tripping through JSON with its run id, which is worked out once and names what the run computes, not where it runs."""

from __future__ import annotations

import dataclasses
import json
import pickle

from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.records.spec import RunSpec

SMOKE = get_profile("smoke")


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def test_spec_pickles_and_round_trips_through_json():
    for spec in build_grid(get_profile("full"), tasks=("copy", "lm")).specs[:40]:
        assert pickle.loads(pickle.dumps(spec)) == spec
        again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
        assert again == spec and again.run_id == spec.run_id
    a, b = (
        smoke_specs(encodings=("nope",), tasks=("copy",))[0],
        smoke_specs(encodings=("nope",), tasks=("lm",))[0],
    )
    assert a.run_id != b.run_id
    assert (
        dataclasses.replace(a, threads=2, profile="x").run_id == a.run_id
    )  # execution details are not identity


def test_a_run_id_is_worked_out_once_and_not_carried_to_another_spec(monkeypatch):
    spec = smoke_specs(encodings=("nope",), tasks=("copy",))[0]
    calls = []
    identity = RunSpec.identity
    monkeypatch.setattr(RunSpec, "identity", lambda self: calls.append(1) or identity(self))
    first = spec.run_id
    assert [spec.run_id for _ in range(5)] == [first] * 5 and len(calls) == 1
    other = dataclasses.replace(spec, seed=spec.seed + 1)
    assert other.run_id != first and len(calls) == 2
    assert pickle.loads(pickle.dumps(spec)).run_id == first
    assert "_run_id" not in spec.to_dict() and "_run_id" not in spec.identity()
