"""Evaluate a trained model at every length of its run: tasks (exact match, answer-token and
token accuracy), the LM (perplexity per protocol) and RoPE context extensions (fine-tuned first
where the scaling needs it).

Axis legend: b batch, t tokens, V vocab, L_train training length (tokens).
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from typing import Any

import torch

from posenc.compare.device import autocast, to_device
from posenc.compare.grid import train_length
from posenc.compare.trainer import (
    Progress,
    finetune,
    no_progress,
    position_axes,
    task_positions,
    window_losses,
)
from posenc.encoding import RotaryEncoding
from posenc.errors import PosencError
from posenc.model import Transformer
from posenc.records import scalings
from posenc.records.spec import LM_PROTOCOLS, RunSpec
from posenc.rope_scaling import apply_to_model
from posenc.tasks import registry as task_registry
from posenc.tasks import synthetic, text

AtLength = Callable[[int], None]  # called with the sequence length before each evaluation batch


def _at_nothing(_: int) -> None:
    pass


@torch.no_grad()
def evaluate_task(
    model: Transformer, spec: RunSpec, progress: Progress = no_progress, at_length: AtLength = _at_nothing
) -> dict[str, Any]:
    """Exact match, token accuracy (answer and EOS) and answer-token accuracy (the answer alone,
    :func:`posenc.tasks.synthetic.answer_accuracy`) at every evaluation length (same examples for
    everyone), per example (``per_example``) and averaged."""
    model.eval()
    axes = position_axes(model)
    pos_gen = torch.Generator().manual_seed(10_000 + spec.eval.seed)  # identical across runs
    means: dict[str, list[float]] = {"exact_match": [], "token_accuracy": [], "answer_accuracy": []}
    per: dict[str, list[list]] = {key: [] for key in means}
    digest = hashlib.sha256()
    for n in spec.eval.lengths:
        batch = task_registry.eval_batch(spec.task, n, spec.eval.samples, seed=spec.eval.seed)
        digest.update(batch.inputs.numpy().tobytes())
        batch = to_device(batch, spec.device)
        at_length(batch.inputs.shape[1])
        scores: dict[str, list[torch.Tensor]] = {key: [] for key in means}
        for lo in range(0, spec.eval.samples, spec.eval.batch_size):
            part = batch.rows(slice(lo, lo + spec.eval.batch_size))
            positions = task_positions(spec, part, axes, pos_gen)
            with autocast(spec.device, spec.precision):
                logits = model(part.inputs, positions=positions).float()  # (b, t, V)
            ex, tok = synthetic.score(logits, part)
            scores["exact_match"].append(ex)
            scores["token_accuracy"].append(tok)
            scores["answer_accuracy"].append(synthetic.answer_accuracy(logits, part))
        for key, parts in scores.items():
            values = torch.cat(parts).double()
            means[key].append(float(values.mean()))
            per[key].append(
                values.int().tolist() if key == "exact_match" else [round(x, 6) for x in values.tolist()]
            )
        progress(1)
    return {
        "lengths": list(spec.eval.lengths),
        **means,
        "per_example": per,
        "eval_data_sha256": digest.hexdigest(),
    }


def _perplexity_windows(spec: RunSpec, corpus_valid: torch.Tensor, length: int, total: int):
    """``(inputs, targets, scored)`` for perplexity at ``length``: ``scored`` = how many of the
    last targets of each window count (all of them for non-overlapping windows)."""
    ev = spec.eval
    if ev.lm_protocol == "sliding":
        stride = min(ev.sliding_stride, length)
        longest = max(ev.lm_lengths)
        inputs, targets = text.lastk_windows(corpus_valid, length, stride, total // stride, longest)
        return inputs, targets, stride
    inputs, targets = text.nonoverlapping_windows(corpus_valid, length, total)
    return inputs, targets, length


@torch.no_grad()
def evaluate_lm(
    model: Transformer, spec: RunSpec, progress: Progress = no_progress, at_length: AtLength = _at_nothing
) -> dict[str, Any]:
    """Perplexity per L_valid (``spec.eval.lm_protocol``), last-k loss per context, loss by position.

    Every L_valid scores the same bytes. ``window_nats`` keeps the mean loss of each
    scored window, the unit the intervals resample. Randomized-position models are
    evaluated as they were trained (Ruoss et al. 2023): sorted positions sampled from
    ``[0, L_max)``, from a fixed generator.
    """
    model.eval()
    corpus = text.stdlib_corpus()
    ev, l_train = spec.eval, spec.train.max_len
    rows_per_pass = max(1, ev.batch_size * 64 // max(ev.lm_lengths))  # bound memory at long lengths
    total = text.scored_bytes(list(ev.lm_lengths), ev.lm_bytes)
    nats, windows, by_position = [], [], None
    position_len = ev.position_multiple * l_train
    for length in ev.lm_lengths:
        inputs, targets, scored = _perplexity_windows(spec, corpus.valid, length, total)
        at_length(length)
        losses = window_losses(model, spec, inputs, targets, rows_per_pass)[:, -scored:]  # (w, scored)
        nats.append(float(losses.mean()))
        windows.append([float(x) for x in losses.mean(1)])
        if length == position_len and ev.lm_protocol == "nonoverlapping":
            by_position = losses.mean(0)
        progress(1)
    if by_position is None:  # 8 * L_train is not among the non-overlapping L_valid
        inputs, targets = text.nonoverlapping_windows(corpus.valid, position_len, position_len * 4)
        at_length(position_len)
        by_position = window_losses(model, spec, inputs, targets, rows_per_pass).mean(0)
    contexts = [int(round(c * l_train)) for c in ev.lastk_contexts]
    lastk = []
    for context in contexts:
        inputs, targets = text.lastk_windows(
            corpus.valid, context, ev.lastk_k, ev.lastk_windows, max(contexts)
        )
        at_length(context)
        lastk.append(
            float(window_losses(model, spec, inputs, targets, rows_per_pass)[:, -ev.lastk_k :].mean())
        )
    train_nats = nats[list(ev.lm_lengths).index(l_train)] if l_train in ev.lm_lengths else None
    return {
        "protocol": ev.lm_protocol,
        "protocol_description": LM_PROTOCOLS[ev.lm_protocol],
        "lengths": list(ev.lm_lengths),
        "scored_bytes": total,
        "nats_per_byte": nats,
        "window_nats": windows,
        "bits_per_byte": [x / math.log(2) for x in nats],
        "perplexity": [math.exp(x) for x in nats],
        "ratio_to_train": None if train_nats is None else [math.exp(x - train_nats) for x in nats],
        "lastk": {"contexts": contexts, "k": ev.lastk_k, "windows": ev.lastk_windows, "nats_per_byte": lastk},
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
    """One scaling as its paper uses it (see :mod:`posenc.records.scalings`), on a copy of ``model``."""
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


def evaluate(model: Transformer, spec: RunSpec, progress: Progress = no_progress) -> dict[str, Any]:
    """The default evaluation plus one per RoPE scaling (each on a copy of the trained model)."""
    fn = evaluate_lm if spec.task == "lm" else evaluate_task
    results = {"default": fn(model, spec, progress)}
    for name in spec.scalings:
        results[name] = evaluate_scaling(model, spec, name, progress)
    return results
