"""The design study of docs/extend-design-draft.md: what `posenc extend` grids cost on two CPU cores and
what they can decide, from the passes measured by scripts/extend_costs.py.

1. The cost model (posenc.extend.budget.fit) fitted to docs/extend/design/costs_under_load.json.
2. What sharing the beginnings of prompts through the KV cache saves, per task and length, on
   prompts drawn with SmolLM2's tokenizer (posenc.extend.haystacks.prefill_order).
3. Candidate grids: seconds of one thread, and minutes on two workers of one thread each.
4. What 20, 40 and 100 prompts per cell can decide: the Clopper-Pearson bounds behind a length
   shown to hold (or to fail) within a margin of a perfect reference (posenc.extend.evidence).

Usage: nice -n 10 .venv/bin/python scripts/extend_design.py  (prints Markdown; about 2 minutes)
"""

from __future__ import annotations

import json
from pathlib import Path

from posenc.extend import budget, checkpoint, evidence
from posenc.extend import haystacks as hs
from posenc.extend.plan import Shape

ROOT = Path(__file__).resolve().parents[1]
SMOL = Shape(layers=30, heads=9, kv_heads=3, head_dim=64, hidden=576, intermediate=1536, vocab=49152,
             parameters=134_515_008)  # fmt: skip
CONTEXT = 8192
WORKERS = 2
STARTUP = 60.0  # seconds: tokenizing, starting the workers, loading the weights
PROMPTS = 20


def cost_model() -> budget.CostModel:
    data = json.loads((ROOT / "docs/extend/design/costs_under_load.json").read_text())
    passes = []
    for run in data["runs"]:
        for row in run["passes"]:
            length = row["length"]
            if "all_logits" in row:
                passes.append((0, length, True, row["all_logits"][0]))
            passes.append((0, length, False, row["last_logits"][0]))
            passes.append((length, length + 1, False, row["decode_step_median"][0]))
            fork = row["fork"]
            passes.append((fork["shared"], fork["shared"] + fork["own"], False, fork["seconds"][0]))
    return budget.fit(SMOL, passes, chunk=1024, where="a shared 2-core x86-64 machine, under load")


def prompt_seconds(model: budget.CostModel, lengths: list[int]) -> dict[tuple[str, int], tuple[float, float]]:
    """(task, length) -> (seconds per prompt with sharing, without), over PROMPTS prompts."""
    tokenizer = checkpoint.load_tokenizer(checkpoint.resolve(None, log=lambda line: None))

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    out = {}
    for name in hs.TASKS:
        for length in lengths:
            prompts = hs.prompts(name, length, PROMPTS, seed=0, tokenize=tokenize)
            shared, alone = model.prompts(SMOL, hs.prefill_order(prompts))
            out[(name, length)] = (shared / PROMPTS, alone / PROMPTS)
    return out


def tables(length: int, scalings: list[str]) -> int:
    """How many different rotary tables ``scalings`` (factor 2) read at ``length`` (the dynamic ones
    are plain RoPE up to the context and their static twin at twice it)."""
    static = {s for s in scalings if not s.startswith("dynamic")}
    dynamic = [s for s in scalings if s.startswith("dynamic")]
    if length <= CONTEXT:
        return len(static | ({"none"} if dynamic else set()))
    twins = {"dynamic:1": "ntk", "dynamic-yarn": "yarn"}
    if length == 2 * CONTEXT:
        return len(static | {twins[s] for s in dynamic})
    return len(static) + len(dynamic)


def grid_seconds(model, per_prompt, *, scalings, text_lengths, documents, retrieval) -> dict[str, float]:
    """One thread's seconds of a grid: text passes (one per tables and document, at the longest
    length those tables read) and retrieval prompts (``retrieval``: {(task, length): prompts})."""
    longest = max(text_lengths)
    text = (
        tables(longest, scalings) * documents * model.text_pass(SMOL, longest)
    )  # plain RoPE is in every grid
    prompts = sum(tables(length, scalings) * count * per_prompt[(task, length)][0]
                  for (task, length), count in retrieval.items())  # fmt: skip
    return {"text": text, "retrieval": prompts, "total": text + prompts,
            "minutes": ((text + prompts) / WORKERS + STARTUP) / 60}  # fmt: skip


def decisions() -> list[str]:
    """What n prompts per cell decide against a reference that answered all of its n prompts."""
    lines = ["| prompts per cell | all right: shown to hold within | shown to fail when right at most |",
             "|---|---|---|"]  # fmt: skip
    for n in (20, 40, 100):
        hold = 1 - evidence.lower_bound(
            n, n, 0.0125
        )  # low side: alpha/4 for the rate, the reference's bound is 1
        each = 0.05 / (2 * (4 + 1))  # high side, 4 lengths: alpha / (2 (k + 1))
        floor = evidence.lower_bound(n, n, each)
        fail = max(k for k in range(n + 1) if evidence.upper_bound(k, n, each) - floor < -0.1)
        lines.append(f"| {n} | {hold:.2f} | {fail}/{n} ({fail / n:.0%}), margin 0.10 |")
    return lines


def main() -> None:
    model = cost_model()
    print(f"cost model: dense {model.dense:.1f} GFLOP/s, attention {model.attention:.1f} GFLOP/s, "
          f"{model.call:.2f} s per call of {model.chunk} tokens; decoding step {model.step:.3f} s + "
          f"{model.step_per_token * 1e6:.1f} us per cached token ({model.where})\n")  # fmt: skip
    lengths = [2048, 4096, 8192, 12288, 16384]
    print("| length | text pass (s) | prompt alone (s) |")
    print("|---|---|---|")
    for n in lengths:
        print(f"| {n} | {model.text_pass(SMOL, n):.0f} | {model.seconds(SMOL, 0, n, logits=False):.0f} |")
    per_prompt = prompt_seconds(model, lengths)
    print("\n| task | budget | " + " | ".join(f"s/prompt @{n} shared (alone)" for n in lengths) + " |")
    print("|---|---|" + "---|" * len(lengths))
    for name, task in hs.TASKS.items():
        cells = " | ".join(
            f"{per_prompt[(name, n)][0]:.0f} ({per_prompt[(name, n)][1]:.0f})" for n in lengths
        )
        print(f"| {name} | {task.budget} | {cells} |")
    print()
    for line in decisions():
        print(line)
    print(
        "\n| one haystack, many questions (H haystacks x Q questions forked off its end) | core-s per table |"
    )
    print("|---|---|")
    for length in (12288, 16384):
        for haystacks, questions in ((20, 1), (5, 4), (1, 20)):
            one = model.seconds(SMOL, 0, length, logits=False)
            ask = model.seconds(SMOL, length, length + 25, logits=False) + model.answer(length + 25, 8)
            print(f"| {haystacks} x {questions} at {length} | {haystacks * (one + questions * ask):.0f} |")
    print("\n| grid | text passes (core-s) | retrieval (core-s) | minutes on 2 workers |")
    print("|---|---|---|---|")
    for label, grid in designs().items():
        got = grid_seconds(model, per_prompt, **grid)
        print(f"| {label} | {got['text']:.0f} | {got['retrieval']:.0f} | {got['minutes']:.1f} |")


def designs() -> dict[str, dict]:
    every = ["none", "linear", "ntk", "dynamic:1", "yarn", "dynamic-yarn", "llama3"]
    four = ["none", "ntk", "yarn", "dynamic-yarn"]
    ruler = [t for t in hs.TASKS if t != "passkey"]
    inside_ruler = {(t, 4096): 5 for t in ruler}  # 4 tasks x 5 prompts: 20 RULER-style prompts at 4k
    return {
        "shipped default: none, yarn, dynamic-yarn; 2 python-docs slices to 16k; passkey 1 x 2 depths @2k, @4k": dict(
            scalings=["none", "yarn", "dynamic-yarn"], text_lengths=[16384], documents=2,
            retrieval={("passkey", 2048): 2, ("passkey", 4096): 2}),
        "default B: none, yarn, dynamic-yarn; 3 plays to 16k; no prompts": dict(
            scalings=["none", "yarn", "dynamic-yarn"], text_lengths=[16384], documents=3, retrieval={}),
        "default B + passkey 20 @2k (plain RoPE and YaRN x2)": dict(
            scalings=["none", "yarn", "dynamic-yarn"], text_lengths=[16384], documents=3,
            retrieval={("passkey", 2048): 20}),
        "default A: none, yarn, dynamic-yarn; 4 plays to 12k; passkey 20 @4k": dict(
            scalings=["none", "yarn", "dynamic-yarn"], text_lengths=[12288], documents=4,
            retrieval={("passkey", 4096): 20}),
        "thorough, every scaling, 2x: 10 plays to 16k; passkey 20 + RULER 4x5 @4k, @8k, @16k": dict(
            scalings=every, text_lengths=[16384], documents=10,
            retrieval={**{("passkey", n): 20 for n in (4096, 8192, 16384)},
                       **{(t, n): 5 for t in ruler for n in (4096, 8192, 16384)}}),
        "thorough T-a, 2x: none, ntk, dynamic:1, yarn, dynamic-yarn; 10 plays to 16k; passkey 20 @4k, @16k": dict(
            scalings=["none", "ntk", "dynamic:1", "yarn", "dynamic-yarn"], text_lengths=[16384], documents=10,
            retrieval={("passkey", 4096): 20, ("passkey", 16384): 20}),
        "thorough T-b, 1.5x: none, ntk, yarn, dynamic-yarn; 10 plays to 12k; passkey 20 @4k, @12k; RULER 4x5 @4k": dict(
            scalings=four, text_lengths=[12288], documents=10,
            retrieval={("passkey", 4096): 20, ("passkey", 12288): 20, **inside_ruler}),
        "thorough T-c, 1.5x: T-b + dynamic:1": dict(
            scalings=[*four, "dynamic:1"], text_lengths=[12288], documents=10,
            retrieval={("passkey", 4096): 20, ("passkey", 12288): 20, **inside_ruler}),
        "thorough T-b + RULER 4x5 @12k": dict(
            scalings=four, text_lengths=[12288], documents=10,
            retrieval={("passkey", 4096): 20, ("passkey", 12288): 20, **inside_ruler,
                       **{(t, 12288): 5 for t in ruler}}),
    }  # fmt: skip


if __name__ == "__main__":
    main()
