"""The unit of work every executor runs: :func:`execute` (``RunSpec -> payload``: train, then
evaluate every length) and :func:`tune_execute` (a learning-rate candidate: train, report the
held-out checks only).

Fairness (the benchmark protocol): for a given seed every encoding gets the same initialisation
seed, the same optimiser and schedule, and the same training stream (the data generator is
separate from the model's and from the randomized-positions one), and every evaluation length
scores the same examples / bytes for everyone. The payload is a JSON-ready dict; the store adds
provenance and a checksum.
"""

from __future__ import annotations

import io
import time
from typing import Any

import torch

from posenc.compare.device import describe
from posenc.compare.evaluation import evaluate
from posenc.compare.trainer import Progress, no_progress, train
from posenc.nn.transformer import Transformer
from posenc.records.benchmark_scalings import FAILED_KEY
from posenc.records.models import build_model
from posenc.records.provenance import code_of
from posenc.records.spec import WEIGHTS_KEY, RunSpec
from posenc.tasks import task_registry, text


def weights_bytes(model: Transformer) -> bytes:
    """The trained model's state dict, serialised (``torch.save``), for the store."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def execute(spec: RunSpec, progress: Progress = no_progress) -> dict[str, Any]:
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
    failed: dict[str, str] = {}  # a scaling whose evaluation failed: why (the others are kept)
    evaluation = evaluate(model, spec, progress, failed)
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
    if failed:
        payload[FAILED_KEY] = failed
    if spec.task == "lm":
        payload["data"] = text.stdlib_corpus().describe()
    else:
        payload["data"] = {
            "source": f"synthetic:{spec.task}",
            "generator": "torch.Generator",
            "vocab": task_registry.vocab_size(spec.task),
        }
    return payload


def tune_execute(spec: RunSpec, progress: Progress = no_progress) -> dict[str, Any]:
    """A learning-rate candidate: train ``spec`` and report its held-out in-distribution
    checks only. Nothing here reads an evaluation length (the lr choice must not)."""
    torch.set_num_threads(max(1, spec.threads))
    code = code_of(spec)
    model = build_model(spec).to(spec.device)
    training = train(model, spec, progress)
    progress(spec.train.steps - training["steps"])
    keep = ("steps", "converged", "steps_to_converge", "final_loss", "checks", "steps_per_second")
    return {"lr": spec.train.lr, "train": {k: training[k] for k in keep}, "code": code}
