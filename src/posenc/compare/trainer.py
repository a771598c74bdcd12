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
import io
import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from posenc.compare.device import autocast, describe, to_device
from posenc.compare.grid import train_length
from posenc.encoding import PositionalEncoding, RotaryEncoding
from posenc.errors import PosencError
from posenc.model import Transformer
from posenc.positions import randomized as randomized_positions
from posenc.records import scalings
from posenc.records.models import build_model
from posenc.records.provenance import code_of
from posenc.records.spec import LM_PROTOCOLS, WEIGHTS_KEY, RunSpec
from posenc.rope_scaling import apply_to_model
from posenc.tasks import registry as task_registry
from posenc.tasks import synthetic, text

#: ``progress(units)`` advances the caller's progress by this many work units;
#: ``progress(0, status)`` reports a held-out check (:func:`check_status`) for the display.
Progress = Callable[..., None]


def _noop(_: int, status: dict[str, Any] | None = None) -> None:
    pass


def check_status(step: int, metric: str, value: float) -> dict[str, Any]:
    """What a held-out check reports to the progress display."""
    return {"step": step, "metric": metric, "value": value}


# ---------------------------------------------------------------------------
# Optimiser and schedule (the model: posenc.records.models.build_model).
# ---------------------------------------------------------------------------


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
    """AdamW; weight decay on matrices only (not on norms, biases or embedding tables).

    The fused implementation where the parameters' device has one (CPU and CUDA do: one
    kernel per step instead of a few per tensor; on the benchmark's model it takes the
    optimizer step from 1.4 to 0.6 ms), else the multi-tensor (``foreach``) one.
    """
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
    try:
        return torch.optim.AdamW(groups, lr=spec.train.lr, betas=(beta1, beta2), fused=True)
    except RuntimeError:  # no fused kernel for these parameters' device or dtype
        return torch.optim.AdamW(groups, lr=spec.train.lr, betas=(beta1, beta2), foreach=True)


def _positions(spec: RunSpec, batch: int, seq_len: int, generator: torch.Generator) -> torch.Tensor | None:
    """None (= arange) or Ruoss et al. randomized positions from ``[0, L_max)`` (drawn on the CPU,
    then moved to the run's device)."""
    if spec.randomized_max_len is None:
        return None
    return randomized_positions(batch, seq_len, spec.randomized_max_len, generator).to(spec.device)


def position_axes(model: Transformer) -> int:
    """The axes of the positions the model's encodings read (2 or 3 for grid encodings, else 1)."""
    return max(
        (enc.position_axes for enc in model.modules() if isinstance(enc, PositionalEncoding)), default=1
    )


def _task_positions(
    spec: RunSpec, batch: synthetic.TaskBatch, axes: int, generator: torch.Generator
) -> torch.Tensor | None:
    """The positions of a task batch: a grid task's coordinates as the encoding reads them
    (:meth:`~posenc.tasks.synthetic.TaskBatch.positions_for`), else :func:`_positions`."""
    if batch.positions is not None:
        return batch.positions_for(axes)
    return _positions(spec, batch.inputs.shape[0], batch.inputs.shape[1], generator)


# ---------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------

#: Run the training forward (and so its backward) through ``torch.compile``. Measured with the
#: speed races (benchmarks/run_speed.py, train section) and benchmarks/compile_training.py (the
#: compile pays back only after thousands of steps, more than a profile runs): see benchmarks/README.md.
COMPILE_TRAINING = False


def training_forward(model: Transformer, *, compiled: bool | None = None) -> Callable[..., torch.Tensor]:
    """The forward the training loop calls: the model itself, or ``torch.compile(model)``
    (``compiled``, default :data:`COMPILE_TRAINING`) with dynamic shapes, since task batches
    vary in length. Evaluation always runs the model eagerly (many lengths, few calls)."""
    use = COMPILE_TRAINING if compiled is None else compiled
    return torch.compile(model, dynamic=True) if use else model


VALID_SEED = 50_000  # held-out in-distribution set: its own generator (not the stream, not a test set)


def heldout_task_batch(spec: RunSpec) -> synthetic.TaskBatch:
    """The held-out in-distribution set of a task run: ``valid_samples`` examples with n ~
    U{min_len .. max_len} (the training distribution), from a generator of their own."""
    generator = torch.Generator().manual_seed(VALID_SEED + spec.eval.seed)
    tr = spec.train
    return task_registry.sample_batch(
        spec.task, tr.valid_samples, min_len=tr.min_len, max_len=tr.max_len, generator=generator
    )


def heldout_lm_windows(spec: RunSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """``valid_samples`` windows of L_train bytes from the end of the validation text (never
    the bytes any evaluation scores, which start at its beginning)."""
    inputs, targets = text.tail_windows(
        text.stdlib_corpus().valid, spec.train.max_len, spec.train.valid_samples
    )
    return inputs.to(spec.device), targets.to(spec.device)


def plateaued(losses: list[float], *, checks: int, tolerance: float) -> bool:
    """True when the best of the last ``checks`` held-out losses is less than ``tolerance``
    (relative) below the best one before them (needs more than ``checks`` values)."""
    if len(losses) <= checks:
        return False
    before, recent = min(losses[:-checks]), min(losses[-checks:])
    return recent > before * (1 - tolerance)


class Checker:
    """Held-out in-distribution checks during training: exact match for tasks, loss for the LM.

    ``check(model, step, train_loss)`` scores the held-out set and returns True once converged:
    exact match >= ``converge_at`` (tasks), or (LM, at a check from step ``plateau_after`` on)
    the best loss of the last ``plateau_checks`` checks less than ``plateau`` (relative) below
    the best before them. The checks are the run's learning curve (:meth:`to_dict`: step, mean
    training loss since the previous check, held-out metric).
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.steps: list[int] = []
        self.train_losses: list[float] = []  # mean training loss of the steps since the last check
        self.values: list[float] = []  # exact match (tasks) or nats/byte (LM)
        if spec.task == "lm":
            self.inputs, self.targets = heldout_lm_windows(spec)
            self.batch = None
        else:
            self.batch = to_device(heldout_task_batch(spec), spec.device)

    @property
    def metric(self) -> str:
        return "valid_loss" if self.batch is None else "valid_exact_match"

    @torch.no_grad()
    def score(self, model: Transformer) -> float:
        was_training = model.training
        model.eval()
        if self.batch is None:
            value = float(_window_losses(model, self.spec, self.inputs, self.targets, 64).mean())
        else:
            hits = 0
            pos_gen = torch.Generator().manual_seed(VALID_SEED + 1)
            for lo in range(0, self.batch.inputs.shape[0], self.spec.eval.batch_size):
                part = self.batch.rows(slice(lo, lo + self.spec.eval.batch_size))
                positions = _task_positions(self.spec, part, position_axes(model), pos_gen)
                with autocast(self.spec.device, self.spec.precision):
                    logits = model(part.inputs, positions=positions)
                exact, _ = synthetic.score(logits.float(), part)
                hits += int(exact.sum())
            value = hits / self.batch.inputs.shape[0]
        model.train(was_training)
        return value

    def check(self, model: Transformer, step: int, train_loss: float = math.nan) -> bool:
        self.steps.append(step)
        self.train_losses.append(train_loss)
        self.values.append(self.score(model))
        tr = self.spec.train
        if self.batch is not None:
            return self.values[-1] >= tr.converge_at
        if step < tr.plateau_after:
            return False
        return plateaued(self.values, checks=tr.plateau_checks, tolerance=tr.plateau)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": list(self.steps),
            "train_loss": list(self.train_losses),
            self.metric: list(self.values),
        }


def _training_batch(spec: RunSpec, generator: torch.Generator, corpus, seq_len: int, batch_size: int):
    if corpus is not None:
        inputs, targets = text.sample_windows(corpus, batch_size, seq_len, generator)
        return inputs.to(spec.device), targets.to(spec.device)
    batch = task_registry.sample_batch(
        spec.task, batch_size, min_len=spec.train.min_len, max_len=spec.train.max_len, generator=generator
    )
    return to_device(batch, spec.device)


def _loop(
    model: Transformer,
    spec: RunSpec,
    *,
    steps: int,
    lr_at: Callable[[int], float],
    seq_len: int,
    batch_size: int,
    seed_offset: int = 0,
    checker: Checker | None = None,
    progress: Progress = _noop,
) -> dict[str, Any]:
    """The training loop shared by training and fine-tuning.

    No host synchronisation per step: losses stay on the device until the end (or a
    check); finiteness is checked at every check and at the end. Each check reports its step
    and held-out metric to ``progress`` (:func:`check_status`).
    """
    data_gen = torch.Generator().manual_seed(spec.seed + seed_offset)  # the shared data stream
    pos_gen = torch.Generator().manual_seed(spec.seed + 7_777 + seed_offset)  # randomized positions only
    optimizer = make_optimizer(model, spec)
    corpus = text.stdlib_corpus().train if spec.task == "lm" else None
    losses = torch.zeros(steps, device=spec.device)
    model.train()
    axes = position_axes(model)
    forward = training_forward(model)
    compute = 0.0
    converged_at: int | None = None
    taken = 0
    last_check = 0
    start = time.perf_counter()
    for step in range(steps):
        drawn = _training_batch(spec, data_gen, corpus, seq_len, batch_size)
        if isinstance(drawn, synthetic.TaskBatch):
            inputs, targets, mask = drawn.inputs, drawn.targets, drawn.loss_mask
            positions = _task_positions(spec, drawn, axes, pos_gen)
        else:  # language-model windows
            (inputs, targets), mask = drawn, None
            positions = _positions(spec, inputs.shape[0], inputs.shape[1], pos_gen)
        tic = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        if spec.train.position_warmup_steps:
            model.position_scale = position_scale(step, spec)
        with autocast(spec.device, spec.precision):
            logits = forward(inputs, positions=positions)  # (b, t, V)
        loss_all = F.cross_entropy(
            logits.float().flatten(0, 1), targets.flatten(), reduction="none"
        )  # (b*t,)
        # masked mean by weights, not by boolean indexing (which waits for the device on GPUs)
        loss = loss_all.mean() if mask is None else (loss_all * mask.flatten()).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.train.clip_norm, foreach=True)
        optimizer.step()
        losses[step] = loss.detach()
        compute += time.perf_counter() - tic
        taken = step + 1
        progress(1)
        if checker is not None and taken % spec.train.check_every == 0:
            _check_finite(losses[:taken], spec)
            done = checker.check(model, taken, float(losses[last_check:taken].mean()))
            last_check = taken
            progress(0, check_status(taken, checker.metric, checker.values[-1]))
            if done:
                converged_at = taken
                break
    _check_finite(losses[:taken], spec)
    wall = time.perf_counter() - start
    values = losses[:taken].cpu().tolist()
    tail = values[-20:] or [math.nan]
    return {
        "loss": values,
        "steps": taken,
        "converged": converged_at is not None,
        "steps_to_converge": converged_at,
        "final_loss": sum(tail) / len(tail),
        "wall_seconds": wall,
        "compute_seconds": compute,
        "steps_per_second": taken / compute if compute > 0 else None,
    }


def _check_finite(losses: torch.Tensor, spec: RunSpec) -> None:
    bad = (~torch.isfinite(losses)).nonzero()
    if len(bad):
        step = int(bad[0])
        raise FloatingPointError(
            f"training loss became {float(losses[step])} at step {step} ({spec.label}, {spec.task})"
        )


def train(model: Transformer, spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """Train until the held-out in-distribution check says converged, or the step cap.

    Returns the loss curve, the checks, ``converged`` / ``steps_to_converge`` and timing
    (wall-clock and steps/s separately).
    """
    checker = Checker(spec)
    out = _loop(
        model,
        spec,
        steps=spec.train.steps,
        lr_at=lambda step: learning_rate(step, spec),
        seq_len=spec.train.max_len,
        batch_size=spec.train.batch_size,
        checker=checker,
        progress=progress,
    )
    out["checks"] = checker.to_dict()
    out["final_position_scale"] = model.position_scale  # evaluation uses the scale training ended at
    return out


def finetune(model: Transformer, spec: RunSpec, length: int, progress: Progress = _noop) -> dict[str, Any]:
    """``spec.finetune`` steps of LM training at ``length`` bytes (a scaling's target length).

    The same number of bytes per batch as training (fewer, longer windows), at the
    learning rate training ended at (``min_lr_ratio * lr``, as PI and YaRN fine-tune at
    a small fraction of the pre-training rate) after a warm-up of a tenth of the steps.
    """
    tr = spec.train
    batch = max(1, tr.batch_size * tr.max_len // length)
    warm = max(1, spec.finetune // 10)
    lr = tr.lr * tr.min_lr_ratio
    out = _loop(
        model,
        spec,
        steps=spec.finetune,
        lr_at=lambda step: lr * min(1.0, (step + 1) / warm),
        seq_len=length,
        batch_size=batch,
        seed_offset=31_337,
        progress=progress,
    )
    out["batch_size"] = batch
    return out


# ---------------------------------------------------------------------------
# Evaluation.
# ---------------------------------------------------------------------------

AtLength = Callable[[int], None]  # called with the sequence length before each evaluation batch


def _at_nothing(_: int) -> None:
    pass


@torch.no_grad()
def evaluate_task(
    model: Transformer, spec: RunSpec, progress: Progress = _noop, at_length: AtLength = _at_nothing
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
            positions = _task_positions(spec, part, axes, pos_gen)
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


def _window_losses(
    model: Transformer, spec: RunSpec, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int
) -> torch.Tensor:
    """Per-token cross-entropy in nats, ``(w, t)``, evaluated ``batch_size`` windows at a time
    (on the run's device; the result on the CPU)."""
    pos_gen = torch.Generator().manual_seed(20_000 + spec.eval.seed + inputs.shape[1])
    out = []
    for lo in range(0, inputs.shape[0], batch_size):
        chunk = inputs[lo : lo + batch_size].to(spec.device)
        with autocast(spec.device, spec.precision):
            logits = model(
                chunk, positions=_positions(spec, chunk.shape[0], chunk.shape[1], pos_gen)
            )  # (b, t, V)
        target = targets[lo : lo + batch_size].to(spec.device)
        out.append(F.cross_entropy(logits.float().transpose(1, 2), target, reduction="none").cpu())
    return torch.cat(out)


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
    model: Transformer, spec: RunSpec, progress: Progress = _noop, at_length: AtLength = _at_nothing
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
        losses = _window_losses(model, spec, inputs, targets, rows_per_pass)[:, -scored:]  # (w, scored)
        nats.append(float(losses.mean()))
        windows.append([float(x) for x in losses.mean(1)])
        if length == position_len and ev.lm_protocol == "nonoverlapping":
            by_position = losses.mean(0)
        progress(1)
    if by_position is None:  # 8 * L_train is not among the non-overlapping L_valid
        inputs, targets = text.nonoverlapping_windows(corpus.valid, position_len, position_len * 4)
        at_length(position_len)
        by_position = _window_losses(model, spec, inputs, targets, rows_per_pass).mean(0)
    contexts = [int(round(c * l_train)) for c in ev.lastk_contexts]
    lastk = []
    for context in contexts:
        inputs, targets = text.lastk_windows(
            corpus.valid, context, ev.lastk_k, ev.lastk_windows, max(contexts)
        )
        at_length(context)
        lastk.append(
            float(_window_losses(model, spec, inputs, targets, rows_per_pass)[:, -ev.lastk_k :].mean())
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
    model: Transformer, spec: RunSpec, name: str, progress: Progress = _noop
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


def evaluate(model: Transformer, spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """The default evaluation plus one per RoPE scaling (each on a copy of the trained model)."""
    fn = evaluate_lm if spec.task == "lm" else evaluate_task
    results = {"default": fn(model, spec, progress)}
    for name in spec.scalings:
        results[name] = evaluate_scaling(model, spec, name, progress)
    return results


# ---------------------------------------------------------------------------
# The unit of work.
# ---------------------------------------------------------------------------


def weights_bytes(model: Transformer) -> bytes:
    """The trained model's state dict, serialised (``torch.save``), for the store."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def execute(spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """Train and evaluate ``spec``; the payload of one result record (plus the trained
    weights under :data:`WEIGHTS_KEY`, which the store writes next to the record)."""
    torch.set_num_threads(max(1, spec.threads))
    start = time.perf_counter()
    code = code_of(spec)  # the classes this process runs (a resumed grid compares them)
    model = build_model(spec).to(spec.device)
    training = train(model, spec, progress)
    progress(spec.train.steps - training["steps"])  # a converged run gives back its unused steps
    weights = weights_bytes(model)
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
            "device": describe(spec.device),
        },
        "code": code,
        WEIGHTS_KEY: weights,
    }
    if spec.task == "lm":
        payload["data"] = text.stdlib_corpus().describe()
    else:
        payload["data"] = {
            "source": f"synthetic:{spec.task}",
            "generator": "torch.Generator",
            "vocab": task_registry.vocab_size(spec.task),
        }
    return payload


def tune_execute(spec: RunSpec, progress: Progress = _noop) -> dict[str, Any]:
    """A learning-rate candidate: train ``spec`` and report its held-out in-distribution
    checks only. Nothing here reads an evaluation length (the lr choice must not)."""
    torch.set_num_threads(max(1, spec.threads))
    code = code_of(spec)
    model = build_model(spec).to(spec.device)
    training = train(model, spec, progress)
    progress(spec.train.steps - training["steps"])
    keep = ("steps", "converged", "steps_to_converge", "final_loss", "checks", "steps_per_second")
    return {"lr": spec.train.lr, "train": {k: training[k] for k in keep}, "code": code}
