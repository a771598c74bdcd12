"""A table's primary questions, decided as one family: what a profile declares it exists to answer
(:class:`posenc.records.questions.Questions`), read from the records.

Each question is one encoding against the profile's reference in one column (``alibi`` against
``rope`` at copy's answer-token accuracy at 1.25x). Its test is the one its task declares: Welch's
test over independent seeds (:func:`posenc.results.paired.independent_arrays`) or the paired t test
over seeds paired by seed number (:func:`posenc.results.paired.paired_arrays`), each with the shared
examples' part of the variance added, and with ``-exact`` its p-value never below the exact
permutation or sign-flip test's of the per-seed means, which holds for any distribution of seed outcomes
(all-or-nothing seeds included) and cannot fall below ``2 / C(2n, n)`` or ``2 / 2^n``.

- **A fixed number of seeds** (:func:`fixed_block`): Holm's method over the family at ``alpha``; a
  question is *decided* where its Holm-adjusted p-value is below ``alpha`` (the sign of the difference
  says which way). *Detectable* is the difference the question's test detects with 80% power at Holm's
  first level (``alpha / questions``, :func:`posenc.results.design.family_level`) at the column's seeds,
  from the column's pooled seed spread, its upper 70% confidence bound
  (:func:`posenc.results.design.pooled_spread`): for Welch's test the spread of each row's seed means
  about its own mean, for the paired test that of each question's per-seed differences. The median of
  three-seed SDs (what the exploratory table's ``detectable`` reads) averages 0.85 of the truth, and a
  difference stated from it is found far less often than promised; ``tests/unit/results/test_primary.py``
  simulates the power at the difference this prints.
- **Seeds added in looks** (:func:`sequential_block`, ``posenc compare --until decided``): at each look
  of the profile's plan the test reads every seed so far, a question is decided once its p-value at
  some look reaches that look's nominal level (:func:`posenc.results.sequential.boundaries`, the error
  spent as the plan says), Holm's method recycled over the looks
  (:func:`posenc.results.sequential.decide_looks`).
- **Learned or not** (:func:`learned_notes`): in a rate column, each row's seeds that reach 50% (a seed
  learned the bucket) out of its seeds, named where they split: there the mean mixes two outcomes,
  the k of N is its own outcome (an exact interval), and only an exact test can be trusted.

Every other cell and pair of the tables is exploratory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.records.columns import bounded
from posenc.records.questions import Questions, SequentialSpec, look_seeds
from posenc.results import design, paired, sequential
from posenc.results.verdict_rules import holm

Records = Sequence[dict[str, Any]]
#: What the table calls each test.
TEST_NAMES = {
    "welch": "Welch t over seeds",
    "welch-exact": "Welch t over seeds, never below the exact permutation test",
    "paired": "paired t over seeds (paired by seed)",
    "paired-exact": "paired t over seeds (paired by seed), never below the exact sign-flip test",
}


@dataclass(frozen=True)
class Question:
    """``label`` against ``reference`` in ``task``'s ``column``, by ``test`` (a name of
    :data:`posenc.records.questions.TESTS`)."""

    label: str
    reference: str
    task: str
    column: str
    test: str

    @property
    def name(self) -> str:
        return f"{self.label} vs {self.reference}: {self.task} {self.column}"

    @property
    def paired(self) -> bool:
        return self.test.startswith("paired")

    @property
    def exact(self) -> bool:
        return self.test.endswith("-exact")


def questions_of(declared: Questions, records: Records) -> list[Question]:
    """The family: each encoding of ``declared.against`` (default: every encoding run in the column's
    task, by its plain runs, other than the reference) against the reference, in each primary column."""
    out = []
    for task, column in declared.columns():
        against = declared.against
        if against is None:
            found = {
                r["label"]
                for r in records
                if r["spec"]["task"] == task and r["label"] == r["spec"]["encoding"]
            }
            against = tuple(sorted(found - {declared.reference}))
        out += [Question(label, declared.reference, task, column, declared.test(task)) for label in against]
    return out


def _rows(records: Records, q: Question, seeds: Sequence[int] | None) -> tuple[dict, dict]:
    """Each side's ``{seed: unit values}`` of its converged runs (only ``seeds`` where given)."""
    a = paired.seed_data(records, q.label, q.task, q.column)
    b = paired.seed_data(records, q.reference, q.task, q.column)
    if seeds is not None:
        keep = set(seeds)
        a, b = ({s: v for s, v in side.items() if s in keep} for side in (a, b))
    return a, b


def compare_question(records: Records, q: Question, seeds: Sequence[int] | None = None) -> dict[str, Any]:
    """``q``'s difference (label - reference), its 95% interval, the test's two-sided p-value and the
    seeds on each side (``seeds``: only these; NaN where a side has fewer than 2)."""
    a, b = _rows(records, q, seeds)
    if q.paired:
        shared = sorted(set(a) & set(b))
        a, b = {s: a[s] for s in shared}, {s: b[s] for s in shared}
    out: dict[str, Any] = {"diff": math.nan, "low": math.nan, "high": math.nan, "p": math.nan,
                           "seeds": [len(a), len(b)]}  # fmt: skip
    if len(a) < 2 or len(b) < 2:
        return out
    xa, xb = (np.stack([side[s] for s in sorted(side)]) for side in (a, b))
    rate = bounded(q.column)
    if q.paired:
        diff, low, high, p, _, _ = paired.paired_arrays(xa, xb, rate=rate, exact=q.exact)
    else:
        diff, low, high, p = paired.independent_arrays(xa, xb, rate=rate, exact=q.exact)
    return out | {"diff": float(diff), "low": float(low), "high": float(high), "p": float(p)}


def column_power(records: Records, qs: Sequence[Question], family: int, alpha: float) -> dict[str, Any]:
    """The detectable difference of one column's questions (the same task, column and test) at the
    family's first Holm level, from their pooled seed spread's upper bound (see the module doc)."""
    q = qs[0]
    if q.paired:
        groups = []
        for one in qs:
            a, b = _rows(records, one, None)
            shared = sorted(set(a) & set(b))
            groups.append([float(a[s].mean() - b[s].mean()) for s in shared])
        seeds = min((len(g) for g in groups), default=0)
    else:
        labels = [q.reference, *(one.label for one in qs)]
        groups = [
            [float(v.mean()) for v in paired.seed_data(records, lab, q.task, q.column).values()]
            for lab in labels
        ]
        seeds = min((len(g) for g in groups), default=0)
    spread = design.pooled_spread(groups)
    level = design.family_level(family, alpha=alpha)
    found = design.detectable(spread.upper, seeds, alpha=level, paired=q.paired, exact=q.exact)
    floor = (
        (paired.signflip_floor(seeds) if q.paired else paired.permutation_floor(seeds, seeds))
        if seeds
        else math.nan
    )
    return {
        "test": q.test, "seeds": seeds, "level": level, "sd": spread.sd, "df": spread.df, "sd_upper": spread.upper,
        "detectable": found, "exact_floor": floor if q.exact else None,
        "seeds_to_reach": _seeds_to_reach(q, level) if q.exact and floor > level else None,
    }  # fmt: skip


def _seeds_to_reach(q: Question, level: float) -> int:
    """The fewest seeds per encoding at which the exact test's floor is at most ``level``."""
    floor = paired.signflip_floor if q.paired else (lambda n: paired.permutation_floor(n, n))
    return next(n for n in range(2, 64) if floor(n) <= level)


def learned_notes(records: Records, qs: Sequence[Question]) -> dict[str, dict[str, list[int]]]:
    """Per rate column of the family, ``{label: [learned seeds, seeds]}`` of every row whose seeds split
    (some learned the bucket, some did not: :func:`posenc.results.paired.learning`)."""
    out: dict[str, dict[str, list[int]]] = {}
    for q in qs:
        if not bounded(q.column):
            continue
        key = f"{q.task}:{q.column}"
        for label in (q.reference, q.label):
            data = paired.seed_data(records, label, q.task, q.column)
            if len(data) < 2:
                continue
            got = paired.learning(np.stack([data[s] for s in sorted(data)]))
            if 0 < got.k < got.n:
                out.setdefault(key, {})[label] = [got.k, got.n]
    return out


def _by_column(qs: Sequence[Question]) -> dict[str, list[Question]]:
    out: dict[str, list[Question]] = {}
    for q in qs:
        out.setdefault(f"{q.task}:{q.column}", []).append(q)
    return out


def _entry(q: Question, found: Mapping[str, Any]) -> dict[str, Any]:
    return {"question": q.name, "label": q.label, "reference": q.reference, "task": q.task,
            "column": q.column, "test": q.test, **found}  # fmt: skip


def fixed_block(records: Records, declared: Questions) -> dict[str, Any]:
    """The family tested once at every seed run: each question's difference, interval, p-value, Holm-
    adjusted p-value and whether it is decided; each column's detectable difference; learned notes."""
    qs = questions_of(declared, records)
    found = [compare_question(records, q) for q in qs]
    adjusted = holm([f["p"] for f in found])
    entries = []
    for q, f, p_holm in zip(qs, found, adjusted):
        decided = not math.isnan(p_holm) and p_holm < declared.alpha
        entries.append(_entry(q, f | {"p_holm": p_holm, "decided": decided}))
    return {
        "mode": "fixed", "reference": declared.reference, "alpha": declared.alpha, "correction": declared.correction,
        "family": len(qs), "level": design.family_level(max(1, len(qs)), alpha=declared.alpha),
        "questions": entries,
        "columns": {key: column_power(records, group, len(qs), declared.alpha) for key, group in _by_column(qs).items()},
        "learned": learned_notes(records, qs),
    }  # fmt: skip


def _plan(q: Question, spec: SequentialSpec, alpha: float) -> sequential.SequentialPlan:
    return sequential.SequentialPlan(
        spec.looks, alpha=alpha, spending=spec.spending, exact=q.exact, paired=q.paired
    )


def looks_done(
    records: Records, qs: Sequence[Question], spec: SequentialSpec, seeds: Sequence[int]
) -> list[int]:
    """The looks of ``spec`` whose every seed (:func:`posenc.records.questions.look_seeds` of ``seeds``)
    ran for both rows of every question (converged or not: a run that did not converge is still a look's)."""
    ran = {(r["label"], r["spec"]["task"], int(r["spec"]["seed"])) for r in records}
    done = []
    for look in spec.looks:
        wanted = look_seeds(seeds, look)
        if all((lab, q.task, s) in ran for q in qs for lab in (q.label, q.reference) for s in wanted):
            done.append(look)
        else:
            break
    return done


def sequential_block(
    records: Records, declared: Questions, spec: SequentialSpec, seeds: Sequence[int]
) -> dict[str, Any]:
    """The family after the looks its records complete (``seeds``: the profile's, in the order looks
    take them): each question's p-value at each look, decided or not (and at which look), and at the
    last look its difference and interval; which questions are undecided; whether every one is."""
    qs = questions_of(declared, records)
    done = looks_done(records, qs, spec, seeds)
    p = np.full((len(qs), len(done)), np.nan)
    for j, look in enumerate(done):
        for i, q in enumerate(qs):
            p[i, j] = compare_question(records, q, look_seeds(seeds, look))["p"]
    plans = [_plan(q, spec, declared.alpha) for q in qs]
    decided = sequential.decide_looks(p, plans, declared.alpha) if done else np.zeros(len(qs), dtype=bool)
    at = _decided_at(p, plans, declared.alpha) if done else [None] * len(qs)
    entries = []
    for i, q in enumerate(qs):
        last = (
            compare_question(records, q, look_seeds(seeds, done[-1]))
            if done
            else compare_question(records, q)
        )
        found = {"p_looks": p[i].tolist(), "decided": bool(decided[i]), "decided_at": at[i]}
        entries.append(_entry(q, last | found))
    undecided = [e["question"] for e in entries if not e["decided"]]
    return {
        "mode": "sequential", "reference": declared.reference, "alpha": declared.alpha,
        "correction": f"{declared.correction}, recycled over the looks", "family": len(qs),
        "level": design.family_level(max(1, len(qs)), alpha=declared.alpha),
        "plan": {"looks": list(spec.looks), "spending": spec.spending, "seeds": list(look_seeds(seeds, spec.looks[-1]))},
        "looks_done": done, "questions": entries, "undecided": undecided,
        "all_decided": bool(qs) and not undecided,
        "columns": {key: column_power(records, group, len(qs), declared.alpha) for key, group in _by_column(qs).items()},
        "learned": learned_notes(records, qs),
    }  # fmt: skip


def _decided_at(p: np.ndarray, plans: Sequence[sequential.SequentialPlan], alpha: float) -> list[int | None]:
    """For each question of the family, seeds per encoding at the first look at which it was decided (None: not
    decided): Holm's method recycled over the looks, step by step, each newly decided question at the
    level it was decided at (alpha over the questions then open); the decided set is
    :func:`posenc.results.sequential.decide_looks`'s."""
    at: list[int | None] = [None] * len(plans)
    while True:
        level = alpha / max(1, sum(1 for a in at if a is None))
        new = False
        for i, plan in enumerate(plans):
            if at[i] is not None:
                continue
            bounds = sequential.boundaries(plan, level)[: p.shape[-1]]
            hit = [
                k
                for k, (value, bound) in enumerate(zip(p[i], bounds))
                if not math.isnan(value) and value <= bound
            ]
            if hit:
                at[i], new = plan.looks[hit[0]], True
        if not new or all(a is not None for a in at):
            return at


def block(
    records: Records, questions: Mapping[str, Any] | None, sequential_spec: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The primary block of a summary: None without declared questions; with a plan that ran
    (``sequential_spec``: its ``looks``, ``spending`` and the profile's ``seeds``), the sequential
    decisions, else the fixed test of every seed run."""
    declared = Questions.from_dict(questions)
    if not declared.declared or not any(r["label"] == declared.reference for r in records):
        return None  # no questions, or a grid without the reference (--encodings left it out)
    if not questions_of(declared, records):
        return None
    if sequential_spec:
        spec = SequentialSpec.from_dict(sequential_spec)
        if spec.declared:
            seeds = [int(s) for s in sequential_spec.get("seeds") or ()]
            return sequential_block(records, declared, spec, seeds)
    return fixed_block(records, declared)


def declared(info: dict[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments of :func:`posenc.results.tables.summarize` a run's ``run.json`` (``info``) declares: its profile's
    ``questions`` and, for a run of ``posenc compare --until decided``, its plan (``sequential``)."""
    info = info or {}
    until = info.get("until")
    plan = until.get("plan") if isinstance(until, dict) else None
    return {"questions": info.get("questions"), "sequential": plan}


def summary_part(
    records: Records, questions: Mapping[str, Any] | None, sequential_spec: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What a summary holds of the declared questions (nothing without them): ``primary``, the family
    decided as one (:func:`block`: tested once at every seed run, or look by look with the plan of a
    ``--until decided`` run), and for such a run ``sequential`` (:func:`sequential_summary`)."""
    decided = block(records, questions, sequential_spec)
    if not decided:
        return {}
    if decided["mode"] != "sequential":
        return {"primary": decided}
    return {"primary": decided, "sequential": sequential_summary(decided)}


def sequential_summary(block: dict[str, Any]) -> dict[str, Any]:
    """What a ``--until decided`` run decided: its plan, the looks its records complete, each question's
    decision (and seeds per encoding at the look that decided it), the undecided ones, and whether all are."""
    keep = ("question", "decided", "decided_at", "diff", "p_looks")
    return {
        "plan": block["plan"], "looks_done": block["looks_done"], "all_decided": block["all_decided"],
        "undecided": block["undecided"], "decisions": [{k: q[k] for k in keep} for q in block["questions"]],
    }  # fmt: skip
