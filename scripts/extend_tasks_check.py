"""What SmolLM2-135M-Instruct answers to the prompts of posenc.extend.haystacks at one length: greedy,
its own RoPE (posenc's, through posenc.hf.apply, no scaling), the prompts fed in prefill order
through one KV cache (each after what it shares with the one before), scored as each task scores.

A look at the tasks, not a published run: it prints each answer and each task's mean score.

Usage::

    nice -n 10 .venv/bin/python scripts/extend_tasks_check.py 2048 4 passkey,multikey,multivalue,variables,frequent
"""

from __future__ import annotations

import sys
import time

import torch

from posenc.extend import cell_work, checkpoint, plan
from posenc.extend import haystacks as hs
from posenc.hf.model import apply as hf_apply
from posenc.hf.model import text_config


def main(length: int, count: int, names: list[str]) -> None:
    torch.set_num_threads(1)
    found = checkpoint.resolve(None, trust_remote_code=False, log=lambda line: None)
    model, tokenizer = checkpoint.load(found, device="cpu", precision="fp32")
    hf_apply(model)
    shape = plan.Shape.of(text_config(model), sum(p.numel() for p in model.parameters()))
    runner = cell_work.Runner(model, shape, 1024, lambda *args: None)

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    for name in names:
        prompts = hs.prompts(name, length, count, seed=0, tokenize=tokenize)
        cache, at, scores, start = cell_work.new_cache(model), 0, [], time.process_time()
        for prompt, shared in hs.prefill_order(prompts):
            keep = min(shared, at)
            cell_work.crop(cache, keep)
            logits = runner.forward(cache, prompt.ids[keep:])
            answer: list[int] = []
            for _ in range(prompt.budget):
                token = int(logits.argmax())
                answer.append(token)
                if token == tokenizer.eos_token_id:
                    break
                logits = runner.forward(cache, [token])
            at = prompt.length
            cell_work.crop(cache, at)
            text = tokenizer.decode(answer, skip_special_tokens=True)
            scores.append(hs.score(prompt, text))
            print(name, length, round(scores[-1], 2), prompt.expected, repr(text[:80]), flush=True)
        print(f"== {name} {length}: mean {sum(scores) / len(scores):.3f} of {len(scores)} prompts, "
              f"{time.process_time() - start:.1f} CPU s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(","))
