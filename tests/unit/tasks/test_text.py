"""The byte LM's text (``posenc.tasks.text``): the stdlib corpus and its hash, windows that score the same
bytes, the three splits and the test evaluation: no file in two splits, training, tuning and early
stopping never read a test byte, the test files are a size-stratified sample scored file by file, and
the per-file values match a case computed by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from posenc.compare import evaluation, trainer
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.core.errors import PosencError
from posenc.records.schema import result_problem
from posenc.tasks import text

SMOKE = get_profile("smoke")


def _corpus_dir(tmp_path, count: int = 220):
    """``count`` files, sizes 30-2000 bytes (220 files: byte values 33-252), each made of one byte value of its own (so every byte
    tells its file)."""
    for i in range(count):
        (tmp_path / f"mod{i:03d}.py").write_bytes(bytes([33 + i]) * (30 + (i * 37) % 1970))
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "skipped.py").write_text("ignored\n")
    return tmp_path


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    root = _corpus_dir(tmp_path)
    found = text.stdlib_corpus.__wrapped__(str(root))
    monkeypatch.setattr(text, "stdlib_corpus", lambda *a, **k: found)
    return found, root


@pytest.fixture
def varied_corpus(tmp_path, monkeypatch):
    """220 files of runs of random bytes, each file with its own mean run length."""
    generator = np.random.default_rng(0)
    for i in range(220):
        runs = generator.geometric(1 / (1 + i % 7), size=400)
        values = generator.integers(0, 256, size=400)
        (tmp_path / f"mod{i:03d}.py").write_bytes(
            bytes(np.repeat(values, runs)[: 100 + 9 * i].astype(np.uint8))
        )
    found = text.stdlib_corpus.__wrapped__(str(tmp_path))
    monkeypatch.setattr(text, "stdlib_corpus", lambda *a, **k: found)
    return found


def _owner(data: torch.Tensor) -> set[int]:
    """The files (by index) the bytes come from."""
    return {int(b) - 33 for b in data.flatten().tolist()}


def test_no_file_is_in_two_splits_and_none_is_lost(corpus):
    found, root = corpus
    files = sorted(p.name for p in root.glob("*.py"))
    splits = {name: text.file_split(name) for name in files}
    assert set(splits.values()) == {"train", "valid", "test"}
    assert found.num_files == {s: sum(v == s for v in splits.values()) for s in ("train", "valid", "test")}
    by_split = {"train": _owner(found.train), "valid": _owner(found.valid), "test": _owner(found.test)}
    for a, b in (("train", "valid"), ("train", "test"), ("valid", "test")):
        assert not by_split[a] & by_split[b]
    assert set().union(*by_split.values()) == set(range(len(files)))
    total = sum((root / name).stat().st_size for name in files)
    assert found.train.numel() + found.valid.numel() + found.test.numel() == total  # test/ skipped
    assert [rel for rel, _ in found.test_files] == sorted(n for n, s in splits.items() if s == "test")


def test_the_split_follows_the_path_only_and_keeps_the_earlier_training_files():
    """5% validation, then 5% test: the files an earlier 10% train/validation split trained on
    train still (the shipped learning rates were chosen on them)."""
    names = [f"pkg/mod{i}.py" for i in range(2000)]
    for name in names:
        digest = int.from_bytes(__import__("hashlib").sha256(name.encode()).digest()[:4], "big") % 100
        assert text.file_split(name) == ("valid" if digest < 5 else "test" if digest < 10 else "train")
        assert (text.file_split(name) == "train") == (digest >= 10)
    shares = {s: sum(text.file_split(n) == s for n in names) / len(names) for s in ("valid", "test")}
    assert 0.03 < shares["valid"] < 0.07 and 0.03 < shares["test"] < 0.07


def test_training_tuning_and_early_stopping_never_read_a_test_byte(corpus):
    found, _ = corpus
    test_owners = _owner(found.test)
    spec = next(s for s in build_grid(SMOKE, seeds=(0,), encodings=("nope",)).specs if s.task == "lm")
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, max_len=8, valid_samples=64))
    inputs, targets = trainer.heldout_lm_windows(spec)  # the convergence checks and the tuning candidates
    assert _owner(torch.cat([inputs, targets], 1)) <= _owner(found.valid)
    assert not _owner(torch.cat([inputs, targets], 1)) & test_owners
    batch, after = text.sample_windows(found.train, 256, 8, torch.Generator().manual_seed(0))  # training
    assert not _owner(torch.cat([batch, after], 1)) & test_owners


def test_the_scored_files_are_a_size_stratified_sample_of_the_test_split(corpus):
    found, _ = corpus
    span = 64
    eligible = sorted((d.numel(), rel) for rel, d in found.test_files if d.numel() >= span + 1)
    spans = text.scored_spans(found, span=span, files=3, seed=0)
    assert len(spans) == 3 and [s.path for s in spans] == sorted(s.path for s in spans)
    assert all(text.file_split(s.path) == "test" and s.span == span for s in spans)
    # one from each third of the eligible files sorted by size
    thirds = [eligible[len(eligible) * g // 3 : len(eligible) * (g + 1) // 3] for g in range(3)]
    assert sorted(sum(any(rel == s.path for _, rel in third) for s in spans) for third in thirds) == [1, 1, 1]
    for s in spans:  # the middle of the file
        whole = dict(found.test_files)[s.path]
        assert s.offset == (s.file_bytes - span - 1) // 2 and torch.equal(
            s.data, whole[s.offset : s.offset + span + 1]
        )
    assert [s.path for s in text.scored_spans(found, span=span, files=3, seed=0)] == [s.path for s in spans]
    everything = text.scored_spans(found, span=span, files=10_000)
    assert sorted(s.path for s in everything) == sorted(rel for _, rel in eligible)  # all, when fewer
    with pytest.raises(PosencError, match="no test file has the"):
        text.scored_spans(found, span=10**7, files=3)


class NextIsThisByte(torch.nn.Module):
    """Predicts that the next byte repeats the current one: logit ``a`` on it, 0 elsewhere."""

    a = 3.0

    def forward(self, tokens, positions=None):
        return torch.nn.functional.one_hot(tokens, 256).float() * self.a


def test_the_lm_scores_each_test_file_and_keeps_its_bits_per_byte(varied_corpus):
    """Per-file bits per byte by hand: a byte repeating the previous one costs log(255 + e^a) - a
    nats, any other log(255 + e^a). Every length scores the same bytes of every file, so every
    length gives each file the same value; the overall value is the mean over files."""
    found = varied_corpus
    spec = next(s for s in build_grid(SMOKE, seeds=(0,), encodings=("nope",)).specs if s.task == "lm")
    spec = dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, lm_files=4, lm_bytes=4 * 64))
    ev = evaluation.evaluate_lm(NextIsThisByte(), spec)
    spans = text.scored_spans(found, span=64, files=4, seed=spec.eval.seed)
    assert len(spans) == 4 and ev["files"] == [s.path for s in spans]
    assert ev["file_span"] == 64 and ev["scored_bytes"] == 256
    a = NextIsThisByte.a
    by_hand = []
    for s in spans:
        data = s.data.numpy().astype(int)
        same = data[1:] == data[:-1]
        nats = np.where(same, math.log(255 + math.exp(a)) - a, math.log(255 + math.exp(a)))
        by_hand.append(nats.mean() / math.log(2))
    per_file = ev["per_file"]["bits_per_byte"]
    assert len(per_file) == len(spec.eval.lm_lengths)
    assert max(by_hand) - min(by_hand) > 0.5  # the files differ
    for row in per_file:
        assert row == pytest.approx(by_hand, rel=1e-5)
    assert ev["bits_per_byte"] == pytest.approx([np.mean(by_hand)] * len(spec.eval.lm_lengths), rel=1e-5)
    assert ev["ratio_to_train"] == pytest.approx([1.0] * len(spec.eval.lm_lengths), rel=1e-5)
    assert len(ev["per_file"]["lastk_bits_per_byte"]) == len(spec.eval.lastk_contexts)
    assert all(len(row) == 4 for row in ev["per_file"]["lastk_bits_per_byte"])
    assert ev["eval_data_sha256"] == text.spans_sha256(spans)
    assert result_problem({"train": _train(), "timing": {}, "eval": {"default": ev}}, spec) is None
    del ev["per_file"]
    assert result_problem({"train": _train(), "timing": {}, "eval": {"default": ev}}, spec) == (
        "result.eval.default.per_file is missing"
    )
    # a record from before test splits (lm_files 0) needs none, and is not evaluated again
    old = dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, lm_files=0))
    assert result_problem({"train": _train(), "timing": {}, "eval": {"default": ev}}, old) is None
    with pytest.raises(PosencError, match="eval.lm_files = 0"):
        evaluation.evaluate_lm(NextIsThisByte(), old)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"lastk_windows": 40}, "eval.lastk_windows = 40 windows per test file"),
        ({"lastk_k": 20}, "eval.lastk_k (20) must be <="),
        ({"position_multiple": 16, "lm_lengths": (8, 16, 64)}, "loss by position reads windows of 256 bytes"),
    ],
)
def test_a_span_too_short_for_what_evaluation_reads_is_refused(change, words):
    ev = dataclasses.replace(SMOKE.eval, **change)
    with pytest.raises(PosencError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ev.test_span(SMOKE.lm_train.max_len)


def _train() -> dict:
    return {"converged": True, "steps": 1, "steps_to_converge": 1, "checks": {"step": [1], "valid_loss": [1.0]},
            "final_loss": 0.1, "loss": [0.1]}  # fmt: skip


def test_the_table_caption_says_how_many_test_files_and_bytes_the_lm_read():
    from posenc.results import tables

    def record(files, span):
        ev = {"files": [f"f{i}.py" for i in range(files)], "file_span": span, "scored_bytes": files * span,
              "split": "test"}  # fmt: skip
        return {"spec": {"task": "lm"}, "result": {"eval": {"default": ev}}}

    data = tables.lm_data([record(20, 1536), record(20, 1536), {"spec": {"task": "copy"}}])
    assert data == [{"split": "test", "files": 20, "bytes_per_file": 1536, "scored_bytes": 30720}]
    text = tables.caption({"tasks": ["lm"], "rows": {}, "lm_data": data})
    assert "LM on the test split (20 files x 1536 bytes): bits/byte at L_train" in text


def test_stdlib_corpus_split_and_hash(tmp_path):
    for i in range(40):
        (tmp_path / f"mod{i}.py").write_text(f"x = {i}\n" * (i + 1))
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "skipped.py").write_text("ignored\n")
    corpus = text.stdlib_corpus(str(tmp_path))
    total = sum(len(f"x = {i}\n" * (i + 1)) for i in range(40))
    assert (
        corpus.train.numel() + corpus.valid.numel() + corpus.test.numel() == total
    )  # test/ skipped, nothing lost
    assert corpus.num_files["train"] + corpus.num_files["valid"] + corpus.num_files["test"] == 40
    assert corpus.describe()["python_version"].count(".") == 2
    # Hash of exactly what was read: changing one byte changes it.
    before = corpus.sha256
    (tmp_path / "mod3.py").write_text("x = 4\n" * 4)
    text.stdlib_corpus.cache_clear()
    assert text.stdlib_corpus(str(tmp_path)).sha256 != before
    # The split depends on the path only.
    for split in ("train", "valid", "test"):
        assert sum(text.file_split(f"mod{i}.py") == split for i in range(40)) == corpus.num_files[split]


def test_windows_score_identical_bytes():
    data = torch.arange(200, dtype=torch.uint8)
    total = text.scored_bytes([8, 12, 16], 40)
    assert total % 48 == 0 and total >= 40
    for length in (8, 12, 16):
        inputs, targets = text.nonoverlapping_windows(data, length, total)
        assert torch.equal(targets.flatten(), data[1 : total + 1].long())
        assert torch.equal(inputs.flatten(), data[:total].long())
    last = [text.lastk_windows(data, c, 4, 3, 32)[1][:, -4:] for c in (8, 16, 32)]
    assert torch.equal(last[0], last[1]) and torch.equal(last[1], last[2])
    x, y = text.lastk_windows(data, 16, 4, 3, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    g = torch.Generator().manual_seed(0)
    x, y = text.sample_windows(data, 5, 10, g)
    assert x.shape == (5, 10) and torch.equal(x[:, 1:], y[:, :-1])
