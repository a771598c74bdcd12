"""The local executor (a process pool): every result comes back, a failure as its exception, progress reported."""

from __future__ import annotations

import dataclasses

from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.records.spec import RunSpec

SMOKE = get_profile("smoke")


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def _double(spec, advance):  # module level: picklable for worker processes
    advance(3)
    if spec.seed == 13:
        raise RuntimeError("boom")
    return {"seed": spec.seed * 2}


def test_process_pool_executor_yields_every_result_and_reports_failures():
    base = smoke_specs(encodings=("nope",), tasks=("copy",))[0]
    specs = [dataclasses.replace(base, seed=s) for s in (1, 2, 13)]
    seen: list[int] = []
    results = dict(
        (spec.seed, result)
        for spec, result in LocalExecutor(2).map(_double, specs, lambda s, u: seen.append(u))
    )
    assert results[1] == {"seed": 2} and results[2] == {"seed": 4}
    assert isinstance(results[13], RuntimeError)
    assert sum(seen) == 9
