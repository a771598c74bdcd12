"""A learning rate for each encoding, picked by in-distribution validation only.

The benchmark protocol lets the learning rate differ per encoding, chosen from a small
grid (``Profile.lr_grid``) by in-distribution validation, never by test lengths. Here:

- every candidate trains the run's exact setting (model, task, training lengths, step
  cap, convergence check) at one learning rate, on a tuning seed (:data:`TUNE_SEED`)
  that no profile evaluates, and reports only its held-out in-distribution checks
  (:func:`posenc.compare.work.tune_execute`); its spec carries no evaluation lengths
  (:data:`TUNE_EVAL`), and the key a choice is stored under (:func:`tuning_key`) leaves
  the evaluation out, so no test length can reach the choice;
- :func:`select`: tasks take the candidate that converged (held-out exact match >=
  ``converge_at``) in the fewest steps, then the higher final held-out exact match; the
  LM takes the lowest held-out loss reached;
- choices are cached as records under ``OUT/tuning/`` and may be shipped with posenc
  (``tuned_lr.json`` next to this module, written by ``scripts/ship_tuning.py``
  together with the command that produced it) so that the quick profile need not
  re-tune on every machine. A run records its learning rate and where it came from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from posenc.compare.executor import Executor
from posenc.compare.profile.definition import ARCHITECTURE
from posenc.compare.profile.variants import VARIANT_KEYS
from posenc.compare.runner import GridOutcome, check_code, run_grid
from posenc.compare.work import tune_execute
from posenc.records.schema import checks_metric, tune_problem
from posenc.records.spec import EvalSpec, ModelSpec, RunSpec, TrainSpec
from posenc.records.store import ResultStore

TUNE_SEED = 1000  # no profile evaluates this seed
#: Candidates carry no evaluation lengths of a profile (only the held-out set's seed and
#: batch size are read, and those are EvalSpec's defaults), and evaluate nothing: no free-running
#: decoding, no test files (which also keeps the keys of the shipped choices as they were).
TUNE_EVAL = EvalSpec(free_running=False, lm_files=0)
SHIPPED = "tuned_lr.json"


def tuning_task(spec: RunSpec, share: dict[str, str]) -> str:
    """The task whose tuning ``spec`` uses (``share`` maps a task to another's choice)."""
    return share.get(spec.task, spec.task)


def shares_default(spec: RunSpec, share: dict[str, str] | None) -> bool:
    """True when ``spec`` is an architecture variant that takes its default run's choice:
    ``share[ARCHITECTURE] == "default"`` (:data:`posenc.compare.profile.ARCHITECTURE`), an ablation at
    one learning rate instead of a choice of its own."""
    return bool(spec.architecture_tags()) and (share or {}).get(ARCHITECTURE) == "default"


def candidate_base(spec: RunSpec, share: dict[str, str] | None = None) -> RunSpec:
    """``spec`` as tuned: the tuning task, seed :data:`TUNE_SEED`, no evaluation, no scalings
    (and the default architecture, when variants share their default run's choice)."""
    if shares_default(spec, share):
        defaults: dict[str, dict[str, Any]] = {"model": {}, "train": {}}
        for part, name, _ in VARIANT_KEYS.values():
            defaults[part][name] = getattr({"model": ModelSpec(), "train": TrainSpec()}[part], name)
        spec = dataclasses.replace(
            spec,
            model=dataclasses.replace(spec.model, **defaults["model"]),
            train=dataclasses.replace(spec.train, **defaults["train"]),
        )
    return dataclasses.replace(
        spec,
        task=tuning_task(spec, share or {}),
        seed=TUNE_SEED,
        eval=TUNE_EVAL,
        scalings=(),
        finetune=0,
        lr_source="",
    )


def tuning_key(spec: RunSpec, share: dict[str, str] | None = None) -> str:
    """What a learning-rate choice depends on: the run's identity without its learning
    rate, seed, evaluation and scalings (so the same choice serves every seed)."""
    identity = candidate_base(spec, share).identity()
    identity["train"].pop("lr")
    text = json.dumps(identity, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def candidates(spec: RunSpec, grid: Sequence[float], share: dict[str, str] | None = None) -> list[RunSpec]:
    base = candidate_base(spec, share)
    return [dataclasses.replace(base, train=dataclasses.replace(base.train, lr=float(lr))) for lr in grid]


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    train = result["train"]
    metric = checks_metric(train["checks"])
    values = [float(v) for v in train["checks"][metric]]
    best = (min if metric == "valid_loss" else max)(values) if values else None
    return {
        "lr": float(result["lr"]),
        "converged": bool(train["converged"]),
        "steps_to_converge": train["steps_to_converge"],
        "steps": train["steps"],
        "metric": metric,
        "final": values[-1] if values else None,
        "best": best,
    }


def select(results: Sequence[dict[str, Any]]) -> tuple[float, str]:
    """``(learning rate, why)`` from candidates' held-out in-distribution results (see module doc)."""
    rows = [_summary(r) for r in results]
    if not rows:
        raise ValueError("no candidates to choose from")
    if rows[0]["metric"] == "valid_loss":
        best = min(rows, key=lambda r: (r["best"], r["lr"]))
        return best["lr"], f"lowest held-out loss ({best['best']:.4f} nats/byte)"
    done = [r for r in rows if r["converged"]]
    if done:
        best = min(done, key=lambda r: (r["steps_to_converge"], -r["final"], r["lr"]))
        return best["lr"], f"converged in the fewest steps ({best['steps_to_converge']})"
    best = max(rows, key=lambda r: (r["final"], -r["lr"]))
    return best["lr"], f"none converged; highest held-out exact match ({best['final']:.3f})"


@dataclass
class Choice:
    lr: float
    source: str  # where it came from, for the record
    candidates: list[dict[str, Any]]


def shipped_table() -> dict[str, Any]:
    """The choices shipped with posenc: ``{"commands": [...], "entries": {key: {...}}}``; an
    entry names the ``profiles`` whose runs use it (quick and standard share settings)."""
    try:
        text = resources.files("posenc.compare").joinpath(SHIPPED).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"entries": {}}
    return json.loads(text)


def choose(
    specs: Sequence[RunSpec],
    grid: Sequence[float],
    out: ResultStore,
    executor: Executor,
    *,
    share: dict[str, str] | None = None,
    use_shipped: bool = True,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    allow_changed: bool = False,
    said: set[str] | None = None,
) -> tuple[dict[str, Choice], GridOutcome | None]:
    """A choice per tuning key of ``specs``: shipped, cached under ``out``, or tuned now.

    Candidates still to run are run on ``executor`` (each written to ``out`` as it
    finishes, resumable like any grid). Cached candidates of a class that has changed since
    are refused unless ``allow_changed`` (:func:`posenc.compare.runner.check_code`; ``said``: the
    changes said already).
    """
    share = share or {}
    keys: dict[str, RunSpec] = {}
    for spec in specs:
        keys.setdefault(tuning_key(spec, share), spec)
    shipped = shipped_table()["entries"] if use_shipped else {}
    choices: dict[str, Choice] = {}
    todo: list[RunSpec] = []
    for key, spec in keys.items():
        if len(grid) == 1:  # nothing to choose between
            choices[key] = Choice(float(grid[0]), "the profile's only candidate", [])
        elif key in shipped:
            entry = shipped[key]
            choices[key] = Choice(
                float(entry["lr"]), f"shipped with posenc ({entry['why']})", entry["candidates"]
            )
        else:
            todo += candidates(spec, grid, share)
    said = set() if said is None else said
    check_code(todo, out, allow_changed=allow_changed, log=log, said=said)
    todo = [c for c in todo if out.load(c)[0] is None]
    outcome = None
    if todo:
        log(
            f"tuning the learning rate: {len(todo)} candidate run(s) over {', '.join(f'{g:g}' for g in grid)}"
        )
        outcome = run_grid(
            todo, out, executor, show_progress=show_progress, log=log, work_fn=tune_execute,
            title="posenc compare: tuning", allow_changed=allow_changed, said=said,
        )  # fmt: skip
    for key, spec in keys.items():
        if key in choices:
            continue
        results = []
        for candidate in candidates(spec, grid, share):
            record, _ = out.load(candidate)
            if record is not None:
                results.append(record["result"])
        if len(results) < len(grid):
            continue  # a candidate failed: its runs keep the profile's learning rate (reported)
        lr, why = select(results)
        choices[key] = Choice(lr, f"tuned here ({why})", [_summary(r) for r in results])
    return choices, outcome


def apply(
    specs: Sequence[RunSpec],
    choices: dict[str, Choice],
    grid: Sequence[float],
    share: dict[str, str] | None = None,
) -> list[RunSpec]:
    """``specs`` with each learning rate replaced by its choice (and its provenance recorded)."""
    out = []
    grid_text = ", ".join(f"{g:g}" for g in grid)
    for spec in specs:
        choice = choices.get(tuning_key(spec, share))
        if choice is None:
            out.append(
                dataclasses.replace(spec, lr_source=f"profile default (tuning over {grid_text} failed)")
            )
            continue
        task = tuning_task(spec, share or {})
        run = " for the default architecture" if shares_default(spec, share) else ""
        source = f"chosen from {grid_text} on {task}{run}, by in-distribution validation: {choice.source}"
        out.append(
            dataclasses.replace(spec, train=dataclasses.replace(spec.train, lr=choice.lr), lr_source=source)
        )
    return out


def table(
    specs: Sequence[RunSpec], choices: dict[str, Choice], command: str, share: dict[str, str] | None = None
) -> dict:
    """The shippable form of ``choices`` (what ``scripts/ship_tuning.py`` writes)."""
    entries = {}
    for spec in specs:
        key = tuning_key(spec, share)
        if key in choices and key not in entries:
            choice = choices[key]
            why = choice.source.split("(", 1)[-1] if "(" in choice.source else choice.source
            why = why.removesuffix(")") if "(" in choice.source else why  # the outer parenthesis only
            entries[key] = {
                "profiles": [spec.profile],
                "label": spec.label,
                "task": tuning_task(spec, share or {}),
                "lr": choice.lr,
                "why": why,
                "candidates": choice.candidates,
            }
    return {"commands": [command], "entries": dict(sorted(entries.items()))}


def tuning_store(root) -> ResultStore:
    """Where candidates are cached: ``ROOT/tuning/`` (records checked by :func:`tune_problem`)."""
    return ResultStore(Path(root) / "tuning", problem=tune_problem)
