"""``posenc compare --until decided``: the pieces of adding seeds look by look (the loop itself is
:func:`posenc.compare.compare_until_decided`).

The profile's plan (``[sequential]``: seeds per encoding at each look) and its declared questions are
fixed before the first run and kept in ``run.json`` (:func:`plan_info`); a directory run on another
plan is refused (:func:`check_same_plan`), because a plan changed after looking at results spends an
error rate it does not have. The first look runs the profile's grid at its first seeds (the table
every profile publishes); each later look adds seeds for the questions' encodings and tasks only
(:func:`questions_profile`: no other task, no RoPE scalings or variants), its new seeds after the
profile's own (:func:`posenc.records.questions.look_seeds`). A look starts only if the time per unit of
work measured on the looks so far says it ends within the budget (:func:`fits_budget`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

from posenc.compare.profile import Profile
from posenc.core.errors import PosencError
from posenc.records.files import read_record_file
from posenc.records.questions import look_seeds

#: ``--budget`` as a number and a unit: ``30m``, ``1h``, ``90s``, ``1800`` (seconds).
BUDGET_FORM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_budget(text: str | None) -> float | None:
    """``--budget`` in seconds (None: no budget); a PosencError naming the option otherwise."""
    if text is None:
        return None
    found = BUDGET_FORM.match(text)
    if not found or float(found.group(1)) <= 0:
        raise PosencError(
            f"--budget must be a positive time like 30m, 1h, 90s or 1800 (seconds), got {text!r}"
        )
    return float(found.group(1)) * UNITS[found.group(2)]


def plan_info(prof: Profile, questions: dict[str, Any]) -> dict[str, Any]:
    """The plan as ``run.json`` keeps it: looks, spending, every seed in the order looks take them, and
    the questions (a resumed run must find all of them unchanged)."""
    plan = prof.sequential
    return {
        "looks": list(plan.looks),
        "spending": plan.spending,
        "seeds": list(look_seeds(prof.seeds, plan.looks[-1])),
        "questions": questions,
    }


def check_same_plan(out: Path, plan: dict[str, Any]) -> None:
    """Refuse ``out`` when its ``run.json`` says it was run ``--until decided`` on another plan."""
    data, reason = read_record_file(out / "run.json")
    if reason is not None or not isinstance(data, dict) or not isinstance(data.get("until"), dict):
        return  # no run.json, or one of a run without a plan: its records are the first look's to resume
    stored = data["until"].get("plan")
    if json.loads(json.dumps(stored)) != json.loads(json.dumps(plan)):
        raise PosencError(
            f"{out} was run with --until decided on another plan ({_plan_text(stored)}; this one: "
            f"{_plan_text(plan)}): a plan changed after looking at its results does not hold its error rate. "
            "Resume it with the same profile, or use another --out"
        )


def _plan_text(plan: Any) -> str:
    if not isinstance(plan, dict):
        return "unreadable"
    q = plan.get("questions") or {}
    return (
        f"looks {plan.get('looks')}, {plan.get('spending')} spending, seeds {plan.get('seeds')}, reference "
        f"{q.get('reference')!r} against {q.get('against')} in {q.get('primary')}"
    )


def questions_profile(prof: Profile) -> Profile:
    """The grid a later look runs: the questions' tasks and encodings (the reference and those compared
    with it), without RoPE scalings, variants, schedules or randomized positions (the questions read
    the plain runs only), at the profile's model, training and evaluation."""
    q = prof.questions
    tasks = tuple(dict.fromkeys(item.partition(":")[0] for item in q.primary))
    against = (
        q.against if q.against is not None else tuple(e for e in prof.encodings or () if e != q.reference)
    )
    encodings = (q.reference, *against) if prof.encodings is not None or q.against is not None else None
    return dataclasses.replace(
        prof, tasks=tasks, encodings=encodings, scalings=(), finetune=0, variants=(), schedules=(),
        randomized=(), scaled_variants=False,
    )  # fmt: skip


def new_seeds(prof: Profile, index: int) -> tuple[int, ...]:
    """What seeds look ``index`` adds (the first look: all of its seeds)."""
    looks = prof.sequential.looks
    now = look_seeds(prof.seeds, looks[index])
    before = look_seeds(prof.seeds, looks[index - 1]) if index else ()
    return now[len(before) :]


def fits_budget(elapsed: float, per_unit: float | None, units: float, budget: float | None) -> bool:
    """True when a look of ``units`` work units still to run (training-step equivalents,
    :meth:`posenc.records.spec.RunSpec.work_units`), at ``per_unit`` seconds each (measured on the looks
    so far; None: not measured yet), ends within ``budget`` seconds (None: no budget)."""
    if budget is None or per_unit is None:
        return True
    return elapsed + per_unit * units <= budget


def progress_text(status: dict[str, Any], look: int, index: int, looks: int, elapsed: float) -> list[str]:
    """What the command says after a look: how many questions are decided, which, and which are not."""
    entries = status.get("questions", [])
    decided = [e for e in entries if e.get("decided")]
    lines = [
        f"look {index + 1} of {looks} ({look} seeds per encoding, {elapsed:.0f} s so far): "
        f"{len(decided)} of {len(entries)} questions decided"
    ]
    for e in entries:
        name = f"{e['label']} - {e['reference']}, {e['task']} {e['column']}"
        if e.get("decided"):
            lines.append(f"  decided: {name} ({e['diff']:+.3g}, at {e.get('decided_at')} seeds)")
        else:
            p = e.get("p_looks") or [math.nan]
            lines.append(f"  undecided: {name} (p {p[-1]:.2g} at {look} seeds)")
    return lines
