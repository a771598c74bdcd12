"""Measure what `posenc extend`'s work costs on this CPU: SmolLM2-135M-Instruct's chunked prefill at
several lengths (every position's logits, as a perplexity pass computes them, and the last position's
only, as a prompt does), one greedy decoding step after a prompt of each length, and a prompt that
forks off a cached prefix (the KV cache cut back and extended) against the same prompt from scratch.

The model runs as `posenc extend` runs it: posenc's RoPE through `posenc.hf.apply`, fp32, the KV cache
filled in chunks of 1,024 tokens, one thread (each worker of `posenc extend` has one). The times are
process CPU seconds and wall seconds of one run each: on a machine shared with other work they are
"under load", not a timing result.

Usage (prints JSON; several lengths in one call, each measured once)::

    nice -n 10 .venv/bin/python scripts/extend_costs.py --lengths 2048,4096,8192 --decode 16
    nice -n 10 .venv/bin/python scripts/extend_costs.py --lengths 16384 --decode 16 --prompt-only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from posenc.extend import books, cell_work, checkpoint, plan
from posenc.hf.model import apply as hf_apply
from posenc.hf.model import text_config


def _timed(work, *args) -> tuple[float, float]:
    """``(cpu seconds, wall seconds)`` of ``work(*args)``."""
    cpu, wall = time.process_time(), time.perf_counter()
    work(*args)
    return time.process_time() - cpu, time.perf_counter() - wall


def measure(lengths: list[int], decode: int, fork: int, chunk: int, every: bool = True) -> dict:
    torch.set_num_threads(1)
    found = checkpoint.resolve(None, trust_remote_code=False, log=lambda line: None)
    model, tokenizer = checkpoint.load(found, device="cpu", precision="fp32")
    hf_apply(model)
    shape = plan.Shape.of(text_config(model), sum(p.numel() for p in model.parameters()))
    runner = cell_work.Runner(model, shape, chunk, lambda *args: None)
    text = "\n".join(work.text for work in books.works()[:4])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    out: dict = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "threads": 1,
                 "chunk": chunk, "load_average": os.getloadavg(), "passes": []}  # fmt: skip
    for length in lengths:
        row: dict = {"length": length}
        if every:  # a perplexity pass: every position's logits
            row["all_logits"] = _timed(
                runner.forward, cell_work.new_cache(model), ids[:length], lambda s, x: None
            )
        cache = cell_work.new_cache(model)
        row["last_logits"] = _timed(runner.forward, cache, ids[:length])
        steps = []
        for token in ids[length : length + decode]:
            steps.append(_timed(runner.forward, cache, [token]))
        row["decode_step_median"] = sorted(steps)[len(steps) // 2] if steps else None
        if fork:
            start = length - fork  # the prompt's own part past a shared prefix of `start` tokens
            cell_work.crop(cache, start)
            row["fork"] = {
                "shared": start,
                "own": fork,
                "seconds": _timed(runner.forward, cache, ids[start:length]),
            }
        row["gflop_all_logits"] = round(shape.flops(0, length) / 1e9, 1)
        row["gflop_last_logits"] = round(shape.flops(0, length, logits=False) / 1e9, 1)
        out["passes"].append(row)
        print(json.dumps(row), flush=True)
    out["load_average_after"] = os.getloadavg()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="2048,4096,8192")
    parser.add_argument("--decode", type=int, default=16, help="greedy steps timed after each prompt")
    parser.add_argument(
        "--fork", type=int, default=1024, help="tokens of a prompt forked off the cache (0: none)"
    )
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument(
        "--prompt-only", action="store_true", help="skip the pass with every position's logits"
    )
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    result = measure(lengths, args.decode, args.fork, args.chunk, every=not args.prompt_only)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
