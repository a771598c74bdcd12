"""Trained models of finished runs: rebuilt from a record and the weights kept next to it.

``posenc compare`` writes every run's trained weights next to its record
(``OUT/runs/TASK/NAME__seedS__ID.pt``, checksummed in the record). Here they come
back as a model, and as what the notes ask of a trained model:

- :func:`load_run`: ``(model, spec)`` from a record (or its ``.pt``), every failure a
  one-line :class:`~posenc.core.errors.PosencError` naming the file (missing, corrupt, not
  this run's weights);
- :func:`example`: the input the run was trained on, at its training length or a
  longer one (a task example ``[BOS] x [SEP] y``; the LM: a window of validation text);
- :func:`attention_maps`: the trained model's attention on that input, every layer and head;
- :func:`probe`: the word-order probe ("The quick brown fox jumps" against "brown quick
  The fox jumps") through the trained model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posenc.analysis.probes import PROBE_ORIGINAL, PROBE_PERMUTED, model_attention_maps, word_order_change
from posenc.core import trust
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.core.plugins import PluginGroup, is_spec
from posenc.nn.transformer import Transformer
from posenc.records.models import build_model
from posenc.records.provenance import encodings_of
from posenc.records.spec import RunSpec
from posenc.records.store import load_record_and_weights
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.tasks import synthetic, task_registry, text

RECORD_HINT = "a run record written by posenc compare (OUT/runs/TASK/NAME__seedS__ID.json, or its .pt)"


def record_path(run: str | os.PathLike) -> Path:
    """The record of ``run``: the path itself (``.json``) or the record next to a ``.pt``."""
    path = Path(run)
    if path.suffix == ".pt":
        path = path.with_suffix(".json")
    if path.is_dir():
        raise PosencError(f"--run {run}: a directory; expected {RECORD_HINT}")
    if not path.exists():
        raise PosencError(f"--run {run}: no such file; expected {RECORD_HINT}")
    if path.suffix != ".json":
        raise PosencError(f"--run {run}: expected {RECORD_HINT}")
    return path


def load_run(run: str | os.PathLike, *, trust_remote_code: bool = False) -> tuple[Transformer, RunSpec]:
    """The trained model of a run (eval mode) and its spec.

    Checks, in order: the record parses and is valid, it names a weights file, the file
    is there and matches the record's checksum, it holds a state dict
    (:func:`~posenc.records.store.load_weights`), and the state dict fits the model the
    record describes. Each failure is one :class:`PosencError` naming the file.

    A record is data: the model is built from posenc's own encodings and tasks, names registered
    in this process and installed entry points only; an import spec in the record (its encoding,
    task or ``imports``), or an entry point whose module would come from inside the results
    directory, is refused unless ``trust_remote_code=True`` (:mod:`posenc.core.trust`).
    """
    model, spec, _ = _load(run, trust_remote_code)
    return model, spec


def _load(run: str | os.PathLike, trust_remote_code: bool) -> tuple[Transformer, RunSpec, dict[str, Any]]:
    """:func:`load_run`, with the record it read."""
    path = record_path(run)
    data, state = load_record_and_weights(path)
    spec = RunSpec.from_dict(data["spec"])
    source = f"run record {path}"
    with trust.reading(source, trust_remote_code=trust_remote_code):
        if not trust_remote_code:
            _refuse_planted(spec, source, _results_dir(path))
        model = build_model(spec)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0]
        raise PosencError(
            f"cannot load the weights of {path}: {data['weights']['file']} does not fit the model "
            f"the record describes ({detail})"
        ) from None
    return model.eval(), spec, data


def _results_dir(record: Path) -> Path:
    """The results directory a record belongs to (``OUT`` of ``OUT/runs/TASK/x.json``), else its folder."""
    return (
        record.parents[2] if len(record.parents) > 2 and record.parents[1].name == "runs" else record.parent
    )


def _refuse_planted(spec: RunSpec, source: str, root: Path) -> None:
    """Refuse an installed entry point the record names whose module Python would import from
    inside ``root``: a module planted in the results directory (on ``sys.path`` as the working
    directory of an interactive session) never runs without consent."""
    names: list[tuple[str, PluginGroup[Any], str]] = [
        ("encoding", ENCODING_GROUP, n) for n in encodings_of(spec)
    ]
    names.append(("task", task_registry.GROUP, spec.task))
    names += [(kind, ENCODING_GROUP if kind == "encoding" else task_registry.GROUP, name)
              for kind, name, _ in spec.imports]  # fmt: skip
    for noun, group, name in names:
        if is_spec(name) or name in group.builtins or name in group.registered:
            continue  # a spec: refused by the trust gate; posenc's own or the user's: trusted
        point = group.discover().get(name)
        planted = None if point is None else trust.module_inside(point.module, root)
        if planted is not None:
            raise trust.refusal(
                source, f"{noun} {name!r}, an entry point whose module would be imported from {planted}"
            )


@dataclass(frozen=True)
class Example:
    tokens: torch.Tensor  # (1, n) what the model reads
    labels: list[str]  # one short label per token
    description: str


def _token_label(token: int) -> str:
    if token < synthetic.FIRST_SYMBOL:
        return synthetic.SPECIAL_TOKENS[token]
    return str(token - synthetic.FIRST_SYMBOL)


def example(spec: RunSpec, length: int | None = None) -> Example:
    """One input of the run's task, with ``length`` content tokens (tasks: n, default the
    longest training n; LM: bytes, default L_train): the first evaluation example of that
    length (tasks) or the first window of the validation text (LM)."""
    n = spec.train.max_len if length is None else check_int("length", length, minimum=1, maximum=4096)
    trained = spec.train.max_len
    where = "the training length" if n <= trained else f"{n / trained:.3g}x the training length"
    if spec.task == "lm":
        data = text.stdlib_corpus().valid[:n]
        labels = [chr(int(b)) if 32 <= int(b) < 127 else f"\\x{int(b):02x}" for b in data]
        return Example(data.long().unsqueeze(0), labels, f"{n} bytes of validation text ({where})")
    batch = task_registry.eval_batch(spec.task, n, 1, seed=spec.eval.seed)
    row = batch.inputs[0]
    tokens = row[row != synthetic.PAD] if bool((row == synthetic.PAD).any()) else row
    return Example(
        tokens.unsqueeze(0),
        [_token_label(int(t)) for t in tokens],
        f"a {spec.task} example, n = {n} ({where})",
    )


def attention_maps(
    run: str | os.PathLike, length: int | None = None, *, trust_remote_code: bool = False
) -> tuple[np.ndarray, RunSpec, Example]:
    """``(maps (L, h, i, j), spec, example)``: the trained model's attention on :func:`example`
    (``trust_remote_code``: as :func:`load_run`)."""
    model, spec = load_run(run, trust_remote_code=trust_remote_code)
    ex = example(spec, length)
    return model_attention_maps(model, ex.tokens), spec, ex


@dataclass(frozen=True)
class RunProbe:
    label: str
    task: str
    seed: int
    token_change: float  # ||f(Px) - P f(x)|| / ||f(x)||, word-aligned
    pooled_change: float  # ||mean f(Px) - mean f(x)|| / ||mean f(x)||
    words: str  # how the words became tokens

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def probe(
    run: str | os.PathLike,
    original=PROBE_ORIGINAL,
    permuted=PROBE_PERMUTED,
    *,
    trust_remote_code: bool = False,
) -> RunProbe:
    """The word-order probe through the trained model of ``run`` (``trust_remote_code``: as
    :func:`load_run`).

    Tasks: each distinct word is one symbol of the task's alphabet (in order of first
    appearance), after the BOS token every training sequence starts with. LM: each word
    is its UTF-8 bytes and a space.
    """
    model, spec, data = _load(run, trust_remote_code)
    if spec.task == "lm":
        token, pooled = word_order_change(model, original, permuted, lambda w: list(f"{w} ".encode()))
        how = "each word as its bytes and a space"
    else:
        ids = {w: synthetic.FIRST_SYMBOL + k for k, w in enumerate(dict.fromkeys(original))}
        token, pooled = word_order_change(
            model, original, permuted, lambda w: [ids[w]], prefix=[synthetic.BOS]
        )
        how = "each word as one symbol of the task, after BOS"
    return RunProbe(data["label"], spec.task, spec.seed, token, pooled, how)
