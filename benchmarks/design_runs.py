"""Runs for the design study (benchmarks/design_study.py): quick's encodings and tasks with common
random numbers and the answer log-likelihood on, more seeds than quick ships.

Each run is quick's own spec (the shipped records' settings, learning rates included) at another
seed, trained and evaluated in this process with ``posenc.compare.work.SHARED_INIT`` (every weight
the encodings share starts equal within a seed) and ``posenc.compare.evaluation.ANSWER_LOGPROB``
(each example's answer log-likelihood) on; both are off in the benchmark until its next version,
so these are not benchmark records: the file keeps each run's spec, its training summary and its
default evaluation (the per-example and per-file values the statistics read), nothing else. RoPE's
context extensions are left out (not a primary question; they cost RoPE's LM runs half their time).

    nice -n 10 python benchmarks/design_runs.py --task copy --seeds 0-7 --budget 540

runs what the file lacks, one run at a time, and starts no run after ``--budget`` seconds; run it
again to go on. The study reads ``benchmarks/results/design-study-runs.json.gz``.

``--lm-steps N`` trains the LM for exactly N steps (the plateau rule may not stop it earlier: the ALiBi
paper's fixed-step protocol) instead of quick's rule; those runs are kept as ``fixed_steps: N``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import time
from pathlib import Path
from typing import Any

from posenc.compare import evaluation, work
from posenc.records.spec import WEIGHTS_KEY, RunSpec
from posenc.records.store import ResultStore

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "design-study-runs.json.gz"
QUICK = ROOT / "benchmarks" / "records" / "quick"
TRAIN_KEYS = ("steps", "converged", "steps_to_converge", "final_loss", "wall_seconds", "compute_seconds")


def seeds_of(text: str) -> list[int]:
    """``"0-7"`` or ``"0,3,5"`` -> seed numbers."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def quick_specs(task: str, encodings: list[str] | None, lm_steps: int | None = None) -> dict[str, RunSpec]:
    """Quick's spec of each encoding on ``task`` (its seed-0 record), RoPE's scalings left out; with
    ``lm_steps`` the LM trains exactly that many steps."""
    out = {}
    for record in ResultStore(QUICK).records():
        spec = record["spec"]
        if spec["task"] == task and spec["seed"] == 0 and (encodings is None or record["label"] in encodings):
            run = dataclasses.replace(RunSpec.from_dict(spec), scalings=(), finetune=0)
            if lm_steps and task == "lm":
                run = dataclasses.replace(
                    run, train=dataclasses.replace(run.train, steps=lm_steps, plateau_after=lm_steps)
                )
            out[record["label"]] = run
    return out


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def compact(label: str, spec: RunSpec, payload: dict[str, Any]) -> dict[str, Any]:
    """What the study keeps of a run, shaped as a record (``spec``, ``result.train``,
    ``result.eval.default``) so that ``posenc.results.stats.units`` reads it."""
    ev = dict(payload["eval"]["default"])
    for key in ("loss_by_position", "lastk"):
        ev.pop(key, None)
    train = {k: payload["train"][k] for k in TRAIN_KEYS}
    return {
        "label": label,
        "spec": spec.to_dict(),
        "result": _rounded(
            {"train": train, "eval": {"default": ev}, "num_parameters": payload["num_parameters"]}
        ),
    }


def load(path: Path = OUT) -> dict[str, Any]:
    if not path.exists():
        return {"about": __doc__.split("\n\n")[0], "switches": {}, "runs": []}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def save(data: dict[str, Any], path: Path = OUT) -> None:
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True, choices=["copy", "passkey", "lm"])
    parser.add_argument("--seeds", default="0-7")
    parser.add_argument("--encodings", default=None, help="comma-separated labels (default: quick's)")
    parser.add_argument("--budget", type=float, default=540.0, help="start no run after this many seconds")
    parser.add_argument("--lm-steps", type=int, default=None, help="train the LM exactly this many steps")
    args = parser.parse_args()
    work.SHARED_INIT = True
    evaluation.ANSWER_LOGPROB = True
    specs = quick_specs(args.task, args.encodings.split(",") if args.encodings else None, args.lm_steps)
    data = load()
    data["switches"] = {"SHARED_INIT": True, "ANSWER_LOGPROB": True, "scalings": "none"}
    fixed = args.lm_steps if args.task == "lm" else None
    done = {(r["label"], r["spec"]["task"], r["spec"]["seed"], r.get("fixed_steps")) for r in data["runs"]}
    start = time.perf_counter()
    for seed in seeds_of(args.seeds):  # seed by seed, so an interrupted study keeps whole seeds
        for label, spec in sorted(specs.items()):
            if (label, args.task, seed, fixed) in done:
                continue
            if time.perf_counter() - start > args.budget:
                return
            run = dataclasses.replace(spec, seed=seed)
            tic = time.perf_counter()
            payload = work.execute(run)
            payload.pop(WEIGHTS_KEY, None)
            data["runs"].append(compact(label, run, payload) | ({"fixed_steps": fixed} if fixed else {}))
            save(data)
            print(
                f"{args.task} {label} seed {seed}: {payload['train']['steps']} steps, {time.perf_counter() - tic:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
