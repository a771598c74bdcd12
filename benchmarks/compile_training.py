"""Should ``posenc compare`` compile its training step? Runs the benchmark's own training loop
(``posenc.compare.trainer.train``, quick profile's copy and LM settings, the same seeds) eager and
with ``torch.compile`` (dynamic shapes: task batches vary in length), and prints the wall time
for the steps (compiles included), the steady per-step time (second half of the run), and the
first step's time (the compile).

Usage:
    python benchmarks/compile_training.py [ENCODING ...] [--steps N] [--threads T]

Run it on an idle machine; the answer is in ``posenc.compare.trainer.COMPILE_TRAINING``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from posenc.compare import trainer
from posenc.compare.profile import PROFILES
from posenc.records.models import build_model
from posenc.records.spec import RunSpec


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("encodings", nargs="*", default=["rope", "alibi"])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    profile = PROFILES["quick"]
    for name in args.encodings:
        for task, train in (("copy", profile.task_train), ("lm", profile.lm_train)):
            spec = RunSpec(
                task=task, encoding=name, seed=0, model=profile.model,
                train=dataclasses.replace(train, steps=args.steps), eval=profile.eval,
            )  # fmt: skip
            for compiled in (False, True):
                trainer.COMPILE_TRAINING = compiled
                torch._dynamo.reset()
                model = build_model(spec)
                stamps: list[float] = []
                start = time.perf_counter()
                result = trainer.train(
                    model, spec, lambda _, stamps=stamps: stamps.append(time.perf_counter())
                )
                total = time.perf_counter() - start
                tail = stamps[len(stamps) // 2 :]
                steady = (tail[-1] - tail[0]) / max(1, len(tail) - 1)
                print(
                    f"{name:8} {task:4} {'compiled' if compiled else 'eager':8} {total:6.1f} s for {args.steps} "
                    f"steps, steady {1e3 * steady:6.2f} ms/step, first step {stamps[0] - start:5.1f} s, "
                    f"final loss {result['final_loss']:.4f}",
                    flush=True,
                )
    trainer.COMPILE_TRAINING = False


if __name__ == "__main__":
    main()
