"""Free-running (greedy) decoding scores against cases computed by hand: a model that copies, one
that fails at a known position, and a real causal model, whose free-running exact match and
correct prefix must equal what one teacher-forced pass says (positions fixed)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from posenc.compare import evaluation
from posenc.compare.evaluation import answer_logprob, evaluate_task, feeds_back, free_running
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.nn.transformer import Transformer, TransformerConfig
from posenc.records.schema import result_problem
from posenc.tasks import synthetic, task_registry

V = synthetic.VOCAB_SIZE


class CopyStub:
    """Copies ``x`` after SEP by successor lookup: at a position holding token ``a`` (after SEP),
    predicts the token that follows ``a`` in ``x`` (EOS after the last); at SEP, ``x_1``. At
    answer index ``fail_at`` (0-based; None: never) it predicts ``wrong`` instead. A token that is
    not in ``x`` has no successor: the stub predicts PAD. Counts its calls."""

    def __init__(self, fail_at: int | None = None, wrong: int = synthetic.BLANK) -> None:
        self.fail_at, self.wrong, self.calls = fail_at, wrong, []

    def __call__(self, tokens: torch.Tensor, positions=None, cache=None) -> torch.Tensor:
        self.calls.append(tokens.shape[1])
        b, t = tokens.shape
        logits = torch.zeros(b, t, V)
        for i in range(b):
            row = tokens[i].tolist()
            sep = row.index(synthetic.SEP)
            x = row[1:sep]
            for p in range(sep, t):
                if p == sep:
                    nxt = x[0]
                elif row[p] in x:
                    k = x.index(row[p])
                    nxt = x[k + 1] if k + 1 < len(x) else synthetic.EOS
                else:
                    nxt = synthetic.PAD
                if self.fail_at is not None and p - sep == self.fail_at:
                    nxt = self.wrong
                logits[i, p, nxt] = 1.0
        return logits


@pytest.mark.parametrize("n", [1, 5, 12])
def test_a_model_that_copies_gets_every_answer_and_the_whole_prefix(n):
    batch = task_registry.eval_batch("copy", n, 6, seed=3)
    assert feeds_back(batch)
    free = free_running(CopyStub(), batch)
    assert free["exact_match"].all()
    assert free["prefix"].tolist() == [n] * 6 and free["answer_tokens"].tolist() == [n] * 6


@pytest.mark.parametrize(("n", "k"), [(6, 0), (6, 3), (10, 9)])
def test_a_model_that_fails_at_position_k_copies_k_tokens_free_running(n, k):
    """After its first error the stub reads its own wrong token, finds no successor and never
    recovers: prefix k, no exact match. Teacher-forced, it reads the gold token instead and gets
    every answer token but one right ((n - 1) / n), which is why teacher-forced accuracy is not
    "how far it copies"."""
    batch = task_registry.eval_batch("copy", n, 4, seed=0)
    stub = CopyStub(fail_at=k)
    free = free_running(stub, batch)
    assert free["prefix"].tolist() == [k] * 4 and not free["exact_match"].any()
    # no KV cache on the stub: each step recomputes the prefix, one step per answer token and EOS
    prompt = n + 2
    assert stub.calls == list(range(prompt, prompt + n + 1))
    teacher = synthetic.answer_accuracy(stub(batch.inputs), batch)
    assert teacher.tolist() == pytest.approx([(n - 1) / n] * 4)


def test_a_wrong_eos_is_no_exact_match_but_keeps_the_prefix():
    n = 4
    batch = task_registry.eval_batch("copy", n, 3, seed=1)
    free = free_running(CopyStub(fail_at=n), batch)  # every token right, then no EOS
    assert free["prefix"].tolist() == [n] * 3 and not free["exact_match"].any()


def _model(encoding: str, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(
        vocab_size=V, encoding=encoding, d_model=32, num_heads=2, num_layers=2, ffn_dim=64
    )
    return Transformer(config).eval()


@pytest.mark.parametrize("encoding", ["rope", "alibi", "learned"])
def test_free_running_equals_one_teacher_forced_pass_for_a_causal_model(encoding):
    """With positions that do not depend on the whole length, greedy decoding reproduces the
    teacher-forced argmax up to the first error: same exact match, and the prefix is the index of
    the first wrong answer token. With and without the KV cache alike."""
    model = _model(encoding)
    # a model that gets part of copy right: a few steps of training on short copies
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(60):
        batch = task_registry.sample_batch("copy", 32, min_len=1, max_len=4, generator=generator)
        logits = model(batch.inputs)
        loss = torch.nn.functional.cross_entropy(logits[batch.loss_mask], batch.targets[batch.loss_mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    for n in (3, 6):
        batch = task_registry.eval_batch("copy", n, 64, seed=2)
        with torch.no_grad():
            logits = model(batch.inputs)
        exact, _ = synthetic.score(logits, batch)
        right = (logits.argmax(-1) == batch.targets) & batch.loss_mask & (batch.targets != synthetic.EOS)
        answer = batch.loss_mask & (batch.targets != synthetic.EOS)
        first_wrong = ((answer & ~right).cumsum(-1) == 0) & answer
        cached, recomputed = free_running(model, batch), free_running(model, batch, use_cache=False)
        for free in (cached, recomputed):
            assert torch.equal(free["exact_match"], exact)
            assert torch.equal(free["prefix"], first_wrong.sum(-1))
        assert 0 < int(cached["prefix"].sum()) < n * 64  # neither nothing nor everything right


def test_a_dynamic_scaling_is_set_from_the_length_read_so_far():
    """Free-running, the scaling sees each step's length (as when generating), not the whole row."""
    seen: list[int] = []
    n = 5
    batch = task_registry.eval_batch("copy", n, 2, seed=0)
    free_running(CopyStub(), batch, at_length=seen.append)
    assert seen == list(range(n + 2, 2 * n + 3))  # the prompt, then one more token per step


def test_rows_that_start_answering_at_different_positions_decode_together():
    batch = task_registry.eval_batch("selective_copy", 6, 8, seed=4)  # blanks: prompts differ in length
    starts = batch.loss_mask.int().argmax(-1)
    assert len(set(starts.tolist())) > 1 and feeds_back(batch)
    free = free_running(lambda tokens, positions=None, cache=None: _select_stub(tokens), batch)
    assert free["exact_match"].all() and free["prefix"].tolist() == [6] * 8


def _select_stub(tokens: torch.Tensor) -> torch.Tensor:
    """Selective copy by position among the non-blank inputs: answer index j -> the j-th symbol."""
    b, t = tokens.shape
    logits = torch.zeros(b, t, V)
    for i in range(b):
        row = tokens[i].tolist()
        if synthetic.SEP not in row:
            continue
        sep = row.index(synthetic.SEP)
        symbols = [s for s in row[1:sep] if s != synthetic.BLANK]
        for p in range(sep, t):
            j = p - sep
            logits[i, p, symbols[j] if j < len(symbols) else synthetic.EOS] = 1.0
    return logits


def test_a_task_that_does_not_read_its_answer_back_is_not_decoded():
    grid_batch = task_registry.eval_batch("grid", 4, 3, seed=0)
    assert not feeds_back(grid_batch)


def test_a_task_run_records_free_running_scores_tokens_and_passes_the_schema():
    smoke = get_profile("smoke")
    (spec,) = [s for s in build_grid(smoke, seeds=(0,), encodings=("nope",), tasks=("copy",)).specs]
    ev = evaluate_task(_model("nope"), spec)
    lengths = list(spec.eval.lengths)
    assert ev["tokens"] == [2 * n + 2 for n in lengths] and ev["train_tokens"] == 2 * spec.train.max_len + 2
    assert ev["free_running"]["decoding"] == "greedy, KV cache"
    per = ev["per_example"]
    for key in ("free_exact_match", "free_prefix", "answer_tokens"):
        assert len(per[key]) == len(lengths) and all(len(row) == spec.eval.samples for row in per[key])
    assert per["answer_tokens"] == [[n] * spec.eval.samples for n in lengths]
    assert all(0 <= p <= n for row, n in zip(per["free_prefix"], lengths) for p in row)
    result = {"train": _train(), "timing": {}, "eval": {"default": ev}}
    assert result_problem(result, spec) is None
    del ev["per_example"]["free_prefix"]
    assert result_problem(result, spec) == "result.eval.default.per_example.free_prefix has no row per length"
    ev.pop("free_running")
    assert result_problem(result, spec) == "result.eval.default.free_running is missing"
    # a record from before free-running decoding (its spec has no such field) still reads
    old = dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, free_running=False))
    assert result_problem(result, old) is None


def _train() -> dict:
    return {"converged": True, "steps": 1, "steps_to_converge": 1, "checks": {"step": [1], "valid_exact_match": [1.0]},
            "final_loss": 0.1, "loss": [0.1]}  # fmt: skip


def test_the_answer_log_likelihood_is_the_mean_log_probability_of_the_answer_tokens():
    """A stub with logit 1 on the right token and 0 elsewhere: every answer token has probability
    e / (e + V - 1); a model with equal logits: 1 / V. EOS is left out, as answer-token accuracy leaves it."""
    batch = task_registry.eval_batch("copy", 5, 4, seed=1)
    got = answer_logprob(CopyStub()(batch.inputs), batch)
    want = math.log(math.e / (math.e + V - 1))
    assert got.tolist() == pytest.approx([want] * 4, abs=1e-6)
    assert answer_logprob(CopyStub(fail_at=5)(batch.inputs), batch).tolist() == pytest.approx(
        [want] * 4, abs=1e-6
    )
    flat = answer_logprob(torch.zeros(4, batch.inputs.shape[1], V), batch)
    assert flat.tolist() == pytest.approx([-math.log(V)] * 4, abs=1e-6)
    wrong = answer_logprob(CopyStub(fail_at=2)(batch.inputs), batch)  # one of 5 tokens wrong
    assert wrong.tolist() == pytest.approx([(4 * want + math.log(1 / (math.e + V - 1))) / 5] * 4, abs=1e-6)


def test_the_answer_log_likelihood_is_kept_only_where_switched_on(monkeypatch):
    smoke = get_profile("smoke")
    (spec,) = [s for s in build_grid(smoke, seeds=(0,), encodings=("nope",), tasks=("copy",)).specs]
    assert evaluation.ANSWER_LOGPROB  # on from benchmark version 3
    monkeypatch.setattr(evaluation, "ANSWER_LOGPROB", False)
    assert "answer_logprob" not in evaluate_task(_model("nope"), spec)["per_example"]
    monkeypatch.setattr(evaluation, "ANSWER_LOGPROB", True)
    ev = evaluate_task(_model("nope"), spec)
    rows = ev["per_example"]["answer_logprob"]
    assert len(rows) == len(spec.eval.lengths) and all(len(r) == spec.eval.samples for r in rows)
    assert all(v <= 0 for r in rows for v in r) and len(ev["answer_logprob"]) == len(spec.eval.lengths)
