"""Encodings and tasks from outside posenc pass the contract before a grid trains them.

posenc's own encodings and tasks pass the whole contract (:mod:`posenc.testing`) in posenc's test
suite, so they are not checked again here. Every other one a grid names (registered, an installed
entry point, an import spec) is checked before any run: an encoding against
:data:`~posenc.testing.FAST_PROPERTIES` (all but ``compile``), built as the grid builds it (the
profile's model width and heads, the run's Config values), and a task against every property of
:data:`~posenc.testing.TASK_PROPERTIES`. A failure stops the grid with the report, so that a
broken class is never trained and read as a result (``posenc compare --no-check`` skips this).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from posenc.core.errors import PosencError
from posenc.records.provenance import encodings_of
from posenc.records.spec import RunSpec
from posenc.registry import BUILTINS as BUILTIN_ENCODINGS
from posenc.tasks import task_registry
from posenc.testing import FAST_PROPERTIES, CheckReport, check_encoding, check_task


def _encoding_checks(specs: Sequence[RunSpec]) -> dict[str, tuple[str, dict[str, Any], int, int]]:
    """One check per outside encoding, Config and model shape the grid builds: key -> arguments."""
    found: dict[str, tuple[str, dict[str, Any], int, int]] = {}
    for spec in specs:
        for name in encodings_of(spec):
            if name in BUILTIN_ENCODINGS:
                continue
            config = dict(spec.encoding_config.get(name, {}) if spec.schedule else spec.encoding_config)
            model = spec.model
            key = json.dumps([name, config, model.d_model, model.num_heads], sort_keys=True, default=str)
            found.setdefault(key, (name, config, model.d_model, model.num_heads))
    return found


def check_plugins(specs: Sequence[RunSpec], *, log: Callable[[str], None] = print) -> list[CheckReport]:
    """Check every encoding and task of ``specs`` that is not posenc's own against the contract;
    each report goes to ``log`` (a failed one whole, a passed one in a line). Raises PosencError
    naming the failures (after logging their reports); returns the reports."""
    reports: list[tuple[str, CheckReport]] = []
    for name, config, d_model, num_heads in _encoding_checks(specs).values():
        report = check_encoding(
            name, properties=FAST_PROPERTIES, d_model=d_model, num_heads=num_heads, **config
        )
        shown = name + (f" with {', '.join(f'{k}={v!r}' for k, v in config.items())}" if config else "")
        reports.append((f"encoding {shown}", report))
    for task in dict.fromkeys(spec.task for spec in specs):
        if task != task_registry.LM and task not in task_registry.BUILTINS:
            reports.append((f"task {task}", check_task(task)))
    failed = []
    for what, report in reports:
        if report.passed:
            counts = {s: sum(r.status == s for r in report.results) for s in ("PASS", "SKIP")}
            log(f"contract: {what} passes ({counts['PASS']} properties; {counts['SKIP']} not applicable)")
        else:
            log(f"contract: {report}")
            failed.append(f"{what} ({', '.join(r.name for r in report.failures)})")
    if failed:
        raise PosencError(
            f"{'; '.join(failed)} fail(s) posenc's contract (the report is above; posenc check NAME "
            "runs it alone): nothing was trained. Fix the class, or pass --no-check to train it anyway"
        )
    return [report for _, report in reports]


__all__ = ["check_plugins"]
