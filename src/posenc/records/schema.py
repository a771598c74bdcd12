"""What a run's result must hold for the summaries, figures and report to read it.

A record can be checksum-valid and still not readable by this version (written by another
posenc version with the same run id), so the store checks the shape of every result it
reads: :func:`result_problem` for runs, :func:`tune_problem` for learning-rate candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from posenc.records.benchmark_scalings import FAILED_KEY
from posenc.records.spec import RunSpec


def _is_number(x: Any) -> bool:
    """A stored float: a JSON number, or "inf"/"-inf"/"nan" (how records store non-finite values)."""
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) or x in ("inf", "-inf", "nan")


def _numbers_problem(where: str, value: Any, length: int | None = None) -> str | None:
    if not isinstance(value, list) or not all(_is_number(x) for x in value):
        return f"{where} is not a list of numbers"
    if length is not None and len(value) != length:
        return f"{where} has {len(value)} values, expected {length}"
    return None


def _int_list_problem(where: str, value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return f"{where} is not a list of integers"
    return None


#: Keys of ``result.train.checks`` besides its one held-out metric: the step of each check and the
#: mean training loss since the previous one (records from before curves were kept lack it).
CURVE_KEYS = ("step", "train_loss")


def checks_metric(checks: dict[str, Any]) -> str:
    """The held-out metric of a run's checks (``valid_exact_match`` or ``valid_loss``)."""
    return next(k for k in checks if k not in CURVE_KEYS)


def _train_problem(train: Any) -> str | None:
    """What the summaries read of ``result.train`` (shared by runs and tuning candidates)."""
    if not isinstance(train, dict):
        return "result.train is missing"
    if not isinstance(train.get("converged"), bool):
        return "result.train.converged is not true/false"
    if not isinstance(train.get("steps"), int) or isinstance(train.get("steps"), bool):
        return "result.train.steps is not an integer"
    if train["converged"] and not isinstance(train.get("steps_to_converge"), int):
        return "result.train.steps_to_converge is not an integer"
    checks = train.get("checks")
    if not isinstance(checks, dict) or _int_list_problem("result.train.checks.step", checks.get("step")):
        return "result.train.checks is missing"
    metrics = [k for k in checks if k not in CURVE_KEYS]
    if len(metrics) != 1:
        return "result.train.checks must hold one metric"
    problem = _numbers_problem(f"result.train.checks.{metrics[0]}", checks[metrics[0]], len(checks["step"]))
    if not problem and "train_loss" in checks:
        problem = _numbers_problem(
            "result.train.checks.train_loss", checks["train_loss"], len(checks["step"])
        )
    if problem or not _is_number(train.get("final_loss")):
        return problem or "result.train.final_loss is not a number"
    return None


def result_problem(result: Any, spec: RunSpec) -> str | None:
    """None if ``result`` has everything the summaries, figures and report read, else what is wrong.

    Checked beyond the checksum because a record can be checksum-valid and still not
    readable by this version (written by another posenc version with the same run id).
    """
    if not isinstance(result, dict):
        return "result is not a JSON object"
    train, timing, evaluation = result.get("train"), result.get("timing"), result.get("eval")
    problem = _train_problem(train)
    if problem or not isinstance(train, dict):
        return problem or "result.train is missing"
    problem = _numbers_problem("result.train.loss", train.get("loss"), train["steps"])
    if problem:
        return problem
    if not isinstance(timing, dict):
        return "result.timing is missing"
    for key in ("steps_per_second", "train_wall_seconds"):
        if timing.get(key) is not None and not _is_number(timing[key]):
            return f"result.timing.{key} is not a number"
    if not isinstance(evaluation, dict):
        return "result.eval is missing or not a JSON object"
    if not evaluation:
        return "result has no evaluation (result.eval is empty)"
    expected = {"default", *spec.scalings}
    failed = result.get(FAILED_KEY, {})
    problem = _failed_problem(failed, spec)
    if problem:
        return problem
    if set(evaluation) | set(failed) != expected or set(evaluation) & set(failed):
        said = f" and failed scalings {sorted(failed)}" if failed else ""
        return f"result.eval has variants {sorted(evaluation)}{said}, expected {sorted(expected)}"
    lm = spec.task == "lm"
    lengths = list(spec.eval.lm_lengths if lm else spec.eval.lengths)
    for variant, ev in evaluation.items():
        where = f"result.eval.{variant}"
        if not isinstance(ev, dict):
            return f"{where} is not a JSON object"
        if ev.get("lengths") != lengths:
            return f"{where}.lengths differ from the spec's evaluation lengths"
        for key in ("bits_per_byte",) if lm else ("exact_match", "token_accuracy"):
            problem = _numbers_problem(f"{where}.{key}", ev.get(key), len(lengths))
            if problem:
                return problem
        problem = _lm_problem(where, ev, spec) if lm else _task_problem(where, ev, spec)
        if problem:
            return problem
    return None


def _failed_problem(failed: Any, spec: RunSpec) -> str | None:
    """``result.failed_scalings``: the run's scalings whose evaluation failed, each with why."""
    where = f"result.{FAILED_KEY}"
    if not isinstance(failed, dict):
        return f"{where} is not a JSON object"
    for name, reason in failed.items():
        if name not in spec.scalings:
            return f"{where} names {name!r}, which is not a scaling of the run"
        if not isinstance(reason, str):
            return f"{where}.{name} is not a text (why it failed)"
    return None


def _task_problem(where: str, ev: dict[str, Any], spec: RunSpec) -> str | None:
    per = ev.get("per_example")
    if not isinstance(per, dict):
        return f"{where}.per_example is missing"
    # answer_accuracy (the answer's tokens, EOS left out): records written before it was kept lack it
    # answer_logprob (each answer's mean log-likelihood): kept from benchmark version 3 on
    keys = ["exact_match", "token_accuracy"]
    keys += [key for key in ("answer_accuracy", "answer_logprob") if key in per]
    if spec.eval.free_running:  # records before free-running decoding have no such spec field
        free = ev.get("free_running")
        if not isinstance(free, dict) or "decoding" not in free:
            return f"{where}.free_running is missing"
        if free["decoding"] is not None:
            keys += FREE_RUNNING_KEYS
    for key in keys:
        rows = per.get(key)
        if not isinstance(rows, list) or len(rows) != len(spec.eval.lengths):
            return f"{where}.per_example.{key} has no row per length"
        for row in rows:
            problem = _numbers_problem(f"{where}.per_example.{key}", row, spec.eval.samples)
            if problem:
                return problem
    if "tokens" in ev:  # records before length buckets in tokens lack them
        problem = _int_list_problem(f"{where}.tokens", ev["tokens"])
        if problem or len(ev["tokens"]) != len(spec.eval.lengths):
            return problem or f"{where}.tokens has no value per length"
        if not isinstance(ev.get("train_tokens"), int) or ev["train_tokens"] < 1:
            return f"{where}.train_tokens is not a positive integer"
    return None


#: Per-example arrays of free-running decoding (``per_example[KEY][length][example]``, integers):
#: exact match (0/1), answer tokens right before the first wrong one, the answer's length.
FREE_RUNNING_KEYS = ["free_exact_match", "free_prefix", "answer_tokens"]


def _lm_problem(where: str, ev: dict[str, Any], spec: RunSpec) -> str | None:
    count = len(spec.eval.lm_lengths)
    if spec.eval.lm_files > 0:  # scored on test files (records before test splits: 0)
        problem = _per_file_problem(where, ev, count, len(spec.eval.lastk_contexts))
        if problem:
            return problem
    if ev.get("ratio_to_train") is not None:
        problem = _numbers_problem(f"{where}.ratio_to_train", ev["ratio_to_train"], count)
        if problem:
            return problem
    windows = ev.get("window_nats")
    if not isinstance(windows, list) or len(windows) != count:
        return f"{where}.window_nats has no row per length"
    for row in windows:
        problem = _numbers_problem(f"{where}.window_nats", row)
        if problem:
            return problem
    lastk, by_position = ev.get("lastk"), ev.get("loss_by_position")
    if not isinstance(lastk, dict) or not isinstance(lastk.get("contexts"), list):
        return f"{where}.lastk is missing"
    problem = _numbers_problem(f"{where}.lastk.contexts", lastk["contexts"]) or _numbers_problem(
        f"{where}.lastk.nats_per_byte", lastk.get("nats_per_byte"), len(lastk["contexts"])
    )
    if problem:
        return problem
    if not isinstance(by_position, dict):
        return f"{where}.loss_by_position is missing"
    return _numbers_problem(f"{where}.loss_by_position.nats_per_byte", by_position.get("nats_per_byte"))


def _per_file_problem(where: str, ev: dict[str, Any], lengths: int, contexts: int) -> str | None:
    files = ev.get("files")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        return f"{where}.files is not a list of file names"
    per = ev.get("per_file")
    if not isinstance(per, dict):
        return f"{where}.per_file is missing"
    for key, count, unit in (
        ("bits_per_byte", lengths, "length"),
        ("lastk_bits_per_byte", contexts, "context"),
    ):
        rows = per.get(key)
        if not isinstance(rows, list) or len(rows) != count:
            return f"{where}.per_file.{key} has no row per {unit}"
        for row in rows:
            problem = _numbers_problem(f"{where}.per_file.{key}", row, len(files))
            if problem:
                return problem
    return None


ResultCheck = Callable[[Any, RunSpec], "str | None"]


def tune_problem(result: Any, spec: RunSpec) -> str | None:
    """:func:`result_problem` for a learning-rate candidate (held-out checks only)."""
    if not isinstance(result, dict) or not _is_number(result.get("lr")):
        return "result.lr is not a number"
    return _train_problem(result.get("train"))
