"""Evaluate a trained model at every length of its run: tasks (exact match, answer-token and
token accuracy from one teacher-forced pass; exact match and correct-prefix length from greedy
decoding that feeds the model its own outputs), the LM (bits per byte per protocol, file by file
on the test split) and RoPE context extensions (fine-tuned first where the scaling needs it).

Axis legend: b batch, t tokens, V vocab, L_train training length (tokens), f test files.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from typing import Any

import torch

from posenc.compare.device import autocast, to_device
from posenc.compare.profile.geometry import train_length
from posenc.compare.trainer import (
    Progress,
    finetune,
    no_progress,
    position_axes,
    task_positions,
    window_losses,
)
from posenc.core.errors import PosencError
from posenc.encoding.base import RotaryEncoding
from posenc.encoding.rotary.scaling import apply_to_model
from posenc.nn.transformer import Transformer
from posenc.records import benchmark_scalings as scalings
from posenc.records.spec import LM_PROTOCOLS, RunSpec
from posenc.tasks import synthetic, task_registry, text

AtLength = Callable[[int], None]  # called with the sequence length before each evaluation forward

#: Also keep each example's answer log-likelihood (:func:`answer_logprob`: ``answer_logprob`` per
#: example and per length), a continuous outcome beside exact match and answer-token accuracy: on
#: from benchmark version 3 (records/spec.py's BENCHMARK_VERSION), whose task records all keep it.
ANSWER_LOGPROB = True


def _at_nothing(_: int) -> None:
    pass


# ---------------------------------------------------------------------------
# Free-running (greedy) decoding.
# ---------------------------------------------------------------------------


def feeds_back(batch: synthetic.TaskBatch) -> bool:
    """True when each row's answer is read back as it is produced: every predicted position but a
    row's last is followed by the token it predicts (``[BOS] x [SEP] y [EOS]``). A task laid out
    otherwise (the grid task answers queries at their own tokens) has nothing to feed back."""
    mask = batch.loss_mask
    if not bool(mask.any()):
        return False
    follows = mask[:, :-1] & mask[:, 1:]  # (b, t-1): predicted at p and at p+1
    if bool((batch.inputs[:, 1:][follows] != batch.targets[:, :-1][follows]).any()):
        return False
    runs = (mask[:, 1:] & ~mask[:, :-1]).sum(-1) + mask[:, 0].long()  # (b,): predicted stretches
    return bool((runs == 1).all())


def _new_cache(model: Any) -> Any:
    """A KV cache for ``model``, or None where it has none (then each step recomputes the prefix)."""
    make = getattr(model, "new_cache", None)
    if make is None:
        return None
    try:
        return make()
    except PosencError:  # an encoding without KV-cache support
        return None


@torch.no_grad()
def free_running(
    model: Any,
    batch: synthetic.TaskBatch,
    positions: torch.Tensor | None = None,
    at_length: AtLength = _at_nothing,
    *,
    device: str = "cpu",
    precision: str = "fp32",
    use_cache: bool = True,
) -> dict[str, torch.Tensor]:
    """Greedy decoding with the model's own outputs fed back, scored against the answer.

    Each row's prompt (``[BOS] x [SEP]``) is the batch's own; from its first predicted position
    on, the token the model predicted is what it reads next (never the gold one). Rows of one
    batch may start answering at different positions: every row decodes in the same steps, a row
    still in its prompt reads its prompt. With a KV cache (``use_cache`` and the model has one)
    each step runs one token; otherwise the whole prefix again. ``positions`` (``(b, t)`` or
    ``(b, t, a)``, randomized positions or a grid's coordinates) are sliced like the tokens;
    ``at_length(n)`` runs before each step with the length read so far (a dynamic RoPE scaling
    sets its factor from it, as it does when generating).

    Returns per row (all ``(b,)``): ``exact_match`` (every answer token and EOS right),
    ``prefix`` (answer tokens right before the first wrong one; EOS not counted) and
    ``answer_tokens`` (the answer's length without EOS). ``model(tokens, positions=..., cache=...)``
    returns logits ``(b, t, V)``.
    """
    mask, targets = batch.loss_mask, batch.targets
    b, t = batch.inputs.shape
    any_row = mask.any(0)  # (t,)
    first = int(any_row.nonzero()[0])
    last = int(any_row.nonzero()[-1])
    working = batch.inputs.clone()
    predicted = torch.full_like(targets, synthetic.PAD)
    cache = _new_cache(model) if use_cache else None

    def run(lo: int, hi: int) -> torch.Tensor:
        pos = None if positions is None else positions[:, lo:hi]
        at_length(hi)
        with autocast(device, precision):
            if cache is None:
                return model(working[:, :hi], positions=None if positions is None else positions[:, :hi])
            return model(working[:, lo:hi], positions=pos, cache=cache)

    logits = run(0, first + 1)  # the common prompt, then one token per step
    for p in range(first, last + 1):
        step = logits[:, -1].float().argmax(-1)  # (b,)
        predicted[:, p] = step
        if p + 1 < t:
            feed = mask[:, p] & mask[:, p + 1]  # the answer continues: read what was predicted
            working[feed, p + 1] = step[feed]
            if p < last:
                logits = run(p + 1, p + 2)
    correct = (predicted == targets) & mask  # (b, t)
    answer = mask & (targets != synthetic.EOS)
    before_error = (answer & ~correct).cumsum(-1) == 0  # (b, t): no wrong answer token so far
    return {
        "exact_match": correct.sum(-1) == mask.sum(-1),
        "prefix": (answer & correct & before_error).sum(-1),
        "answer_tokens": answer.sum(-1),
    }


# ---------------------------------------------------------------------------
# Tasks.
# ---------------------------------------------------------------------------


def answer_logprob(logits: torch.Tensor, batch: synthetic.TaskBatch) -> torch.Tensor:
    """Per-example mean log-probability in nats (``(b,)``, at most 0) the teacher-forced pass gives
    the answer's own tokens ``y_1 .. y_m`` (EOS left out, as answer-token accuracy leaves it out):
    how close a model is to the answer, not only whether its first choice is right.

    Args:
        logits: ``(b, t, V)`` from one teacher-forced pass over ``batch.inputs``.
    """
    answer = batch.loss_mask & (batch.targets != synthetic.EOS)  # (b, t)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)  # (b, t)
    return (logp * answer).sum(-1) / answer.sum(-1)


@torch.no_grad()
def evaluate_task(
    model: Transformer, spec: RunSpec, progress: Progress = no_progress, at_length: AtLength = _at_nothing
) -> dict[str, Any]:
    """At every evaluation length (same examples for everyone), per example (``per_example``) and
    averaged: exact match, token accuracy (answer and EOS) and answer-token accuracy (the answer
    alone, :func:`posenc.tasks.synthetic.answer_accuracy`) from one teacher-forced pass, and with
    ``spec.eval.free_running`` the free-running scores of :func:`free_running` (exact match, and
    the correct prefix in tokens with the answer's length beside it). ``tokens``: the longest row
    the model reads at each length, ``train_tokens``: the longest in training (the unit of the
    length buckets)."""
    model.eval()
    axes = position_axes(model)
    pos_gen = torch.Generator().manual_seed(10_000 + spec.eval.seed)  # identical across runs
    keys = [
        "exact_match",
        "token_accuracy",
        "answer_accuracy",
        *(["answer_logprob"] if ANSWER_LOGPROB else []),
    ]
    free_keys = ["free_exact_match", "free_prefix", "answer_tokens"]
    per: dict[str, list[list]] = {key: [] for key in keys + free_keys}
    means: dict[str, list[float]] = {key: [] for key in [*keys, "free_exact_match", "free_prefix_share"]}
    digest = hashlib.sha256()
    batches = [task_registry.eval_batch(spec.task, n, spec.eval.samples, seed=spec.eval.seed)
               for n in spec.eval.lengths]  # fmt: skip
    decode = spec.eval.free_running and all(feeds_back(batch) for batch in batches)
    decoding = "greedy, KV cache" if _new_cache(model) is not None else "greedy, prefix recomputed"
    for batch in batches:
        digest.update(batch.inputs.numpy().tobytes())
        batch = to_device(batch, spec.device)
        scores = _task_scores(model, spec, batch, (axes, pos_gen), at_length, decode)
        for key in keys + (free_keys if decode else []):
            values = torch.cat(scores[key]).cpu()
            if key in ("exact_match", "free_exact_match", "free_prefix", "answer_tokens"):
                per[key].append(values.int().tolist())
            else:
                per[key].append([round(x, 6) for x in values.double().tolist()])
            if key in means:
                means[key].append(float(values.double().mean()))
        if decode:
            share = torch.cat(scores["free_prefix"]).double() / torch.cat(scores["answer_tokens"]).double()
            means["free_prefix_share"].append(float(share.mean()))
        progress(1)
    out: dict[str, Any] = {
        "lengths": list(spec.eval.lengths),
        "tokens": [task_registry.max_sequence_length(spec.task, n) for n in spec.eval.lengths],
        "train_tokens": train_length(spec.task, spec.train),
        **{key: means[key] for key in keys},
        "per_example": {key: per[key] for key in keys},
        "eval_data_sha256": digest.hexdigest(),
    }
    if spec.eval.free_running:
        out.update(_free_running_result(spec, decode, decoding, means))
    if spec.eval.free_running and decode:
        out["per_example"].update({key: per[key] for key in free_keys})
    return out


def _task_scores(
    model: Transformer, spec: RunSpec, batch: synthetic.TaskBatch, positions_from: tuple[int, torch.Generator],
    at_length: AtLength, decode: bool,
) -> dict[str, list[torch.Tensor]]:  # fmt: skip
    """Per-example scores of one evaluation length's examples, batch by batch: the teacher-forced
    ones, and with ``decode`` the free-running ones (``positions_from``: position axes, generator)."""
    axes, pos_gen = positions_from
    scores: dict[str, list[torch.Tensor]] = {}
    for lo in range(0, spec.eval.samples, spec.eval.batch_size):
        part = batch.rows(slice(lo, lo + spec.eval.batch_size))
        positions = task_positions(spec, part, axes, pos_gen)
        at_length(part.inputs.shape[1])
        with autocast(spec.device, spec.precision):
            logits = model(part.inputs, positions=positions).float()  # (b, t, V)
        ex, tok = synthetic.score(logits, part)
        found = {
            "exact_match": ex,
            "token_accuracy": tok,
            "answer_accuracy": synthetic.answer_accuracy(logits, part),
        }
        if ANSWER_LOGPROB:
            found["answer_logprob"] = answer_logprob(logits, part)
        if decode:
            free = free_running(
                model, part, positions, at_length, device=spec.device, precision=spec.precision
            )
            found.update(free_exact_match=free["exact_match"], free_prefix=free["prefix"],
                         answer_tokens=free["answer_tokens"])  # fmt: skip
        for key, value in found.items():
            scores.setdefault(key, []).append(value)
    return scores


def _free_running_result(
    spec: RunSpec, decode: bool, decoding: str, means: dict[str, list[float]]
) -> dict[str, Any]:
    """The free-running keys of a task's result: the scores, or why the task was not decoded."""
    if not decode:
        why = f"task {spec.task!r} does not read its answer back (no [BOS] x [SEP] y [EOS] rows)"
        return {"free_running": {"decoding": None, "why": why}}
    return {
        "free_running": {"decoding": decoding},
        "free_exact_match": means["free_exact_match"],
        "free_prefix_share": means["free_prefix_share"],
    }


# ---------------------------------------------------------------------------
# The language model, on the test split file by file.
# ---------------------------------------------------------------------------


def lm_spans(spec: RunSpec) -> list[text.ScoredSpan]:
    """The test spans an LM run scores (the same for every encoding): ``spec.eval.lm_files`` test
    files, ``lm_bytes / lm_files`` bytes each, checked to hold every window the evaluation reads
    (:meth:`posenc.records.spec.EvalSpec.test_span`)."""
    ev = spec.eval
    if ev.lm_files < 1:
        raise PosencError(
            "eval.lm_files = 0 scored the first bytes of the validation text (records written before the "
            "test split); this version scores test files: set eval.lm_files to 1 or more (20 in quick)"
        )
    span = ev.test_span(spec.train.max_len)
    return text.scored_spans(text.stdlib_corpus(), span=span, files=ev.lm_files, seed=ev.seed)


def check_lm_data(specs: list[RunSpec]) -> list[str]:
    """Before any run: every LM run's test spans can be cut from this machine's test split (a
    PosencError naming the settings otherwise). Returns a note for each setting that scores fewer
    files than its ``eval.lm_files`` (only so many test files are long enough)."""
    notes = []
    lm = {(s.eval, s.train.max_len): s for s in specs if s.task == "lm"}  # one run per setting
    for spec in lm.values():
        spans, ev = lm_spans(spec), spec.eval
        if len(spans) < ev.lm_files:
            notes.append(
                f"the LM scores {len(spans)} test files, not eval.lm_files = {ev.lm_files}: only {len(spans)} "
                f"test files here (Python {text.stdlib_corpus().python_version}) have the {spans[0].span + 1} "
                "bytes a span needs"
            )
    return notes


def _span_windows(spec: RunSpec, data: torch.Tensor, length: int, span: int):
    """``(inputs, targets, scored)`` of one file's span for perplexity at ``length``: ``scored`` = how
    many of the last targets of each window count (all of them for non-overlapping windows)."""
    ev = spec.eval
    if ev.lm_protocol == "sliding":
        stride = min(ev.sliding_stride, length)
        longest = max(ev.lm_lengths)
        count = (span - longest) // stride + 1
        inputs, targets = text.lastk_windows(data, length, stride, count, longest)
        return inputs, targets, stride
    inputs, targets = text.nonoverlapping_windows(data, length, span)
    return inputs, targets, length


def _file_losses(
    model: Transformer,
    spec: RunSpec,
    windows: list[tuple[torch.Tensor, torch.Tensor]],
    scored: int,
    rows_per_pass: int,
) -> torch.Tensor:
    """Per-token losses ``(f, w, scored)`` of the same number ``w`` of windows from each file."""
    inputs = torch.cat([i for i, _ in windows])
    targets = torch.cat([t for _, t in windows])
    losses = window_losses(model, spec, inputs, targets, rows_per_pass)[:, -scored:]  # (f*w, scored)
    return losses.view(len(windows), -1, scored)


@torch.no_grad()
def evaluate_lm(
    model: Transformer, spec: RunSpec, progress: Progress = no_progress, at_length: AtLength = _at_nothing
) -> dict[str, Any]:
    """Bits per byte per L_valid (``spec.eval.lm_protocol``), last-k loss per context, loss by
    position: on the test split, file by file (:func:`lm_spans`; tuning and early stopping read
    the validation split only).

    Every L_valid scores the same bytes of every file. ``per_file`` keeps each file's bits per
    byte (``bits_per_byte[length][file]``, ``lastk_bits_per_byte[context][file]``, files in the
    order of ``files``), the unit for intervals over files; ``window_nats`` the mean loss of each
    scored window (file by file). Randomized-position models are evaluated as they were trained
    (Ruoss et al. 2023): sorted positions sampled from ``[0, L_max)``, from a fixed generator.
    """
    model.eval()
    ev, l_train = spec.eval, spec.train.max_len
    spans = lm_spans(spec)
    span = spans[0].span
    rows_per_pass = max(1, ev.batch_size * 64 // max(ev.lm_lengths))  # bound memory at long lengths
    nats, windows, per_file, by_position = [], [], [], None
    position_len = ev.position_multiple * l_train
    for length in ev.lm_lengths:
        parts = [_span_windows(spec, s.data, length, span) for s in spans]
        scored = parts[0][2]
        at_length(length)
        losses = _file_losses(model, spec, [(i, t) for i, t, _ in parts], scored, rows_per_pass)  # (f, w, s)
        nats.append(float(losses.mean()))
        windows.append([float(x) for x in losses.mean(-1).flatten()])
        per_file.append([float(x) / math.log(2) for x in losses.mean((1, 2))])
        if length == position_len and ev.lm_protocol == "nonoverlapping":
            by_position = losses.flatten(0, 1).mean(0)
        progress(1)
    if by_position is None:  # 8 * L_train is not among the non-overlapping L_valid
        usable = span // position_len * position_len
        parts = [text.nonoverlapping_windows(s.data, position_len, usable) for s in spans]
        at_length(position_len)
        by_position = _file_losses(model, spec, parts, position_len, rows_per_pass).flatten(0, 1).mean(0)
    contexts = [int(round(c * l_train)) for c in ev.lastk_contexts]
    lastk, lastk_files = [], []
    for context in contexts:
        parts = [
            text.lastk_windows(s.data, context, ev.lastk_k, ev.lastk_windows, max(contexts)) for s in spans
        ]
        at_length(context)
        losses = _file_losses(model, spec, parts, ev.lastk_k, rows_per_pass)  # (f, w, k)
        lastk.append(float(losses.mean()))
        lastk_files.append([float(x) / math.log(2) for x in losses.mean((1, 2))])
    train_nats = nats[list(ev.lm_lengths).index(l_train)] if l_train in ev.lm_lengths else None
    return {
        "protocol": ev.lm_protocol,
        "protocol_description": LM_PROTOCOLS[ev.lm_protocol],
        "lengths": list(ev.lm_lengths),
        "split": "test",
        "files": [s.path for s in spans],
        "file_span": span,
        "scored_bytes": span * len(spans),
        "eval_data_sha256": text.spans_sha256(spans),
        "nats_per_byte": nats,
        "window_nats": windows,
        "bits_per_byte": [x / math.log(2) for x in nats],
        "perplexity": [math.exp(x) for x in nats],
        "ratio_to_train": None if train_nats is None else [math.exp(x - train_nats) for x in nats],
        "per_file": {"bits_per_byte": per_file, "lastk_bits_per_byte": lastk_files},
        "lastk": {
            "contexts": contexts,
            "k": ev.lastk_k,
            "windows": ev.lastk_windows * len(spans),
            "nats_per_byte": lastk,
        },
        "loss_by_position": {"length": position_len, "nats_per_byte": [float(x) for x in by_position]},
    }


def _rotary_geometry(model: Transformer) -> tuple[int, float]:
    """(rotated dimension, base) of the model's rotary encoding."""
    for module in model.modules():
        if isinstance(module, RotaryEncoding) and module.supports_scaling:
            rotary: Any = module  # RoPE: rotary_dim and config.base (checked by its Config)
            return int(rotary.rotary_dim), float(rotary.config.base)
    raise PosencError("this model has no rotary encoding to scale")


def evaluate_scaling(
    model: Transformer, spec: RunSpec, name: str, progress: Progress = no_progress
) -> dict[str, Any]:
    """One scaling as its paper uses it (see :mod:`posenc.records.benchmark_scalings`), on a copy of ``model``."""
    fn = evaluate_lm if spec.task == "lm" else evaluate_task
    scaling = scalings.parse(name)
    original = train_length(spec.task, spec.train)
    dim, base = _rotary_geometry(model)
    scaled = copy.deepcopy(model)
    note: dict[str, Any] = {"scaling": name}
    regime = (
        scalings.yarn_regime(dim=dim, base=base, original=original) if scaling.rope_type == "yarn" else None
    )
    if regime:
        note["bands"] = regime

    def apply(seq_len: int | None) -> dict:
        config = scalings.scaling_dict(scaling, dim=dim, base=base, original=original, seq_len=seq_len)
        if apply_to_model(scaled, config) == 0:
            raise PosencError(f"scaling {name!r} needs a rotary encoding; {spec.encoding!r} has none")
        return config

    note["params"] = apply(None)
    if scaling.needs_finetune:
        if spec.finetune > 0:
            length = scalings.finetune_length(scaling, original)
            tuned = finetune(scaled, spec, length, progress)
            note["finetune"] = {k: tuned[k] for k in ("steps", "final_loss", "batch_size")} | {
                "length": length
            }
        else:
            note["outside_regime"] = (
                f"{scaling.rope_type} is meant to be fine-tuned at the target length; evaluated without"
            )

    def reapply(seq_len: int) -> None:
        apply(seq_len)

    at_length = reapply if scaling.per_length else _at_nothing
    result = fn(scaled, spec, progress, at_length)
    result["method"] = note
    return result


def evaluate(
    model: Transformer, spec: RunSpec, progress: Progress = no_progress, failed: dict[str, str] | None = None
) -> dict[str, Any]:
    """The default evaluation plus one per RoPE scaling (each on a copy of the trained model).

    ``failed``: a scaling whose evaluation raises loses that evaluation only; why goes to
    ``failed`` under its name and the run keeps every other evaluation (without it, it raises)."""
    fn = evaluate_lm if spec.task == "lm" else evaluate_task
    results = {"default": fn(model, spec, progress)}
    for name in spec.scalings:
        try:
            results[name] = evaluate_scaling(model, spec, name, progress)
        except Exception as exc:  # noqa: BLE001  (a scaling from outside posenc may raise anything)
            if failed is None:
                raise
            failed[name] = scalings.failure_reason(exc)
    return results
