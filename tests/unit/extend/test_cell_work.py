"""posenc.extend.cell_work: the retrieval prompts of a cell fed through one KV cache, each after what
it shares with the one before, answered greedily and scored, on a tiny random Llama."""

from __future__ import annotations

import dataclasses

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


def _cell(model_dir, task: str, length: int, count: int):
    from posenc.extend import haystacks, plan
    from posenc.extend.checkpoint import Checkpoint, load_tokenizer

    tokenizer = load_tokenizer(Checkpoint(str(model_dir), str(model_dir), "", {}))

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompts = haystacks.prompts(task, length, count, seed=3, tokenize=tokenize)
    shape = plan.Shape(layers=2, heads=4, kv_heads=2, head_dim=8, hidden=32, intermediate=48, vocab=300,
                       parameters=30000)  # fmt: skip
    built = plan.build(entries=[plan.Entry("none")], lengths=(32,), context=64, documents=((1,) * 32,),
                       prompts={(task, length): prompts}, longrope=None, shape=shape, model=str(model_dir),
                       fingerprint="f", trust_remote_code=False, precision="fp32", chunk=40, device="cpu",
                       threads=1)  # fmt: skip
    return next(c for c in built.cells if c.kind == "prompts"), tokenizer


def _fed(model):
    """Count the tokens each call of ``model`` is fed."""
    fed: list[int] = []
    original = model.forward

    def spy(*args, **kwargs):
        fed.append(int(kwargs["input_ids"].shape[1]))
        return original(*args, **kwargs)

    model.forward = spy
    return fed


def test_prompts_fed_through_one_cache_get_the_answers_each_gets_alone(tiny_llama_dir):
    """The passkey prompts of a cell share their beginning (the instruction and the filler up to the
    first key): fed through one cache, each after what it shares with the one before (the cache cut
    back to that), they get the very answers each gets fed alone from an empty cache, for fewer
    tokens; every answer is scored as its task scores it."""
    from posenc.extend import cell_work as work
    from posenc.extend import haystacks

    cell, tokenizer = _cell(tiny_llama_dir, "passkey", 320, 6)
    assert sum(q.shared for q in cell.questions) > 0  # the order shares something
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    shape = work.Shape.of(model.config, sum(p.numel() for p in model.parameters()))
    runner = work.Runner(model, shape, 40, lambda units, status=None: None)
    fed = _fed(model)
    shared = work.prompt_answers(runner, model, tokenizer, cell)
    shared_tokens = sum(fed)
    alone_cell = dataclasses.replace(
        cell, questions=tuple(dataclasses.replace(q, shared=0) for q in cell.questions)
    )
    fed.clear()
    alone = work.prompt_answers(runner, model, tokenizer, alone_cell)
    assert [a["generated"] for a in shared] == [a["generated"] for a in alone]
    assert [a["index"] for a in shared] == [q.index for q in cell.questions]
    assert shared_tokens < sum(fed)  # the shared beginnings were fed once
    for answer, question in zip(shared, cell.questions):
        assert answer["score"] == haystacks.first_number(answer["generated"], question.expected)
        assert answer["correct"] == (answer["score"] == 1.0)
    # alone: each prompt in chunks of 40, then a call per answer token after the first (this tokenizer has
    # no end-of-text token, so every answer runs to its budget)
    assert len(fed) == sum(-(-len(q.ids) // 40) + q.budget - 1 for q in cell.questions)


def test_an_answer_stops_at_the_end_of_text_token(tiny_llama_dir):
    """Greedy decoding stops where the model writes its end-of-text token (what transformers'
    generate does), not only at the task's budget."""
    from posenc.extend import cell_work as work

    cell, tokenizer = _cell(tiny_llama_dir, "multikey", 480, 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    shape = work.Shape.of(model.config, sum(p.numel() for p in model.parameters()))
    runner = work.Runner(model, shape, 64, lambda units, status=None: None)
    free = work.prompt_answers(runner, model, tokenizer, cell)[0]
    assert free["generated"], free  # a random model writes something
    first = int(runner.forward(work.new_cache(model), cell.questions[0].ids).argmax())
    assert tokenizer.eos_token_id is None
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(
        first
    )  # the model's first answer token ends the text
    try:
        stopped = work.prompt_answers(runner, model, tokenizer, cell)[0]
    finally:
        tokenizer.eos_token = None
    assert stopped["generated"] == "" and stopped["score"] == 0.0 and stopped["correct"] is False
