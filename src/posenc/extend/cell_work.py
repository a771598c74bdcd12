"""One cell of the grid, run in a worker: :func:`execute` (``ExtendCell -> payload``).

The worker loads the checkpoint once per process (weights only), gives it posenc's RoPE with
:func:`posenc.hf.apply` and, for each cell, the cell's scaling with
:meth:`posenc.hf.Applied.set_scaling`, so every rotary table the model uses is posenc's. Long
sequences go through the model in chunks that extend the KV cache (chunked prefill): the
same logits as one pass, a fraction of the activation memory, and a cache the retrieval prompts
of a cell share: each prompt is fed after what it shares with the one before it (the cache cut
back to that with :meth:`transformers.Cache.crop`), and answered greedily up to its task's budget
or the end-of-text token. Nothing here draws random numbers: generation is greedy. On a CUDA
device the peak memory of each cell is measured (``torch.cuda.max_memory_allocated``) and recorded
with its timing.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from typing import Any

import torch

import posenc.extend.haystacks as hs
from posenc.compare.device import describe
from posenc.extend.budget import Shape
from posenc.extend.checkpoint import Checkpoint, load
from posenc.extend.plan import ExtendCell
from posenc.hf.model import apply as hf_apply
from posenc.hf.model import text_config

Advance = Callable[..., None]
_LOADED: dict[tuple[str, str, str, bool, str], tuple[Any, Any, Any, Shape]] = {}  # per process


def _noop(units: int, status: Any = None) -> None:
    pass


def loaded(cell: ExtendCell) -> tuple[Any, Any, Any, Shape]:
    """``(model, handle, tokenizer, shape)`` of the cell's checkpoint, loaded once per process."""
    key = (cell.model, cell.device, cell.precision, cell.trust_remote_code, cell.attention_kernel)
    if key not in _LOADED:
        _LOADED.clear()  # one checkpoint at a time in a worker
        checkpoint = Checkpoint(cell.model, cell.model, "", {}, cell.trust_remote_code)
        model, tokenizer = load(checkpoint, device=cell.device, precision=cell.precision,
                                attention=cell.attention_kernel)  # fmt: skip
        handle = hf_apply(model)
        config = text_config(model)
        shape = Shape.of(config, sum(p.numel() for p in model.parameters()))
        _LOADED[key] = (model, handle, tokenizer, shape)
    return _LOADED[key]


def new_cache(model: Any) -> Any:
    import transformers

    try:
        return transformers.DynamicCache(config=model.config)
    except TypeError:  # releases whose DynamicCache takes no config
        return transformers.DynamicCache()


def _cache_keyword(model: Any) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def crop(cache: Any, length: int) -> bool:
    """Cut the cache back to its first ``length`` tokens; False when this cache cannot be cut back
    (sliding-window layers past their window). A negative argument removes that many tokens in
    every transformers 5 release (the positive one changed meaning)."""
    extra = cache.get_seq_length() - length
    if extra <= 0:
        return True
    try:
        cache.crop(-extra)
    except (RuntimeError, ValueError):
        return False
    return cache.get_seq_length() == length


class Runner:
    """Chunked forward passes of one model through one KV cache."""

    def __init__(self, model: Any, shape: Shape, chunk: int, advance: Advance) -> None:
        self.model = model
        self.shape = shape
        self.chunk = chunk
        self.advance = advance
        self.keyword = _cache_keyword(model)
        # transformers' documented way to compute the output layer for the last position only
        # (what its generate does on a prompt): a retrieval prompt needs no other logits
        self.last_only = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.device = next(model.parameters()).device
        self.done = 0.0  # FLOPs not reported yet

    def forward(self, cache: Any, ids: list[int] | tuple[int, ...], on_logits=None) -> torch.Tensor:
        """Feed ``ids`` after what ``cache`` holds; ``on_logits(start, logits)`` per chunk (start:
        the chunk's first position). Returns the last position's logits (float32)."""
        last = None
        options: dict[str, Any] = {self.keyword: cache}
        if on_logits is None and self.last_only:
            options["logits_to_keep"] = 1
        for offset in range(0, len(ids), self.chunk):
            part = torch.tensor([ids[offset : offset + self.chunk]], dtype=torch.long, device=self.device)
            start = cache.get_seq_length()
            with torch.inference_mode():
                out = self.model(input_ids=part, use_cache=True, **options)
            logits = out.logits[0]
            if on_logits is not None:
                on_logits(start, logits)
            last = logits[-1].float()
            self._report(start, start + part.shape[1], on_logits is not None)
        assert last is not None
        return last

    def _report(self, start: int, stop: int, logits: bool) -> None:
        self.done += self.shape.flops(start, stop, logits=logits or not self.last_only) / 1e9
        whole = int(self.done)
        if whole:
            self.advance(whole)
            self.done -= whole


def text_nll(runner: Runner, model: Any, tokens: tuple[int, ...]) -> list[float]:
    """Negative log-likelihood (nats) of tokens ``1 .. n-1``, each given all before it."""
    target = torch.tensor(tokens, dtype=torch.long, device=runner.device)
    nll = torch.empty(len(tokens) - 1, dtype=torch.float64)

    def take(start: int, logits: torch.Tensor) -> None:
        stop = min(start + logits.shape[0], len(tokens) - 1)
        if stop <= start:
            return
        scores = torch.nn.functional.cross_entropy(
            logits[: stop - start].float(), target[start + 1 : stop + 1], reduction="none"
        )
        nll[start:stop] = scores.double().cpu()

    runner.forward(new_cache(model), tokens, take)
    return [round(float(x), 5) for x in nll]


def prompt_answers(runner: Runner, model: Any, tokenizer: Any, cell: ExtendCell) -> list[dict[str, Any]]:
    """Greedy answers to the cell's prompts, fed in order through one KV cache: each after the
    tokens it shares with the one before (the cache cut back to them), its answer up to its budget
    or the end-of-text token; scored as its task scores (:func:`posenc.extend.haystacks.TASKS`)."""
    task = hs.TASKS[cell.task]
    stop = {tokenizer.eos_token_id} - {None}
    cache = new_cache(model)
    answers = []
    for question in cell.questions:
        keep = min(question.shared, len(question.ids) - 1)  # at least one token fed: its logits answer
        if not crop(cache, keep):  # a cache that cannot be cut back: this prompt from the start
            cache, keep = new_cache(model), 0
        logits = runner.forward(cache, question.ids[keep:])
        generated: list[int] = []
        while True:
            token = int(logits.argmax())
            if token in stop:
                break
            generated.append(token)
            if len(generated) == question.budget:
                break
            logits = runner.forward(cache, [token])
        text = tokenizer.decode(generated, skip_special_tokens=True)
        score = float(task.score(text, question.expected))
        answers.append({"index": question.index, "generated": text, "score": round(score, 6),
                        "correct": score == 1.0})  # fmt: skip
    return answers


#: The name the passkey's answers had when the passkey was the only retrieval task (it is one of
#: :data:`posenc.extend.haystacks.TASKS` now): the same call, kept for one release.
passkey_answers = prompt_answers


def execute(cell: ExtendCell, advance: Advance = _noop) -> dict[str, Any]:
    """Run one cell; the payload of its record."""
    torch.set_num_threads(max(1, cell.threads))
    start = time.perf_counter()
    model, handle, tokenizer, shape = loaded(cell)
    cuda = cell.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(torch.device(cell.device))
    handle.set_scaling(json.loads(cell.scaling))
    runner = Runner(model, shape, cell.chunk, advance)
    payload: dict[str, Any] = {}
    if cell.kind == "text":
        payload["nll"] = text_nll(runner, model, cell.tokens)
    else:
        payload["answers"] = prompt_answers(runner, model, tokenizer, cell)
    payload["timing"] = {
        "wall_seconds": round(time.perf_counter() - start, 2),
        "threads": torch.get_num_threads(),
        "device": describe(cell.device),
    }
    if cuda:  # measured, not estimated: what the cell's passes held at their peak
        payload["timing"]["peak_memory_gib"] = round(
            torch.cuda.max_memory_allocated(torch.device(cell.device)) / 2**30, 3
        )
    return payload


__all__ = ["Runner", "crop", "execute", "loaded", "new_cache", "prompt_answers", "text_nll"]
