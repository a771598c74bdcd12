"""Train one model on one task: the learning-rate schedule, the optimiser, the training loop
with its held-out in-distribution checks and convergence rule, and the fine-tuning that
position interpolation and YaRN take before evaluation.

Axis legend: b batch, t tokens, V vocab, L_train training length (tokens).

:mod:`posenc.compare.work` runs a whole run (train, then :mod:`posenc.compare.evaluation`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from posenc.compare.device import autocast, to_device
from posenc.core.positions import randomized as randomized_positions
from posenc.encoding.base import PositionalEncoding
from posenc.nn.transformer import Transformer
from posenc.records.spec import RunSpec
from posenc.tasks import synthetic, task_registry, text

#: ``progress(units)`` advances the caller's progress by this many work units;
#: ``progress(0, status)`` reports a held-out check (:func:`check_status`) for the display.
Progress = Callable[..., None]


def no_progress(_: int, status: dict[str, Any] | None = None) -> None:
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


def task_positions(
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
    """``valid_samples`` windows of L_train bytes from the end of the validation split (never a
    byte any evaluation scores: the LM is scored on the test split, :mod:`posenc.tasks.text`)."""
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


def window_losses(
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
            value = float(window_losses(model, self.spec, self.inputs, self.targets, 64).mean())
        else:
            hits = 0
            pos_gen = torch.Generator().manual_seed(VALID_SEED + 1)
            for lo in range(0, self.batch.inputs.shape[0], self.spec.eval.batch_size):
                part = self.batch.rows(slice(lo, lo + self.spec.eval.batch_size))
                positions = task_positions(self.spec, part, position_axes(model), pos_gen)
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
    progress: Progress = no_progress,
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
        inputs, targets, mask, positions = _step_inputs(spec, drawn, axes, pos_gen)
        tic = time.perf_counter()
        losses[step] = _step(
            model, forward, optimizer, spec, step, lr_at(step), (inputs, targets, mask, positions)
        )
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


def _step_inputs(spec: RunSpec, drawn: Any, axes: int, pos_gen: torch.Generator) -> tuple[Any, Any, Any, Any]:
    """``(inputs, targets, loss mask or None, positions)`` of a drawn training batch."""
    if isinstance(drawn, synthetic.TaskBatch):
        return drawn.inputs, drawn.targets, drawn.loss_mask, task_positions(spec, drawn, axes, pos_gen)
    inputs, targets = drawn  # language-model windows
    return inputs, targets, None, _positions(spec, inputs.shape[0], inputs.shape[1], pos_gen)


def _step(
    model: Transformer, forward: Callable[..., torch.Tensor], optimizer: torch.optim.Optimizer, spec: RunSpec,
    step: int, lr: float, batch: tuple[Any, Any, Any, Any],
) -> torch.Tensor:  # fmt: skip
    """One optimiser step at learning rate ``lr``; returns its loss, still on the device."""
    inputs, targets, mask, positions = batch
    for group in optimizer.param_groups:
        group["lr"] = lr
    if spec.train.position_warmup_steps:
        model.position_scale = position_scale(step, spec)
    with autocast(spec.device, spec.precision):
        logits = forward(inputs, positions=positions)  # (b, t, V)
    loss_all = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")  # (b*t,)
    # masked mean by weights, not by boolean indexing (which waits for the device on GPUs)
    loss = loss_all.mean() if mask is None else (loss_all * mask.flatten()).sum() / mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), spec.train.clip_norm, foreach=True)
    optimizer.step()
    return loss.detach()


def _check_finite(losses: torch.Tensor, spec: RunSpec) -> None:
    bad = (~torch.isfinite(losses)).nonzero()
    if len(bad):
        step = int(bad[0])
        raise FloatingPointError(
            f"training loss became {float(losses[step])} at step {step} ({spec.label}, {spec.task})"
        )


def train(model: Transformer, spec: RunSpec, progress: Progress = no_progress) -> dict[str, Any]:
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


def finetune(
    model: Transformer, spec: RunSpec, length: int, progress: Progress = no_progress
) -> dict[str, Any]:
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
