"""The unit of work every executor runs: :func:`execute` (``RunSpec -> payload``: train, then
evaluate every length) and :func:`tune_execute` (a learning-rate candidate: train, report the
held-out checks only).

Fairness (the benchmark protocol): for a given seed every encoding gets the same initialisation
seed, the same optimiser and schedule, and the same training stream (the data generator is
separate from the model's and from the randomized-positions one), and every evaluation length
scores the same examples / bytes for everyone. The payload is a JSON-ready dict; the store adds
provenance and a checksum.

The same initialisation *seed* is not the same initial *weights*: the model's weights are drawn
from one stream in construction order, so an encoding that draws parameters of its own (T5's
bias table) shifts every draw after it, and its token embeddings and projections start unlike
the others' (measured: 19 of T5's 39 shared tensors differ from RoPE's at seed 0; ALiBi's, NoPE's
and sinusoidal's are RoPE's). With :data:`SHARED_INIT` every weight the encodings share is drawn
from a generator of its own, keyed by the seed and the weight's name (:func:`share_initial_weights`),
so within a seed every encoding starts from the same shared weights: common random numbers
(Bouthillier et al. 2021), which a comparison paired by seed reads.
"""

from __future__ import annotations

import io
import time
import zlib
from typing import Any

import torch

from posenc.compare.device import describe
from posenc.compare.evaluation import evaluate
from posenc.compare.trainer import Progress, no_progress, train
from posenc.encoding.base import PositionalEncoding
from posenc.nn.transformer import Transformer
from posenc.records.benchmark_scalings import FAILED_KEY
from posenc.records.models import build_model
from posenc.records.provenance import code_of
from posenc.records.spec import WEIGHTS_KEY, RunSpec
from posenc.tasks import task_registry, text

#: Draw the weights every encoding shares from generators keyed by the seed and the weight's name
#: (:func:`share_initial_weights`): on from benchmark version 3 (records/spec.py's BENCHMARK_VERSION),
#: whose runs all start so; a switch for studies that turn it off.
SHARED_INIT = True
#: The standard deviation the model's own initialisation draws its linear and embedding weights with.
INIT_STD = 0.02


def share_initial_weights(model: Transformer, seed: int) -> int:
    """Redraw every linear and embedding weight outside the positional encodings, each from
    N(0, :data:`INIT_STD`) with a generator seeded by ``seed`` and the weight's name (the model's
    own initialisation draws them from the same distribution, from one stream in construction
    order). Two models of one seed then hold equal values in every weight they share by name and
    shape, whatever parameters their encodings drew. Returns how many tensors were redrawn."""
    # an encoding's own weights keep their draws; a tied weight (the output layer's is the token
    # embeddings') is drawn once, under the first name it has
    seen = {id(p) for m in model.modules() if isinstance(m, PositionalEncoding) for p in m.parameters()}
    drawn = 0
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) or id(module.weight) in seen:
                continue
            seen.add(id(module.weight))
            key = f"{name}.weight"
            generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
            module.weight.normal_(0.0, INIT_STD, generator=generator)
            drawn += 1
    return drawn


def initial_model(spec: RunSpec) -> Transformer:
    """The model a run trains, on its device: :func:`~posenc.records.models.build_model`, with the
    shared weights redrawn by name where :data:`SHARED_INIT` is on."""
    model = build_model(spec)
    if SHARED_INIT:
        share_initial_weights(model, spec.seed)
    return model.to(spec.device)


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
    model = initial_model(spec)
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
    model = initial_model(spec)
    training = train(model, spec, progress)
    progress(spec.train.steps - training["steps"])
    keep = ("steps", "converged", "steps_to_converge", "final_loss", "checks", "steps_per_second")
    return {"lr": spec.train.lr, "train": {k: training[k] for k in keep}, "code": code}
