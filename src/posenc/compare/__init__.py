"""``posenc compare``: train short, test long (protocol and results in docs/benchmark.md).

The harness that runs a grid and writes its records; what the records show (per-cell
intervals, tables, figures, the papers' claims) is :mod:`posenc.results`, and both read and
write records through :mod:`posenc.records`. Pieces, each usable alone:

- :mod:`~posenc.compare.profile`: the profiles (budget tiers), TOML files loaded into a typed :class:`Profile`
- :mod:`~posenc.compare.grid`: a profile expanded into independent :class:`~posenc.records.spec.RunSpec` s
- :mod:`~posenc.compare.contract`: outside encodings and tasks checked against posenc's contract first
- :mod:`~posenc.compare.device`: where runs compute (``--device``) and in what precision (``--precision``)
- :mod:`~posenc.compare.trainer`: training (schedule, optimiser, held-out checks, convergence, fine-tuning)
- :mod:`~posenc.compare.evaluation`: a trained model scored at every evaluation length
- :mod:`~posenc.compare.work`: ``execute(spec) -> payload`` (train, then evaluate every length)
- :mod:`~posenc.compare.executor`: the seam that runs a grid (local processes, or Ray)
- :mod:`~posenc.compare.runner`: skip finished work, execute the rest, write each record at once
- :mod:`~posenc.compare.tuning`: a learning rate per encoding, by in-distribution validation

:func:`compare` ties them together; ``posenc compare`` calls it with
:func:`posenc.results.write_outputs` as its ``outputs``.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from posenc.compare import rounds, tuning
from posenc.compare.contract import check_plugins
from posenc.compare.device import check_precision, describe, resolve_device
from posenc.compare.evaluation import check_lm_data
from posenc.compare.executor import Executor, LocalExecutor, make_executor
from posenc.compare.grid import build_grid, check_installation
from posenc.compare.profile import PROFILES, Profile, check_fits, dump_profile, get_profile
from posenc.compare.runner import GridOutcome, check_code, run_grid
from posenc.core.errors import PosencError
from posenc.records.files import atomic_write_text
from posenc.records.provenance import encodings_of
from posenc.records.spec import BENCHMARK_VERSION, EvalSpec, ModelSpec, RunSpec, TrainSpec
from posenc.records.store import ResultStore, versions

__all__ = [
    "PROFILES",
    "CompareResult",
    "Decide",
    "EvalSpec",
    "LocalExecutor",
    "ModelSpec",
    "Outputs",
    "Profile",
    "RunSpec",
    "TrainSpec",
    "build_grid",
    "compare",
    "compare_until_decided",
    "get_profile",
]


class Outputs(Protocol):
    """What :func:`compare` calls once the grid has run: write the grid's summaries (e.g.
    :func:`posenc.results.write_outputs`), under the results directory's lock, from exactly
    ``run_ids``, with the profile's declared ``questions`` (:func:`questions_info`) and, after
    ``--until decided``, its plan (``sequential``); returns ``(summary, {kind: path})``."""

    def __call__(
        self,
        out: Path,
        *,
        run_ids: list[str],
        profile: str,
        log: Callable[[str], None],
        questions: dict[str, Any] | None = None,
        sequential: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, str]]: ...


@dataclass
class CompareResult:
    profile: Profile
    out: Path
    outcome: GridOutcome
    summary: dict[str, Any] = field(default_factory=dict)  # what ``outputs`` returned ({} without)
    files: dict[str, str] = field(default_factory=dict)
    tuning: GridOutcome | None = None  # the learning-rate candidates run by this invocation, if any
    until: dict[str, Any] | None = None  # --until decided: the plan, the looks run, why it stopped

    def notes(self) -> list[str]:
        lines = [
            f"runs: {len(self.outcome.done)} done, {len(self.outcome.skipped)} resumed, "
            f"{len(self.outcome.failed)} failed; {self.outcome.wall_seconds:.0f} s"
        ]
        failed_to_converge = len(self.summary.get("not_converged", []))
        if failed_to_converge:
            lines.append(
                f"{failed_to_converge} run(s) did not converge in-distribution (n.c.; left out of claims)"
            )
        for run, error in self.outcome.failed:
            lines.append(f"FAILED {run}: {error}")
        if self.until is not None:
            lines.append(self._until_note())
        for cell, why in self.summary.get("failed_evaluations", {}).items():
            lines.append(f"FAILED evaluation {cell}: {why}")
        lines += [f"{kind}: {path}" for kind, path in self.files.items()]
        return lines

    def _until_note(self) -> str:
        """What ``--until decided`` did: the looks it ran, why it stopped, what it left undecided."""
        until = self.until or {}
        decided = self.summary.get("sequential", {})
        undecided = decided.get("undecided", [])
        left = f"; undecided: {'; '.join(undecided)}" if undecided else ""
        looks = ", ".join(map(str, until.get("looks_run", []))) or "none"
        return (
            f"--until decided: looks run at {looks} seeds per encoding; stopped: {until.get('stopped')}{left}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the summary is not: :func:`posenc.results.to_json` writes it)."""
        return {
            "profile": self.profile.name,
            "out": str(self.out),
            "outcome": self.outcome.to_dict(),
            "files": self.files,
            **({"until": self.until} if self.until is not None else {}),
        }


def default_threads(workers: int) -> int:
    """Torch threads per worker: 1 unless there are spare cores beyond the workers.

    The model is tiny: a second intra-op thread gains little, and on a shared
    (oversubscribed) machine OpenMP threads spin-waiting for each other made a
    run up to 20x slower in our measurements; parallelism goes to processes.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, workers)) if cores > 2 * workers else 1


def questions_info(prof: Profile) -> dict[str, Any] | None:
    """The profile's declared questions as ``run.json`` keeps them (``against`` resolved to the
    profile's encodings other than the reference), or None without any."""
    q = prof.questions
    if not q.declared:
        return None
    against = q.against
    if against is None and prof.encodings is not None:
        against = tuple(name for name in prof.encodings if name != q.reference)
    return dataclasses.replace(q, against=against).to_dict()


def write_run_info(
    out: Path,
    prof: Profile,
    outcome: GridOutcome,
    command: str,
    device: str = "cpu",
    config: Path | None = None,
    until: dict[str, Any] | None = None,
) -> Path:
    """``out/run.json``: what this invocation ran and how long it took, end to end (the
    tables in the docs quote it; a resumed invocation says how many runs it resumed),
    ``config``, its own config file (:func:`write_config`), the profile's declared questions
    (:func:`questions_info`) and, for ``--until decided``, its plan and why it stopped (``until``)."""
    info: dict[str, Any] = {
        "profile": prof.name,
        "config": CONFIG_FILE,
        "invocation_config": None if config is None else config.relative_to(out).as_posix(),
        "device": describe(device),
        "precision": prof.precision,
        "command": command,
        "benchmark": BENCHMARK_VERSION,
        "posenc": versions()["posenc"],
        "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": round(outcome.wall_seconds, 1),
        "runs_done": len(outcome.done),
        "runs_resumed": len(outcome.skipped),
        "runs_failed": len(outcome.failed),
        "cores": os.cpu_count(),
    }
    questions = questions_info(prof)
    if questions is not None:
        info["questions"] = questions
    if until is not None:
        info["until"] = until
    atomic_write_text(out / "run.json", json.dumps(info, indent=1))
    return out / "run.json"


#: The effective config of the grid the directory's summaries describe (``posenc compare --config``
#: of it runs that grid), written with them under the directory's lock.
CONFIG_FILE = "config.toml"
#: Every invocation's own effective config, ``configs/NAME-HASH.toml`` (HASH: of the config), written
#: before its first run: a second invocation on the same directory never overwrites the first's.
CONFIG_DIR = "configs"


def config_path(out: Path, prof: Profile) -> Path:
    """``out/configs/NAME-HASH.toml``: where the invocation running ``prof`` keeps its config."""
    digest = hashlib.sha256(dump_profile(prof).encode()).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", prof.name).strip(".-")[:64] or "profile"
    return out / CONFIG_DIR / f"{name}-{digest}.toml"


def write_config(out: Path, prof: Profile, command: str) -> Path:
    """The effective config this invocation's runs are made from, as its own file under
    ``out/configs/`` (:func:`config_path`); returns its path. ``posenc compare`` copies it to
    ``out/config.toml`` together with the summaries (:func:`compare`)."""
    path = config_path(out, prof)
    header = (
        f"The effective config of: {command or 'posenc.compare.compare(...)'}\n"
        f"Run it again with: posenc compare --config {path}"
    )
    atomic_write_text(path, dump_profile(prof, header=header))
    return path


def compare(
    profile: str | Profile = "quick",
    *,
    encodings: tuple[str, ...] | None = None,
    tasks: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    out: str | Path = "posenc-results",
    executor: str = "local",
    workers: int | None = None,
    threads: int | None = None,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    outputs: Outputs | None = None,
    retune: bool = False,
    command: str = "",
    allow_changed: bool = False,
    check: bool = True,
    names: Mapping[str, str] | None = None,
) -> CompareResult:
    """Run (or resume) a profile's grid into ``out`` (one record per run, ``run.json``), then
    write this invocation's own grid as the directory's current one (``grid.json``) through
    ``outputs`` (e.g. :func:`posenc.results.write_outputs`: summaries, figures, the page), or
    alone without it.

    With a learning-rate grid in the profile, each encoding's rate is chosen first
    (:mod:`posenc.compare.tuning`: shipped choices, else cached under ``out/tuning``, else
    tuned now; ``retune`` ignores the shipped ones).

    Before any run: the device is resolved (``prof.device``; an absent one raises), the
    precision checked against it, what cannot fit the device refused
    (:func:`posenc.compare.profile.check_fits`), ``threads`` checked (1 .. 4 x cores), the
    executor made (``"ray"``: Ray installed, its head reachable), every encoding and task from
    outside posenc checked against the contract's fast properties unless ``check`` is False
    (:mod:`posenc.compare.contract`: a failure raises, after the report goes to ``log``), and
    records already in ``out`` whose encoding or task class has changed since they were written
    (:mod:`posenc.records.provenance`) refused unless ``allow_changed``. An error names
    ``device``, ``precision`` or ``threads`` as ``names`` says (``posenc compare`` passes
    ``{"device": "--device", ...}`` for the options it was given). The effective config is
    written to ``out/configs/NAME-HASH.toml`` before the first run and copied to
    ``out/config.toml`` with the summaries, under the directory's lock, so that ``config.toml``,
    ``grid.json``, the summaries and ``run.json`` always describe one invocation's grid
    (docs/guarantees.md).
    """
    start = time.perf_counter()
    prof = get_profile(profile) if isinstance(profile, str) else profile
    plan = _plan(
        prof, encodings=encodings, tasks=tasks, seeds=seeds, executor=executor, workers=workers, threads=threads,
        log=log, check=check, names=names or {},
    )  # fmt: skip
    return _execute(
        prof, plan, Path(out), outputs=outputs, retune=retune, show_progress=show_progress, log=log,
        command=command, allow_changed=allow_changed, start=start,
    )  # fmt: skip


def _execute(
    prof: Profile, plan: _Plan, out: Path, *, outputs: Outputs | None, retune: bool, show_progress: bool,
    log: Callable[[str], None], command: str, allow_changed: bool, start: float,
) -> CompareResult:  # fmt: skip
    """A checked grid run into ``out``: its config first, then the learning rates, the runs and the
    summaries (:func:`compare`; here every check but the directory's and the records' has passed)."""
    store = ResultStore(out)
    store.check_writable()  # before any run: a directory that cannot take records fails now
    said: set[str] = set()  # each change of code said once (--allow-changed), whichever check finds it
    check_code(plan.specs, store, allow_changed=allow_changed, log=log, said=said)
    own_config = write_config(out, prof, command)
    specs, tuned = _tune(prof, plan, out, retune=retune, show_progress=show_progress, log=log,
                         allow_changed=allow_changed, said=said)  # fmt: skip
    outcome = run_grid(specs, store, plan.runner, show_progress=show_progress, log=log,
                       allow_changed=allow_changed, said=said)  # fmt: skip
    if tuned is not None:
        outcome.failed[:0] = [(f"tuning {run}", error) for run, error in tuned.failed]
        outcome.wall_seconds += tuned.wall_seconds
    run = _Finished(prof, [spec.run_id for spec in specs], outcome, command, plan.device, own_config, start)
    summary, files = _write_summaries(store, run, outputs, log)
    return CompareResult(prof, out, outcome, summary, files, tuned)


#: What ``--until decided`` reads after each look: ``decide(out, run_ids, questions, plan)`` gives the
#: questions decided so far (:func:`posenc.results.decide_questions`: ``questions`` with ``decided``,
#: ``all_decided``, ``undecided``, ``looks_done``).
Decide = Callable[[Path, list[str], dict[str, Any], dict[str, Any]], dict[str, Any]]


def compare_until_decided(
    profile: str | Profile,
    *,
    decide: Decide,
    budget: float | None = None,
    out: str | Path = "posenc-results",
    executor: str = "local",
    workers: int | None = None,
    threads: int | None = None,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    outputs: Outputs | None = None,
    retune: bool = False,
    command: str = "",
    allow_changed: bool = False,
    check: bool = True,
    names: Mapping[str, str] | None = None,
) -> CompareResult:
    """Run the profile's grid look by look (``[sequential] looks``: seeds per encoding at each) until
    ``decide`` says every declared question is decided, the plan ends, or the next look would not end
    within ``budget`` seconds (measured per seed on the looks so far); then the summaries of every run
    of the looks, with the decisions (``summary.json``: ``primary``, ``sequential``) and ``run.json``'s
    ``until`` (the plan, the looks run, why it stopped). The first look is the profile's own grid; later
    ones add seeds for the questions' encodings and tasks only (:mod:`posenc.compare.rounds`). Resumes
    like :func:`compare`, on the same plan only."""
    start = time.perf_counter()
    prof = get_profile(profile) if isinstance(profile, str) else profile
    questions = questions_info(prof)
    if questions is None or not prof.sequential.declared:
        raise PosencError(
            f"--until decided needs declared questions and a plan ([questions] and [sequential] in the profile; "
            f"quick has both): profile {prof.name!r} declares {'no plan' if questions else 'no questions'} for this grid"
            + "".join(f" ({line})" for line in prof.resolved.notes)
        )
    plan_text = rounds.plan_info(prof, questions)
    rounds.check_same_plan(Path(out), plan_text)
    kwargs = dict(
        executor=executor, workers=workers, threads=threads, log=log, check=check, names=names or {}
    )
    looks = _looks(prof, plan_text, Path(out), decide=decide, budget=budget, start=start, kwargs=kwargs,
                   show_progress=show_progress, retune=retune, allow_changed=allow_changed)  # fmt: skip
    specs, outcome, tuned, until = looks
    store = ResultStore(Path(out))
    run = _Finished(prof, [spec.run_id for spec in specs], outcome, command, _device(prof, names),
                    write_config(Path(out), prof, command), start, until)  # fmt: skip
    summary, files = _write_summaries(store, run, outputs, log)
    return CompareResult(prof, Path(out), outcome, summary, files, tuned, until)


def _device(prof: Profile, names: Mapping[str, str] | None) -> str:
    return resolve_device(prof.device, (names or {}).get("device", "device"))


def _looks(
    prof: Profile, plan_text: dict[str, Any], out: Path, *, decide: Decide, budget: float | None, start: float,
    kwargs: dict[str, Any], show_progress: bool, retune: bool, allow_changed: bool,
) -> tuple[list[RunSpec], GridOutcome, GridOutcome | None, dict[str, Any]]:  # fmt: skip
    """Run look after look (see :func:`compare_until_decided`): every look's specs, the outcome of them
    all, the tuning runs and ``run.json``'s ``until``."""
    log, store = kwargs["log"], ResultStore(out)
    store.check_writable()
    looks, outcome, tuned = prof.sequential.looks, GridOutcome(), None
    specs: list[RunSpec] = []
    per_unit, stopped, run_looks = None, "plan ended", []
    said: set[str] = set()
    for index, look in enumerate(looks):
        grid_prof = prof if index == 0 else rounds.questions_profile(prof)
        grid_prof = dataclasses.replace(grid_prof, seeds=rounds.new_seeds(prof, index))
        plan = _plan(grid_prof, encodings=None, tasks=None, seeds=None, **kwargs)
        check_code(plan.specs, store, allow_changed=allow_changed, log=log, said=said)
        found, tuned_now = _tune(grid_prof, plan, out, retune=retune, show_progress=show_progress, log=log,
                                 allow_changed=allow_changed, said=said)  # fmt: skip
        todo = sum(spec.work_units() for spec in found if store.load(spec)[0] is None)
        if index and not rounds.fits_budget(time.perf_counter() - start, per_unit, todo, budget):
            stopped = "budget"
            break
        tic = time.perf_counter()
        ran = run_grid(found, store, plan.runner, show_progress=show_progress, log=log,
                       allow_changed=allow_changed, said=said)  # fmt: skip
        per_unit = (time.perf_counter() - tic) / todo if todo else per_unit
        specs, tuned = specs + found, tuned or tuned_now
        _merge(outcome, ran)
        run_looks.append(look)
        if ran.failed:
            stopped = "a run failed"
            break
        status = decide(out, [spec.run_id for spec in specs], plan_text["questions"], plan_text)
        for line in rounds.progress_text(status, look, index, len(looks), time.perf_counter() - start):
            log(line)
        if status.get("all_decided"):
            stopped = "decided"
            break
    until = {"plan": plan_text, "looks_run": run_looks, "stopped": stopped, "budget_seconds": budget}
    return specs, outcome, tuned, until


def _merge(total: GridOutcome, one: GridOutcome) -> None:
    total.done += one.done
    total.skipped += one.skipped
    total.redone += one.redone
    total.failed += one.failed
    total.wall_seconds += one.wall_seconds


@dataclass
class _Plan:
    """What :func:`compare` has checked and built before any run."""

    device: str  # resolved
    specs: list[RunSpec]
    runner: Executor


def _plan(
    prof: Profile,
    *,
    encodings: tuple[str, ...] | None,
    tasks: tuple[str, ...] | None,
    seeds: tuple[int, ...] | None,
    executor: str,
    workers: int | None,
    threads: int | None,
    log: Callable[[str], None],
    check: bool,
    names: Mapping[str, str],
) -> _Plan:
    """The machine, the grid and the executor, each checked before any run (see :func:`compare`)."""
    device = resolve_device(prof.device, names.get("device", "device"))
    check_precision(prof.precision, device, names.get("precision", "precision"))
    check_fits(prof, device)
    workers = prof.workers if workers is None else workers
    if threads is None:
        threads = default_threads(workers)
    grid = build_grid(
        prof, encodings=encodings, tasks=tasks, seeds=seeds, threads=threads, device=device,
        threads_option=names.get("threads", "threads"),
    )  # fmt: skip
    pool = min(workers, max(1, len(grid.specs)))
    if grid.local_only and (executor != "local" or pool > 1):
        raise PosencError(f"{grid.local_only[0]} (or run with --workers 1, in this process)")
    runner = make_executor(executor, workers=pool)  # Ray installed and reachable before the slower checks
    check_installation(
        [name for spec in grid.specs for name in encodings_of(spec)], [s.task for s in grid.specs], log=log
    )
    if check:  # outside encodings and tasks pass the contract's fast properties before any training
        check_plugins(grid.specs, log=log)
    for note in check_lm_data(grid.specs):  # the test split holds what the LM runs score, or stop now
        log(note)
    return _Plan(device, grid.specs, runner)


def _tune(
    prof: Profile, plan: _Plan, out: Path, *, retune: bool, show_progress: bool, log: Callable[[str], None],
    allow_changed: bool, said: set[str],
) -> tuple[list[RunSpec], GridOutcome | None]:  # fmt: skip
    """The grid's specs at each encoding's chosen learning rate, and the tuning runs made here
    (None without a learning-rate grid in the profile)."""
    if not prof.lr_grid:
        return plan.specs, None
    share = dict(prof.tune_share)
    choices, tuned = tuning.choose(
        plan.specs, prof.lr_grid, tuning.tuning_store(out), plan.runner, share=share, use_shipped=not retune,
        show_progress=show_progress, log=log, allow_changed=allow_changed, said=said,
    )  # fmt: skip
    return tuning.apply(plan.specs, choices, prof.lr_grid, share), tuned


@dataclass
class _Finished:
    """A grid that has run, as the files written after it describe it."""

    profile: Profile
    run_ids: list[str]
    outcome: GridOutcome
    command: str
    device: str
    own_config: Path  # this invocation's config (:func:`write_config`)
    start: float  # time.perf_counter() when the invocation began
    until: dict[str, Any] | None = None  # --until decided: its plan and why it stopped


def _write_summaries(
    store: ResultStore, run: _Finished, outputs: Outputs | None, log: Callable[[str], None]
) -> tuple[dict[str, Any], dict[str, str]]:
    """This invocation's own grid as the directory's current one, never another one's that shares
    the directory (docs/guarantees.md): the summaries, ``config.toml`` and ``run.json`` of one
    grid, under one hold of the lock (it nests). Returns ``(summary, {kind: path})``."""
    out, prof, outcome = store.root, run.profile, run.outcome
    with store.lock():
        if outputs is not None:
            plan, questions = (run.until or {}).get("plan"), questions_info(prof)
            declared = {k: v for k, v in (("questions", questions), ("sequential", plan)) if v is not None}
            # an outputs callable written before questions existed still serves a profile without any
            summary, files = outputs(out, run_ids=run.run_ids, profile=prof.name, log=log, **declared)
        else:
            summary, files = {}, {}
            store.write_grid(run.run_ids, prof.name)
        atomic_write_text(out / CONFIG_FILE, run.own_config.read_text(encoding="utf-8"))
        outcome.wall_seconds = time.perf_counter() - run.start  # everything, figures and report included
        files["run"] = str(
            write_run_info(out, prof, outcome, run.command, run.device, run.own_config, run.until)
        )
    files["config"] = str(out / CONFIG_FILE)
    finished = set(outcome.done) | set(outcome.skipped)
    missing = finished - {r["run_id"] for r in store.records(run_ids=run.run_ids, warn=log)}
    if missing:
        log(f"{len(missing)} run(s) of this grid have no valid record in {out} (removed by another "
            "process?); rerun the same command to redo them")  # fmt: skip
    return summary, files
