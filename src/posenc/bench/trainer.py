"""Train one model on one task and evaluate it at every length: the body of a run.

Axis legend: b batch, t tokens, V vocab, L_train training length (tokens).

:func:`execute` is the single function every executor runs: ``RunSpec -> payload``
(a JSON-ready dict; the store adds provenance and a checksum). Fairness
(the benchmark protocol): for a given seed every encoding gets the same initialisation
seed, the same optimiser and schedule, and the same training stream (the data
generator is separate from the model's and from the randomized-positions one),
and every evaluation length scores the same examples / bytes for everyone.
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from posenc import schedules
from posenc.bench.profiles import train_length
from posenc.bench.spec import RunSpec
from posenc.errors import PosencError
from posenc.model import Transformer, TransformerConfig
from posenc.positions import randomized as randomized_positions
from posenc.rope_scaling import ORIGINAL, ROPE_SCALINGS, apply_to_model
from posenc.tasks import synthetic, text

Progress = Callable[[int], None]  # advance the caller's progress by this many work units


def _noop(_: int) -> None:
    pass


# ---------------------------------------------------------------------------
# Model, optimiser, schedule.
# ---------------------------------------------------------------------------


def build_model(spec: RunSpec) -> Transformer:
    """The benchmark model for ``spec``, initialised from ``spec.seed`` alone."""
    vocab = text.VOCAB_SIZE if spec.task == "lm" else synthetic.VOCAB_SIZE
    torch.manual_seed(spec.seed)
    config = TransformerConfig(
        vocab_size=vocab,
        d_model=spec.model.d_model,
        num_heads=spec.model.num_heads,
        num_kv_heads=spec.model.num_kv_heads,
        num_layers=spec.model.num_layers,
        ffn_dim=spec.model.ffn_dim,
        combine=spec.model.combine,
        inject=spec.model.inject,
        causal=True,
        encoding=schedules.parse(spec.schedule, spec.model.num_layers) if spec.schedule else spec.encoding,
        encoding_config=dict(spec.encoding_config),
        tie_embeddings=True,
        dropout=0.0,
    )
    return Transformer(config)


def learning_rate(step: int, spec: RunSpec) -> float:
    """Linear warm-up to ``lr``, then cosine down to ``min_lr_ratio * lr`` at the last step."""
    tr = spec.train
    if step < tr.warmup_steps:
        return tr.lr * (step + 1) / tr.warmup_steps
    progress = (step - tr.warmup_steps) / max(1, tr.steps - tr.warmup_steps)
    return tr.lr * (tr.min_lr_ratio + (1 - tr.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def position_scale(step: int, spec: RunSpec) -> float:
    """Gradual introduction of an additive encoding: ``min(1, step / position_warmup_steps)``.

    0.0 at step 0 (tokens only), 1.0 from ``position_warmup_steps`` on (the
    encoding as published); always 1.0 when ``position_warmup_steps`` is 0 (off).
    """
    warmup = spec.train.position_warmup_steps
    return 1.0 if warmup <= 0 else min(1.0, step / warmup)


def make_optimizer(model: torch.nn.Module, spec: RunSpec) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on norms, biases or embedding tables)."""
    embeddings = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 and id(p) not in embeddings else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": spec.train.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    beta1, beta2 = spec.train.betas
    return torch.optim.AdamW(groups, lr=spec.train.lr, betas=(beta1, beta2))


def _positions(spec: RunSpec, batch: int, seq_len: int, generator: torch.Generator) -> torch.Tensor | None:
    """None (= arange) or Ruoss et al. randomized positions from ``[0, L_max)``."""
    if spec.randomized_max_len is None:
        return None
    return randomized_positions(batch, seq_len, spec.randomized_max_len, generator)


# ---------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------

#: Run the training forward (and so its backward) through ``torch.compile``. Measured with
#: ``posenc bench`` (train section) and benchmarks/compile_training.py (the compile pays back
#: only after thousands of steps, more than a profile runs): see benchmarks/README.md.
COMPILE_TRAINING = False


def training_forward(model: Transformer, *, compiled: bool | None = None) -> Callable[..., torch.Tensor]:
    """The forward the training loop calls: the model itself, or ``torch.compile(model)``
    (``compiled``, default :data:`COMPILE_TRAINING`) with dynamic shapes, since task batches
    vary in length. Evaluation always runs the model eagerly (many lengths, few calls)."""
    use = COMPILE_TRAINING if compiled is None else compiled
    return torch.compile(model, dynamic=True) if use else model


def train(model: Transformer, spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """Fixed-step training; returns the loss curve and timing (wall-clock and steps/s separately)."""
    data_gen = torch.Generator().manual_seed(spec.seed)  # the shared data stream
    pos_gen = torch.Generator().manual_seed(spec.seed + 7_777)  # randomized positions only
    optimizer = make_optimizer(model, spec)
    corpus = text.stdlib_corpus() if spec.task == "lm" else None
    losses: list[float] = []
    model.train()
    forward = training_forward(model)
    compute = 0.0
    start = time.perf_counter()
    for step in range(spec.train.steps):
        if corpus is not None:
            inputs, targets = text.sample_windows(
                corpus.train, spec.train.batch_size, spec.train.max_len, data_gen
            )
            mask = None
        else:
            batch = synthetic.sample_batch(
                spec.task,
                spec.train.batch_size,
                min_len=spec.train.min_len,
                max_len=spec.train.max_len,
                generator=data_gen,
            )
            inputs, targets, mask = batch.inputs, batch.targets, batch.loss_mask
        positions = _positions(spec, inputs.shape[0], inputs.shape[1], pos_gen)
        tic = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, spec)
        if spec.train.position_warmup_steps:
            model.position_scale = position_scale(step, spec)
        logits = forward(inputs, positions=positions)  # (b, t, V)
        loss_all = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (b*t,)
        loss = loss_all.mean() if mask is None else loss_all[mask.flatten()].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.train.clip_norm)
        optimizer.step()
        compute += time.perf_counter() - tic
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(
                f"training loss became {losses[-1]} at step {step} ({spec.label}, {spec.task})"
            )
        progress(1)
    wall = time.perf_counter() - start
    return {
        "loss": losses,
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        "wall_seconds": wall,
        "compute_seconds": compute,
        "steps_per_second": spec.train.steps / compute if compute > 0 else None,
        "final_position_scale": model.position_scale,  # evaluation uses the scale training ended at
    }


# ---------------------------------------------------------------------------
# Evaluation.
# ---------------------------------------------------------------------------


@torch.no_grad()
def evaluate_task(model: Transformer, spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """Exact match and token accuracy at every evaluation length (same examples for everyone)."""
    model.eval()
    pos_gen = torch.Generator().manual_seed(10_000 + spec.eval.seed)  # identical across runs
    exact, token = [], []
    digest = hashlib.sha256()
    for n in spec.eval.lengths:
        batch = synthetic.eval_batch(spec.task, n, spec.eval.samples, seed=spec.eval.seed)
        digest.update(batch.inputs.numpy().tobytes())
        hits = tokens = 0.0
        for lo in range(0, spec.eval.samples, spec.eval.batch_size):
            rows = slice(lo, lo + spec.eval.batch_size)
            part = synthetic.TaskBatch(
                batch.inputs[rows], batch.targets[rows], batch.loss_mask[rows], batch.lengths[rows]
            )
            positions = _positions(spec, part.inputs.shape[0], part.inputs.shape[1], pos_gen)
            ex, tok = synthetic.score(model(part.inputs, positions=positions), part)
            hits += float(ex.float().sum())
            tokens += float(tok.sum())
        exact.append(hits / spec.eval.samples)
        token.append(tokens / spec.eval.samples)
        progress(1)
    return {
        "lengths": list(spec.eval.lengths),
        "exact_match": exact,
        "token_accuracy": token,
        "eval_data_sha256": digest.hexdigest(),
    }


def _window_losses(
    model: Transformer, spec: RunSpec, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int
) -> torch.Tensor:
    """Per-token cross-entropy in nats, ``(w, t)``, evaluated ``batch_size`` windows at a time."""
    pos_gen = torch.Generator().manual_seed(20_000 + spec.eval.seed + inputs.shape[1])
    out = []
    for lo in range(0, inputs.shape[0], batch_size):
        chunk = inputs[lo : lo + batch_size]
        logits = model(
            chunk, positions=_positions(spec, chunk.shape[0], chunk.shape[1], pos_gen)
        )  # (b, t, V)
        out.append(F.cross_entropy(logits.transpose(1, 2), targets[lo : lo + batch_size], reduction="none"))
    return torch.cat(out)


@torch.no_grad()
def evaluate_lm(model: Transformer, spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """Non-overlapping perplexity per L_valid, last-k loss per context, loss by position.

    Randomized-position models are evaluated as they were trained (Ruoss et al.
    2023): sorted positions sampled from ``[0, L_max)``, from a fixed generator.
    """
    model.eval()
    corpus = text.stdlib_corpus()
    ev, l_train = spec.eval, spec.train.max_len
    rows_per_pass = max(1, ev.batch_size * 64 // max(ev.lm_lengths))  # bound memory at long lengths
    total = text.scored_bytes(list(ev.lm_lengths), ev.lm_bytes)
    nats, by_position = [], None
    position_len = ev.position_multiple * l_train
    for length in ev.lm_lengths:
        inputs, targets = text.nonoverlapping_windows(corpus.valid, length, total)
        losses = _window_losses(model, spec, inputs, targets, rows_per_pass)  # (w, length)
        nats.append(float(losses.mean()))
        if length == position_len:
            by_position = losses.mean(0)
        progress(1)
    if by_position is None:  # the profile did not list 8 * L_train among the L_valid
        inputs, targets = text.nonoverlapping_windows(corpus.valid, position_len, position_len * 4)
        by_position = _window_losses(model, spec, inputs, targets, rows_per_pass).mean(0)
    contexts = [int(round(c * l_train)) for c in ev.lastk_contexts]
    lastk = []
    for context in contexts:
        inputs, targets = text.lastk_windows(
            corpus.valid, context, ev.lastk_k, ev.lastk_windows, max(contexts)
        )
        lastk.append(
            float(_window_losses(model, spec, inputs, targets, rows_per_pass)[:, -ev.lastk_k :].mean())
        )
    train_nats = nats[list(ev.lm_lengths).index(l_train)] if l_train in ev.lm_lengths else None
    return {
        "lengths": list(ev.lm_lengths),
        "scored_bytes": total,
        "nats_per_byte": nats,
        "bits_per_byte": [x / math.log(2) for x in nats],
        "perplexity": [math.exp(x) for x in nats],
        "ratio_to_train": None if train_nats is None else [math.exp(x - train_nats) for x in nats],
        "lastk": {"contexts": contexts, "k": ev.lastk_k, "windows": ev.lastk_windows, "nats_per_byte": lastk},
        "loss_by_position": {"length": position_len, "nats_per_byte": [float(x) for x in by_position]},
    }


def parse_scaling(text_form: str, train_len: int) -> dict[str, Any]:
    """``"yarn:4"`` -> HF-style dict for :func:`posenc.rope_scaling.apply_to_model`."""
    rope_type, _, factor = text_form.partition(":")
    scaling: dict[str, Any] = {"rope_type": rope_type, "factor": float(factor)}
    spec = ROPE_SCALINGS.get(rope_type)
    if spec is not None and ORIGINAL in spec.required:  # the trained length is the original context
        scaling[ORIGINAL] = train_len
    return scaling


def evaluate(model: Transformer, spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """The default evaluation plus one per RoPE scaling (applied to a copy, no retraining)."""
    fn = evaluate_lm if spec.task == "lm" else evaluate_task
    results = {"default": fn(model, spec, progress)}
    for name in spec.scalings:
        scaled = copy.deepcopy(model)
        if apply_to_model(scaled, parse_scaling(name, train_length(spec.task, spec.train))) == 0:
            raise PosencError(f"scaling {name!r} needs a rotary encoding; {spec.encoding!r} has none")
        results[name] = fn(scaled, spec, progress)
    return results


# ---------------------------------------------------------------------------
# The unit of work.
# ---------------------------------------------------------------------------


def execute(spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """Train and evaluate ``spec``; the payload of one result record."""
    torch.set_num_threads(max(1, spec.threads))
    start = time.perf_counter()
    model = build_model(spec)
    training = train(model, spec, progress)
    tic = time.perf_counter()
    evaluation = evaluate(model, spec, progress)
    payload: dict[str, Any] = {
        "num_parameters": model.num_parameters(),
        "train": training,
        "eval": evaluation,
        "timing": {
            "wall_seconds": time.perf_counter() - start,
            "train_wall_seconds": training["wall_seconds"],
            "train_compute_seconds": training["compute_seconds"],
            "steps_per_second": training["steps_per_second"],
            "eval_wall_seconds": time.perf_counter() - tic,
            "threads": torch.get_num_threads(),
        },
    }
    if spec.task == "lm":
        payload["data"] = text.stdlib_corpus().describe()
    else:
        payload["data"] = {
            "source": f"synthetic:{spec.task}",
            "generator": "torch.Generator",
            "vocab": synthetic.VOCAB_SIZE,
        }
    return payload
