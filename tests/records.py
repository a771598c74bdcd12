"""Run records made by hand for tests (no training): a genuine one, hostile rewrites of it, and a
guard against hanging reads."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
from pathlib import Path

import torch

from posenc.records.models import build_model
from posenc.records.spec import EvalSpec, ModelSpec, RunSpec, TrainSpec
from posenc.records.store import checksum


def make_spec(encoding: str = "rope", task: str = "copy", seed: int = 0) -> RunSpec:
    return RunSpec(
        task=task,
        encoding=encoding,
        seed=seed,
        model=ModelSpec(d_model=16, num_heads=2, num_layers=1, ffn_dim=32),
        train=TrainSpec(steps=2, max_len=4),
        eval=EvalSpec(lengths=(4, 8), samples=2, free_running=False),
    )


def make_payload(spec: RunSpec, *, weights: bool = True) -> dict:
    """A result that every reader accepts (the numbers mean nothing), with the untrained weights."""
    lengths, samples = list(spec.eval.lengths), spec.eval.samples
    per = [[1.0] * samples for _ in lengths]
    ev = {"lengths": lengths, "exact_match": [1.0] * len(lengths), "token_accuracy": [1.0] * len(lengths),
          "per_example": {"exact_match": per, "token_accuracy": per}}  # fmt: skip
    payload = {
        "train": {"converged": True, "steps": 2, "steps_to_converge": 2, "final_loss": 0.5, "loss": [1.0, 0.5],
                  "checks": {"step": [2], "valid_exact_match": [1.0], "train_loss": [0.5]}},
        "timing": {"steps_per_second": 10.0, "train_wall_seconds": 0.2},
        "eval": {variant: ev for variant in ("default", *spec.scalings)},
    }  # fmt: skip
    if weights:
        buffer = io.BytesIO()
        torch.save(build_model(spec).state_dict(), buffer)
        payload["weights_bytes"] = buffer.getvalue()
    return payload


def rewrite(path: Path, change, target: Path | None = None) -> Path:
    """``change`` the record at ``path`` and seal it again (run id where the spec still parses,
    checksum): what anyone can do to a record. Written to ``target`` (with a copy of the weights)."""
    data = json.loads(path.read_text())
    weights = path.with_suffix(".pt")
    target = target or path
    if target != path and weights.exists():  # the copy keeps its own weights, unless change names others
        shutil.copy(weights, target.with_suffix(".pt"))
        data["weights"]["file"] = target.with_suffix(".pt").name
    change(data)
    with contextlib.suppress(Exception):
        data["run_id"] = RunSpec.from_dict(data["spec"]).run_id
    data["checksum"] = checksum(data)
    target.write_text(json.dumps(data))
    return target


@contextlib.contextmanager
def no_hang(seconds: float = 20.0):
    """Fail instead of hanging (an endless read of /dev/zero, a FIFO that never opens)."""

    def alarm(signum, frame):
        raise AssertionError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
