"""The synthetic tasks' generators (``posenc.tasks.synthetic``): formats, loss masks, targets, determinism,
scoring. The text corpus is test_text.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.tasks import synthetic
from posenc.tasks.synthetic import BLANK, BOS, EOS, FIRST_SYMBOL, PAD, SEP, TASKS

task_names = st.sampled_from(sorted(TASKS))


def _rows(batch: synthetic.TaskBatch):
    """Yield (full sequence, answer tokens) per example, rebuilt from inputs/targets."""
    for i in range(batch.inputs.shape[0]):
        real = int((batch.targets[i] != PAD).sum())  # targets are never PAD inside an example
        seq = torch.cat([batch.inputs[i, :1], batch.targets[i, :real]])
        yield seq, batch.targets[i][batch.loss_mask[i]]


@given(task=task_names, n=st.integers(1, 40), seed=st.integers(0, 2**31))
def test_sequence_format_and_loss_mask(task, n, seed):
    batch = synthetic.eval_batch(task, n, 3, seed=seed)
    assert batch.inputs.shape == batch.targets.shape == batch.loss_mask.shape
    for i in range(3):  # shifted by one: targets[t] is the token after inputs[t]
        real = int((batch.targets[i] != PAD).sum())
        assert torch.equal(batch.inputs[i, 1:real], batch.targets[i, : real - 1])
        assert (batch.inputs[i, real:] == PAD).all() and (batch.targets[i, real:] == PAD).all()
    for seq, answer in _rows(batch):
        assert seq[0] == BOS and seq[-1] == EOS
        assert int((seq == SEP).sum()) == 1 and int((seq == BOS).sum()) == 1 and int((seq == EOS).sum()) == 1
        sep = int((seq == SEP).nonzero())
        x, y = seq[1:sep], seq[sep + 1 : -1]
        # The loss covers exactly y and EOS, nothing of x, BOS or SEP.
        assert torch.equal(answer, torch.cat([y, torch.tensor([EOS])]))
        content = x[x != BLANK]
        assert len(content) == n
        if task == "parity":
            assert len(y) == 1 and int(y[0] - FIRST_SYMBOL) == int((x - FIRST_SYMBOL).sum()) % 2
        else:
            expected = content.flip(0) if task == "reverse" else content
            assert torch.equal(y, expected)
        if task in ("copy", "reverse"):
            assert len(set(x.tolist())) == n  # distinct symbols
        if task in ("copy_binary", "parity"):
            assert set(x.tolist()) <= {FIRST_SYMBOL, FIRST_SYMBOL + 1}
        if task == "selective_copy":
            assert len(x) <= 4 * n - 3 and x[0] != BLANK and x[-1] != BLANK
        assert len(seq) - 1 <= synthetic.max_sequence_length(task, n)


@given(task=task_names, seed=st.integers(0, 2**31), batch_size=st.integers(1, 16))
def test_training_batches_are_deterministic_and_in_range(task, seed, batch_size):
    make = lambda: synthetic.sample_batch(  # noqa: E731
        task, batch_size, min_len=2, max_len=9, generator=torch.Generator().manual_seed(seed)
    )
    a, b = make(), make()
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.loss_mask, b.loss_mask)
    assert int(a.lengths.min()) >= 2 and int(a.lengths.max()) <= 9
    assert int(a.inputs.max()) < synthetic.VOCAB_SIZE
    # Padding only on the right, and never scored.
    assert not (a.loss_mask & (a.targets == PAD)).any()


def test_eval_sets_are_fixed_per_task_length_and_seed():
    a = synthetic.eval_batch("copy", 12, 8, seed=0)
    assert torch.equal(a.inputs, synthetic.eval_batch("copy", 12, 8, seed=0).inputs)
    assert not torch.equal(a.inputs, synthetic.eval_batch("copy", 12, 8, seed=1).inputs)
    assert not torch.equal(a.inputs[:, :5], synthetic.eval_batch("reverse", 12, 8, seed=0).inputs[:, :5])


def test_score_exact_match_and_token_accuracy():
    batch = synthetic.eval_batch("copy", 5, 4, seed=3)
    vocab = synthetic.VOCAB_SIZE
    perfect = torch.nn.functional.one_hot(batch.targets, vocab).float()  # argmax == target everywhere
    exact, acc = synthetic.score(perfect, batch)
    assert exact.all() and torch.equal(acc, torch.ones(4))
    wrong = perfect.clone()
    first_answer = batch.loss_mask[0].nonzero()[0, 0]
    wrong[0, first_answer] = torch.nn.functional.one_hot(torch.tensor(PAD), vocab).float()
    exact, acc = synthetic.score(wrong, batch)
    assert exact.tolist() == [False, True, True, True]
    assert acc[0] == pytest.approx(5 / 6)  # 5 answer tokens + EOS, one wrong


def test_answer_accuracy_counts_the_answer_tokens_without_eos():
    batch = synthetic.eval_batch("passkey", 7, 3, seed=1)  # a 2-symbol key, then EOS
    vocab = synthetic.VOCAB_SIZE
    perfect = torch.nn.functional.one_hot(batch.targets, vocab).float()
    torch.testing.assert_close(synthetic.answer_accuracy(perfect, batch), torch.ones(3))
    wrong_eos = perfect.clone()
    eos = (batch.loss_mask & (batch.targets == EOS)).nonzero()[0]  # row 0's EOS prediction
    wrong_eos[eos[0], eos[1]] = torch.nn.functional.one_hot(torch.tensor(PAD), vocab).float()
    assert synthetic.answer_accuracy(wrong_eos, batch)[0] == 1.0  # the key is right; EOS does not count
    assert synthetic.score(wrong_eos, batch)[1][0] == pytest.approx(2 / 3)  # token accuracy counts it
    wrong_key = perfect.clone()
    first = batch.loss_mask[1].nonzero()[0, 0]
    wrong_key[1, first] = torch.nn.functional.one_hot(torch.tensor(PAD), vocab).float()
    assert synthetic.answer_accuracy(wrong_key, batch).tolist() == [1.0, 0.5, 1.0]


@pytest.mark.parametrize("bad", [{"task": "nope"}, {"n": 0}, {"num_samples": 0}])
def test_bad_arguments_name_the_parameter(bad):
    args = {"task": "copy", "n": 4, "num_samples": 2} | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        synthetic.eval_batch(args["task"], args["n"], args["num_samples"])


def test_distinct_tasks_reject_more_symbols_than_exist():
    with pytest.raises(ValueError, match="n must be"):
        synthetic.eval_batch("copy", synthetic.NUM_SYMBOLS + 1, 1)
