"""Synthetic long-context prompts, generated here from a seed at any token length: the passkey
(Mohtashami & Jaggi 2023) and four RULER-style tasks (Hsieh et al. 2024).

Every task is one :class:`PromptTask` in :data:`TASKS` (the one registry the grid, the table and the
tests iterate): its paper, how a prompt is drawn, how an answer is scored and how many tokens
are generated greedily for it. A prompt (:func:`generate`) is an instruction, a haystack of
filler sentences with the task's needles at random depths, and a question that ends where the
answer starts. It is built as **text** and tokenized with one tokenizer call on the whole string,
so its tokens are the ones the tokenizer gives that text (no seams where pieces were joined). Its
length in tokens plus the generation budget is at most the length asked for (RULER's rule), and
within one filler sentence of it.

What is random (keys, values, depths, variable names, word counts) is drawn from
``numpy.random.default_rng((seed, task, index, length))``: the same arguments give the same prompt
on every machine, a resumed run asks the same questions, and every scaling is asked the same
prompts at a length (so two scalings can be compared prompt by prompt: a paired test).

The tasks:

- ``passkey`` (Mohtashami & Jaggi 2023): a five-digit key in one sentence at a random depth;
  scored 1 when the first number in the answer is the key, exactly, else 0.
- ``multikey`` (RULER's multi-key needle): four needles "one of the special numbers for KEY is:
  VALUE" under four different keys (word pairs), one asked for; the other three are distractors.
- ``multivalue`` (RULER's multi-value needle): four needles under one key, all four asked for.
- ``variables`` (RULER's variable tracking): a chain ``VAR A = 12345``, ``VAR B = VAR A``, ...
  (four hops) spread through the haystack; asked which variables hold the value.
- ``frequent`` (RULER's frequent-words extraction): coded words drawn with Zipf frequencies
  (exponent 2), the most frequent one a run of dots the question says to ignore; asked for the
  three most frequent words.

The four RULER-style tasks are scored as RULER scores them: the share of the expected strings that
appear in the answer, case-insensitively (:func:`recall`). The instructions, filler and word lists
are posenc's own sentences in the shape of the papers' prompts.
"""

from __future__ import annotations

import re
import string
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from posenc.core.checks import check_choice, check_int
from posenc.core.errors import PosencError

Tokenize = Callable[[str], list[int]]

#: The filler sentences of every haystack (one "unit": the haystack is this repeated).
FILLER = "The river runs to the sea. The hills are quiet. The wind is cool. Here we go. On and on it goes."
ADJECTIVES = ("amber", "bold", "brisk", "calm", "clever", "crimson", "dusty", "eager", "faint", "gentle",
              "golden", "hollow", "humble", "icy", "jolly", "keen", "lively", "lucky", "mellow", "misty",
              "noble", "odd", "pale", "proud", "quick", "quiet", "rapid", "rosy", "rusty", "silent",
              "silver", "sleepy", "sly", "swift", "tidy", "vivid", "wary", "wild", "witty", "young")  # fmt: skip
NOUNS = ("anchor", "badger", "basket", "beacon", "candle", "canyon", "cedar", "comet", "falcon", "feather",
         "garden", "harbor", "island", "kettle", "lantern", "meadow", "mirror", "needle", "orchard", "otter",
         "parcel", "pebble", "pepper", "puzzle", "quarry", "rabbit", "ribbon", "saddle", "shovel", "spider",
         "spruce", "thimble", "tunnel", "velvet", "violin", "walnut", "willow", "window", "wizard", "zebra")  # fmt: skip
NEEDLES = 4  # needles of the multi-key and multi-value tasks (RULER's 4)
HOPS = 4  # hops of the variable chain (RULER's 4)
ZIPF = 2.0  # the exponent of the frequent-words task (RULER's alpha 2)
PROBE = 64  # filler units of the prompt the tokens per unit are first estimated from


@dataclass(frozen=True)
class Draft:
    """What a prompt says, before its length is fitted: ``render(units)`` is its text with
    ``units`` filler units in the haystack (the needles at their depths)."""

    render: Callable[[int], str]
    expected: tuple[str, ...]
    depths: tuple[float, ...]


@dataclass(frozen=True)
class PromptTask:
    """One task: its name, paper, what it asks, how a prompt is drawn (``draft(rng, length)``),
    how an answer is scored (``score(generated, expected)``, 0 .. 1) and the greedy budget."""

    name: str
    paper: str
    asks: str
    draft: Callable[[np.random.Generator, int], Draft]
    score: Callable[[str, Sequence[str]], float]
    budget: int  # tokens generated greedily for an answer


@dataclass(frozen=True)
class Prompt:
    """One prompt: its text, its token ids (``prefix`` then the text, one tokenizer call), what a
    right answer holds, where its needles are (share of the haystack), and how it was drawn."""

    task: str
    text: str
    ids: tuple[int, ...]
    expected: tuple[str, ...]
    depths: tuple[float, ...]
    target: int  # the length asked for: len(ids) + budget <= target
    budget: int
    seed: int
    index: int

    @property
    def length(self) -> int:
        return len(self.ids)


def recall(generated: str, expected: Sequence[str]) -> float:
    """RULER's score of one answer: the share of ``expected`` found in ``generated`` (case-insensitive)."""
    if not expected:
        raise PosencError("recall: a prompt expects at least one string")
    found = generated.lower()
    return sum(item.lower() in found for item in expected) / len(expected)


def first_number(generated: str, expected: Sequence[str]) -> float:
    """The passkey's score: 1.0 when the first number in ``generated`` is the key exactly."""
    match = re.search(r"\d+", generated)
    return float(match is not None and match.group(0) == expected[0])


def _haystack(units: int, needles: Sequence[str], slots: Sequence[int]) -> str:
    """``units`` filler units with ``needles[i]`` placed before unit ``slots[i]`` (0 .. units)."""
    pieces: list[str] = []
    order = sorted(range(len(needles)), key=lambda i: slots[i])
    at = 0
    for i in order:
        pieces += [FILLER] * (slots[i] - at) + [needles[i]]
        at = slots[i]
    pieces += [FILLER] * (units - at)
    return " ".join(pieces)


def _placed(depths: Sequence[float], units: int) -> list[int]:
    return [round(depth * units) for depth in depths]


def _draft(
    head: str, needles: list[str], depths: list[float], question: str, expected: tuple[str, ...]
) -> Draft:
    def render(units: int) -> str:
        return f"{head}\n{_haystack(units, needles, _placed(depths, units))}\n{question}"

    return Draft(render, expected, tuple(depths))


def _number(rng: np.random.Generator, digits: int) -> str:
    return str(int(rng.integers(10 ** (digits - 1), 10**digits)))


def _words(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` different adjective-noun keys."""
    picks = rng.choice(len(ADJECTIVES) * len(NOUNS), size=count, replace=False)
    return [f"{ADJECTIVES[int(p) // len(NOUNS)]}-{NOUNS[int(p) % len(NOUNS)]}" for p in picks]


def _passkey(rng: np.random.Generator, length: int) -> Draft:
    key = _number(rng, 5)
    head = ("A pass key is hidden somewhere in the long text below. Find it and keep it in mind: "
            "you will be asked for it at the end.")  # fmt: skip
    needle = f"The pass key is {key}. Remember it. {key} is the pass key."
    return _draft(head, [needle], [float(rng.random())], "What is the pass key? The pass key is", (key,))


def _multikey(rng: np.random.Generator, length: int) -> Draft:
    keys = _words(rng, NEEDLES)
    values = [_number(rng, 7) for _ in keys]
    asked = int(rng.integers(NEEDLES))
    head = ("Special numbers are hidden in the text below, each under a name. Remember them: you will "
            "be asked for one of them.")  # fmt: skip
    needles = [f"One of the special numbers for {k} is: {v}." for k, v in zip(keys, values)]
    question = f"What is the special number for {keys[asked]}? The special number for {keys[asked]} is"
    return _draft(head, needles, [float(d) for d in rng.random(NEEDLES)], question, (values[asked],))


def _multivalue(rng: np.random.Generator, length: int) -> Draft:
    key = _words(rng, 1)[0]
    values = [_number(rng, 7) for _ in range(NEEDLES)]
    head = ("Special numbers are hidden in the text below, all under one name. Remember them: you will "
            "be asked for all of them.")  # fmt: skip
    needles = [f"One of the special numbers for {key} is: {v}." for v in values]
    question = f"What are all the special numbers for {key}? The special numbers for {key} are"
    return _draft(head, needles, [float(d) for d in rng.random(NEEDLES)], question, tuple(values))


def _variables(rng: np.random.Generator, length: int) -> Draft:
    names: list[str] = []
    while len(names) < HOPS + 1:
        name = "".join(rng.choice(list(string.ascii_uppercase), size=5))
        if name not in names:
            names.append(name)
    value = _number(rng, 5)
    needles = [f"VAR {names[0]} = {value}."] + [f"VAR {b} = VAR {a}." for a, b in zip(names, names[1:])]
    depths = sorted(float(d) for d in rng.random(len(needles)))  # the chain in order
    head = "Keep track of the chain of variable assignments hidden in the text below."
    question = (f"Question: which variables are assigned the value {value} in the text above? Answer: "
                f"following the chain of assignments, {len(names)} variables hold the value {value}, they are:")  # fmt: skip
    return _draft(head, needles, depths, question, tuple(names))


def _frequent(rng: np.random.Generator, length: int) -> Draft:
    """Coded words with Zipf counts; ``units`` is the number of words (the haystack is the words)."""
    vocabulary = max(8, length // 50)  # RULER's size: a word for every 50 tokens of the prompt
    words: list[str] = []
    while len(words) < vocabulary:
        word = "".join(rng.choice(list(string.ascii_lowercase), size=6))
        if word not in words:
            words.append(word)
    words[0] = "...."  # the most frequent is noise, as in RULER: the question says to ignore it
    shuffle_seed = int(rng.integers(2**31))
    weights = np.arange(1, vocabulary + 1, dtype=float) ** -ZIPF
    weights /= weights.sum()
    head = ("Read the coded text below and count how often each coded word appears. Find the three "
            "words that appear most often.")  # fmt: skip
    question = ("Question: ignore the dots '....'. What are the three most frequent words in the coded "
                "text above? Answer: the three most frequent words in the coded text are:")  # fmt: skip

    def render(units: int) -> str:
        counts = np.floor(units * weights).astype(int)
        text = [w for w, c in zip(words, counts) for _ in range(int(c))]
        np.random.default_rng(shuffle_seed).shuffle(text)
        return f"{head}\n{' '.join(text)}\n{question}"

    return Draft(render, tuple(words[1:4]), ())


TASKS: dict[str, PromptTask] = {
    task.name: task
    for task in (
        PromptTask(
            "passkey", "Mohtashami & Jaggi 2023", "a five-digit key in filler", _passkey, first_number, 8
        ),
        PromptTask(
            "multikey", "Hsieh et al. 2024 (RULER)", "one of four keyed numbers", _multikey, recall, 16
        ),
        PromptTask(
            "multivalue", "Hsieh et al. 2024 (RULER)", "all four numbers of one key", _multivalue, recall, 48
        ),
        PromptTask(
            "variables", "Hsieh et al. 2024 (RULER)", "a chain of five variables", _variables, recall, 32
        ),
        PromptTask(
            "frequent",
            "Hsieh et al. 2024 (RULER)",
            "the three most frequent coded words",
            _frequent,
            recall,
            24,
        ),
    )
}


def _fit(
    render: Callable[[int], str], tokenize: Tokenize, room: int, prefix: Sequence[int]
) -> tuple[int, list[int]]:
    """The most filler units whose prompt's tokens fit ``room``: a guess from the tokens of one
    unit, then whole prompts tokenized to bracket and bisect it (a handful of tokenizer calls)."""
    sizes: dict[int, list[int]] = {}

    def fits(units: int) -> bool:
        if units not in sizes:
            sizes[units] = list(prefix) + tokenize(render(units))
        return len(sizes[units]) <= room

    if not fits(0):
        return -1, sizes[0]
    guess = PROBE
    for _ in range(3):  # secant steps: the tokens per unit measured on the last guess
        fits(guess)
        per_unit = max(1e-3, (len(sizes[guess]) - len(sizes[0])) / max(1, guess))
        guess = max(0, int((room - len(sizes[0])) / per_unit))
    low, high, step = guess, guess, 1
    while fits(high):  # bracket: step up from the guess until a prompt no longer fits ...
        low, high, step = high, high + step, step * 2
    while not fits(low):  # ... or down until one does (0 fits)
        high, low, step = low, max(0, low - step), step * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low, sizes[low]


def generate(
    name: str, length: int, *, seed: int, index: int, tokenize: Tokenize, prefix: Sequence[int] = ()
) -> Prompt:
    """Prompt ``index`` of task ``name`` at ``length`` tokens (prompt and generation budget together)."""
    task = TASKS[check_choice("task", name, tuple(TASKS))]
    check_int("length", length, minimum=1)
    check_int("seed", seed, minimum=0)
    check_int("index", index, minimum=0)
    rng = np.random.default_rng((seed, zlib.crc32(name.encode()), index, length))
    draft = task.draft(rng, length)
    units, ids = _fit(draft.render, tokenize, length - task.budget, prefix)
    if units < 1:  # the fewest tokens it takes: the prompt with one unit of filler, and its answer
        least = len(prefix) + len(tokenize(draft.render(1))) + task.budget
        raise PosencError(
            f"length {length} is too short for a {name} prompt: it needs {least} tokens or more "
            "(its instruction, its needles in some filler, the question and the answer)"
        )
    depths = tuple(p / units for p in _placed(draft.depths, units))
    return Prompt(
        name, draft.render(units), tuple(ids), draft.expected, depths, length, task.budget, seed, index
    )


def prompts(
    name: str, length: int, count: int, *, seed: int, tokenize: Tokenize, prefix: Sequence[int] = ()
) -> tuple[Prompt, ...]:
    """``count`` prompts of task ``name`` at ``length`` (indices 0 .. count - 1)."""
    check_int("prompts", count, minimum=1)
    return tuple(
        generate(name, length, seed=seed, index=i, tokenize=tokenize, prefix=prefix) for i in range(count)
    )


def score(prompt: Prompt, generated: str) -> float:
    """The task's score of ``generated`` as the answer to ``prompt`` (0 .. 1)."""
    return TASKS[prompt.task].score(generated, prompt.expected)


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids ``a`` and ``b`` share (what a KV cache can carry from one to the other)."""
    n = min(len(a), len(b))
    same = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(same[0]) if same.size else n


def prefill_order(items: Sequence[Prompt]) -> list[tuple[Prompt, int]]:
    """The prompts in the order that shares the most prefill through one KV cache (their token ids
    sorted), each with the tokens it shares with the one before it: a runner cuts the cache back to
    that many tokens (:meth:`transformers.Cache.crop`) and feeds the rest."""
    ordered = sorted(items, key=lambda p: p.ids)
    out: list[tuple[Prompt, int]] = []
    for i, prompt in enumerate(ordered):
        out.append((prompt, shared_prefix(ordered[i - 1].ids, prompt.ids) if i else 0))
    return out


__all__ = [
    "FILLER",
    "TASKS",
    "Draft",
    "Prompt",
    "PromptTask",
    "first_number",
    "generate",
    "prefill_order",
    "prompts",
    "recall",
    "score",
    "shared_prefix",
]
