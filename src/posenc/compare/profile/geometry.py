"""A profile's geometry: the lengths its runs train and evaluate at, the memory one run needs, and
whether that fits the machine (:func:`check_fits`, before the first run).

The grid (:mod:`posenc.compare.grid`) sizes each run's encoding from these lengths, and the
evaluation (:mod:`posenc.compare.evaluation`) reads them too.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from posenc.compare.profile.definition import Profile
from posenc.core.datafiles import MISSING, Where
from posenc.records.spec import EvalSpec, ModelSpec, TrainSpec
from posenc.tasks import text
from posenc.tasks.task_registry import lengths_at_scales, max_sequence_length, vocab_size

#: Bytes each parameter takes while training: its float32 value, its gradient, AdamW's two moments.
TRAINING_BYTES_PER_PARAMETER = 16
FLOAT_BYTES = 4  # activations are float32 (the residual stream stays float32 under bf16 autocast)


def train_length(task: str, train: TrainSpec) -> int:
    """Tokens in the longest training sequence the model reads."""
    return train.max_len if task == "lm" else max_sequence_length(task, train.max_len)


def task_eval(task: str, train: TrainSpec, ev: EvalSpec) -> EvalSpec:
    """The evaluation settings of one task's runs: ``ev`` with ``lengths`` worked out from
    ``ev.scales`` (:func:`posenc.tasks.task_registry.lengths_at_scales`) when the profile gives scales (not for the LM,
    whose lengths are ``lm_lengths`` in bytes)."""
    if task == "lm" or not ev.scales:
        return ev
    return dataclasses.replace(ev, lengths=lengths_at_scales(task, train.max_len, ev.scales))


def eval_length(task: str, train: TrainSpec, ev: EvalSpec) -> int:
    """Tokens in the longest sequence any evaluation feeds the model."""
    if task == "lm":
        longest_context = max(ev.lastk_contexts) * train.max_len
        return int(max(max(ev.lm_lengths), longest_context, ev.position_multiple * train.max_len))
    return max(max_sequence_length(task, n) for n in task_eval(task, train, ev).lengths)


def parameter_count(model: ModelSpec, vocab: int) -> int:
    """At least this many parameters has the benchmark's Transformer (:class:`posenc.nn.transformer.Transformer`):
    the token embeddings (tied to the output head), every layer's attention projections and MLP;
    norms, biases and the encoding's own parameters are left out, so this is a lower bound."""
    d = model.d_model
    kv_width = d * (model.num_kv_heads or model.num_heads) // model.num_heads
    per_layer = 2 * d * d + 2 * d * kv_width + 2 * d * model.ffn_dim  # q, o; k, v; the MLP's two
    return vocab * d + model.num_layers * per_layer


def memory_needed(profile: Profile, task: str) -> tuple[int, int]:
    """``(parameters, bytes)``: at least this much memory one run of ``task`` needs, the larger of
    training (:data:`TRAINING_BYTES_PER_PARAMETER` per parameter, and each layer's input for one
    batch) and evaluating one sequence of the longest evaluation length."""
    model = profile.model
    train = profile.lm_train if task == "lm" else profile.task_train
    params = parameter_count(model, vocab_size(task))
    layer_inputs = model.num_layers * model.d_model * FLOAT_BYTES
    training = (
        params * TRAINING_BYTES_PER_PARAMETER + train.batch_size * train_length(task, train) * layer_inputs
    )
    evaluating = params * FLOAT_BYTES + eval_length(task, train, profile.eval) * layer_inputs
    return params, max(training, evaluating)


def device_memory(device: str) -> int | None:
    """Bytes of memory ``device`` (resolved) has: a CUDA device's own, else the machine's RAM
    (None where the platform does not say)."""
    where = torch.device(device)
    if where.type == "cuda":
        return int(torch.cuda.get_device_properties(where.index or 0).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # not POSIX
        return None


def _gib(size: int) -> str:
    return f"{size / 2**30:.3g} GiB"


def check_fits(profile: Profile, device: str, *, memory: int | None = None) -> None:
    """Before any run: refuse what cannot fit this machine, with one error naming the key.

    * each task's model against ``memory`` (default: :func:`device_memory` of ``device``), by a
      lower bound (:func:`memory_needed`), so a refused run could never have run;
    * with the LM among the tasks, the bytes its training, held-out checks and evaluation read
      against the corpus (Python's standard library).
    """
    where = Where(f"profile {profile.name!r}")
    memory = device_memory(device) if memory is None else memory
    if memory is not None:
        for task in profile.tasks:
            params, needed = memory_needed(profile, task)
            if needed > memory:
                raise where.error(
                    "model", MISSING,
                    f"a run of {task} needs at least {_gib(needed)} ({params:.3g} parameters: float32 "
                    f"weights, gradients and AdamW's moments, and one batch's activations) but {device} has "
                    f"{_gib(memory)}; make model.d_model, num_layers, ffn_dim or the batch size smaller",
                )  # fmt: skip
    if "lm" in profile.tasks:
        _check_corpus(profile, where)


def _check_corpus(profile: Profile, where: Where) -> None:
    """The LM's bytes (at least what :mod:`posenc.compare.trainer` and ``evaluation`` read) fit the corpus."""
    corpus = text.stdlib_corpus()
    train_bytes, valid_bytes = int(corpus.train.numel()), int(corpus.valid.numel())
    tr, ev = profile.lm_train, profile.eval
    contexts = [round(c * tr.max_len) for c in ev.lastk_contexts]
    needs = [
        ("lm_train.max_len", tr.max_len, tr.max_len + 1, train_bytes, "a training window"),
        ("lm_train.valid_samples", tr.valid_samples, tr.max_len * tr.valid_samples + 1, valid_bytes,
         "the held-out windows"),
        ("eval.lm_bytes", ev.lm_bytes, text.scored_bytes(list(ev.lm_lengths), ev.lm_bytes) + 1, valid_bytes,
         "the scored bytes (lm_bytes rounded up to a multiple of every length in lm_lengths)"),
        ("eval.lastk_contexts", list(ev.lastk_contexts), max(contexts) + ev.lastk_k * (ev.lastk_windows - 1) + 1,
         valid_bytes, "the last-k windows"),
    ]  # fmt: skip
    position_len = ev.position_multiple * tr.max_len
    if ev.lm_protocol != "nonoverlapping" or position_len not in ev.lm_lengths:  # windows of its own
        needs.append(("eval.position_multiple", ev.position_multiple, 4 * position_len + 1, valid_bytes,
                      "the loss-by-position windows"))  # fmt: skip
    for key, value, needed, have, what in needs:
        if needed > have:
            split = "training" if have == train_bytes else "validation"
            raise where.error(
                key, value, f"{what} need {needed} bytes of the LM corpus's {split} split, which has {have}"
            )
