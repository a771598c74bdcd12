"""posenc.extend.haystacks: the passkey and the RULER-style prompts, drawn from a seed at a token
length, tokenized as text, and scored as the papers score them; on a word-level tokenizer made
here and, where the ``real`` extra is installed, on SmolLM2's own."""

from __future__ import annotations

import re
import zlib
from collections import Counter

import pytest

from posenc.core.errors import PosencError
from posenc.extend import checkpoint as checkpoints
from posenc.extend import haystacks as syn

PIECES = re.compile(r" ?\w+| ?[^\w\s]+|\s+")


def words(text: str) -> list[int]:
    """A word-level tokenizer with the leading-space pieces of a byte-level BPE's pre-tokenizer."""
    return [zlib.crc32(piece.encode()) for piece in PIECES.findall(text)]


@pytest.mark.parametrize("name", sorted(syn.TASKS))
@pytest.mark.parametrize("length", [512, 2048, 8192])
def test_a_prompt_fills_its_length_with_room_for_the_answer(name, length):
    prompt = syn.generate(name, length, seed=0, index=3, tokenize=words)
    assert prompt.length + prompt.budget <= length
    one_more = len(words(syn.FILLER)) + 2  # a filler unit, or a few coded words
    assert prompt.length + prompt.budget > length - 2 * one_more
    assert list(prompt.ids) == words(prompt.text)  # one tokenizer call on the whole text
    assert (prompt.task, prompt.target, prompt.seed, prompt.index) == (name, length, 0, 3)


@pytest.mark.parametrize("name", sorted(syn.TASKS))
def test_the_same_arguments_give_the_same_prompt_and_others_differ(name):
    again = [syn.generate(name, 2048, seed=7, index=i, tokenize=words) for i in range(2)]
    assert again[0] == syn.generate(name, 2048, seed=7, index=0, tokenize=words)
    assert again[0].text != again[1].text
    assert again[0].expected != syn.generate(name, 2048, seed=8, index=0, tokenize=words).expected


def test_every_expected_string_is_in_the_prompt_and_each_needle_where_its_depth_says():
    for name in ("passkey", "multikey", "multivalue", "variables"):
        prompt = syn.generate(name, 4096, seed=1, index=0, tokenize=words)
        assert all(item in prompt.text for item in prompt.expected)
        haystack = prompt.text.split("\n")[1]
        units = haystack.count(syn.FILLER)
        for depth, needle in zip(sorted(prompt.depths), _needles(haystack)):
            before = haystack[: haystack.index(needle)].count(syn.FILLER)
            assert before == round(depth * units), (name, depth, before, units)


def _needles(haystack: str) -> list[str]:
    """The sentences of the haystack that are not filler, in order."""
    rest = haystack.replace(syn.FILLER, "\0")
    return [piece.strip() for piece in rest.split("\0") if piece.strip()]


def test_depths_and_keys_are_spread_over_prompts():
    prompts = syn.prompts("passkey", 2048, 40, seed=0, tokenize=words)
    depths = [p.depths[0] for p in prompts]
    assert min(depths) < 0.15 and max(depths) > 0.85 and len({p.expected for p in prompts}) == 40
    keys = Counter(len(p.expected[0]) for p in prompts)
    assert keys == {5: 40}


def test_the_multikey_needles_have_distinct_keys_and_one_is_asked():
    prompt = syn.generate("multikey", 4096, seed=2, index=5, tokenize=words)
    needles = _needles(prompt.text.split("\n")[1])
    keys = [re.search(r"for (\S+) is", n).group(1) for n in needles]  # type: ignore[union-attr]
    assert len(needles) == syn.NEEDLES == len(set(keys))
    asked = re.search(r"number for (\S+)\?", prompt.text).group(1)  # type: ignore[union-attr]
    assert f"for {asked} is: {prompt.expected[0]}." in prompt.text


def test_the_variable_chain_is_in_order_and_ends_at_every_name():
    prompt = syn.generate("variables", 4096, seed=3, index=0, tokenize=words)
    chain = _needles(prompt.text.split("\n")[1])
    assert len(chain) == syn.HOPS + 1 and re.fullmatch(r"VAR [A-Z]{5} = \d{5}\.", chain[0])
    for previous, step in zip(chain, chain[1:]):
        assert step.endswith(f"= VAR {previous.split()[1]}.")
    assert prompt.expected == tuple(step.split()[1] for step in chain)


def test_the_frequent_words_follow_zipf_and_the_answer_is_the_three_after_the_dots():
    prompt = syn.generate("frequent", 8192, seed=4, index=0, tokenize=words)
    counts = Counter(prompt.text.split("\n")[1].split())
    ranked = [word for word, _ in counts.most_common()]
    assert ranked[0] == "...." and tuple(ranked[1:4]) == prompt.expected
    top = counts.most_common(3)
    assert top[0][1] / top[1][1] == pytest.approx(4.0, rel=0.05)  # Zipf, exponent 2: (2/1)^2
    assert top[1][1] / top[2][1] == pytest.approx(2.25, rel=0.1)  # (3/2)^2


def test_answers_are_scored_as_the_papers_score_them():
    prompt = syn.generate("multivalue", 4096, seed=0, index=0, tokenize=words)
    values = prompt.expected
    assert syn.score(prompt, " " + ", ".join(values)) == 1.0
    assert syn.score(prompt, f" {values[0]} and {values[2]}") == 0.5
    assert syn.score(prompt, " none") == 0.0
    key = syn.generate("passkey", 2048, seed=0, index=0, tokenize=words)
    assert syn.score(key, f" {key.expected[0]}. Remember") == 1.0
    assert syn.score(key, f" 1{key.expected[0]}") == 0.0  # the first number must be the key exactly
    assert syn.score(key, f" 7 then {key.expected[0]}") == 0.0
    assert syn.recall("ABCDE, fghij", ["abcde", "FGHIJ", "KLMNO"]) == pytest.approx(2 / 3)


def test_prompts_of_one_task_share_their_beginning_and_the_order_uses_it():
    prompts = syn.prompts("passkey", 2048, 10, seed=0, tokenize=words)
    order = syn.prefill_order(prompts)
    assert sorted(p.ids for p, _ in order) == [p.ids for p, _ in order]
    for (before, _), (prompt, shared) in zip(order, order[1:]):
        assert before.ids[:shared] == prompt.ids[:shared] and before.ids[shared] != prompt.ids[shared]
    head = len(words(prompts[0].text.split("\n")[0] + "\n"))
    assert all(shared >= head for _, shared in order[1:])  # at least the instruction
    assert syn.shared_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and syn.shared_prefix([1, 2], [1, 2, 3]) == 2


def test_a_length_too_short_and_unknown_names_are_refused_by_name():
    with pytest.raises(PosencError, match="too short for a passkey prompt") as refused:
        syn.generate("passkey", 40, seed=0, index=0, tokenize=words)
    least = int(re.search(r"needs (\d+) tokens", str(refused.value)).group(1))
    assert least > 40  # the length it names is one that holds a prompt with filler, and no shorter one does
    assert syn.generate("passkey", least, seed=0, index=0, tokenize=words).length <= least
    with pytest.raises(PosencError, match="too short"):
        syn.generate("passkey", least - 1, seed=0, index=0, tokenize=words)
    with pytest.raises(PosencError, match="task"):
        syn.generate("needle", 2048, seed=0, index=0, tokenize=words)
    with pytest.raises(PosencError, match="seed"):
        syn.generate("passkey", 2048, seed=-1, index=0, tokenize=words)
    with pytest.raises(PosencError, match="prompts"):
        syn.prompts("passkey", 2048, 0, seed=0, tokenize=words)


def test_every_task_names_its_paper_and_a_budget_that_holds_its_answer():
    for task in syn.TASKS.values():
        assert task.paper and task.asks and task.budget >= 8
        prompt = syn.generate(task.name, 2048, seed=0, index=0, tokenize=words)
        assert len(words(" " + ", ".join(prompt.expected))) <= task.budget


try:
    checkpoints.default_gguf()
    _SMOL = ""
except Exception as exc:  # the real extra is not installed
    _SMOL = str(exc).split(":")[0]


def _seams(ids: tuple[int, ...], space: tuple[int, ...], tokenizer) -> int:
    """Lone-space tokens followed by a token that starts with a letter."""
    lone = [i for i in range(len(ids) - 1) if ids[i : i + 1] == space]
    return sum(tokenizer.decode(ids[i + 1 : i + 2])[:1].isalpha() for i in lone)


@pytest.mark.slow
@pytest.mark.skipif(bool(_SMOL), reason=f"the 'real' extra is not installed: {_SMOL}")
def test_with_smollm2s_tokenizer_a_prompt_has_no_seams_and_its_answer_fits_the_budget():
    """The prompt is the tokenizer's own tokens of its text: no lone-space token before a word (the
    seam that joining separately tokenized pieces makes: SmolLM2 writes " The" as one token; a lone
    space is its own before a digit, which it splits off), and decoding gives the text back."""
    tokenizer = checkpoints.load_tokenizer(checkpoints.resolve("", log=lambda message: None))

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    space = tokenize(" ")
    joined = tokenize(syn.FILLER + " ") + tokenize(syn.FILLER)  # pieces tokenized apart: the seam
    assert _seams(tuple(joined), tuple(space), tokenizer) == 1
    for name, task in syn.TASKS.items():
        prompt = syn.generate(name, 4096, seed=0, index=0, tokenize=tokenize)
        assert 4096 - 64 < prompt.length + task.budget <= 4096
        assert tokenizer.decode(prompt.ids) == prompt.text
        assert not _seams(prompt.ids, tuple(space), tokenizer), name
        answer = " " + ", ".join(prompt.expected) + "."
        assert len(tokenize(answer)) <= task.budget, (name, len(tokenize(answer)))
