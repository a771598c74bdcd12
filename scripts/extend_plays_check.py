"""Per-play mean loss of SmolLM2-135M-Instruct on the first L tokens of n plays (posenc.extend.books),
under plain RoPE and YaRN x2 (posenc's RoPE through posenc.hf.apply, fp32, one thread), and the
paired comparison over plays (posenc.extend.evidence.paired_documents): how much the plays spread,
which sets how many documents a verdict needs. A look, not a published run.

Usage::

    nice -n 10 .venv/bin/python scripts/extend_plays_check.py 2048 6
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch

from posenc.extend import books, cell_work, checkpoint, evidence, plan
from posenc.extend import scalings as sc
from posenc.hf.model import apply as hf_apply
from posenc.hf.model import text_config


def main(length: int, count: int) -> None:
    torch.set_num_threads(1)
    found = checkpoint.resolve(None, trust_remote_code=False, log=lambda line: None)
    model, tokenizer = checkpoint.load(found, device="cpu", precision="fp32")
    handle = hf_apply(model)
    shape = plan.Shape.of(text_config(model), sum(p.numel() for p in model.parameters()))
    runner = cell_work.Runner(model, shape, 1024, lambda *args: None)

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    documents = books.book_documents(tokenize, count=count, length=length, prefix=[])
    losses: dict[str, list[float]] = {}
    for entry in sc.parse_all(("none", "yarn"), (2.0,)):
        handle.set_scaling(entry.at(length, int(found.config["max_position_embeddings"])))
        start = time.process_time()
        losses[entry.key] = [
            float(np.mean(cell_work.text_nll(runner, model, d))) for d in documents.documents
        ]
        print(
            entry.key,
            [round(x, 4) for x in losses[entry.key]],
            f"{time.process_time() - start:.1f} CPU s",
            flush=True,
        )
    yarn, plain = losses["yarn:2"], losses["none"]
    paired = evidence.paired_documents(yarn, plain)
    spread = float(np.std(np.subtract(yarn, plain), ddof=1))
    print(json.dumps({"length": length, "plays": [p.name for p in documents.parts], **losses,
                      "yarn_over_none": [paired.ratio, paired.low, paired.high, paired.p_value],
                      "paired_sd_nats": spread}))  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
