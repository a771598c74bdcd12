"""Does posenc stand in for a transformers model exactly? The checks behind docs/hf-support.md.

Each check builds fresh models with ``make()`` (random weights from a config: nothing is
downloaded), runs the model's own code and the model after :func:`posenc.hf.apply` with the
model's own RoPE, and compares:

=============  ================================================================================
check          passes when
=============  ================================================================================
logits         the logits equal the model's own within 1e-5 (a 40-token batch of 2)
generate       greedy generation gives the model's own tokens, with the KV cache and without
left_padding   the same with a left-padded row (``attention_mask``, positions from it)
remove         after ``remove()`` the logits are bit-identical to the model's own again
compile        ``torch.compile(model, fullgraph=True)`` of the applied model equals it in eager
=============  ================================================================================

``tests/hf/test_hf_models.py`` runs every check for every family of
:data:`posenc.hf.families.FAMILIES`, and ``scripts/hf_support.py`` writes the table of
docs/hf-support.md from a run of them. :func:`check` runs them on any model factory, e.g.
one loading a user's own checkpoint.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from posenc.core.errors import PosencError
from posenc.hf.families import FAMILIES, family_available, family_of
from posenc.hf.model import apply, remove, text_config

CHECKS = ("logits", "generate", "left_padding", "remove", "compile")
TOLERANCE = 1e-5  # logits: max |posenc - transformers| (float32, random weights)
VOCAB_LOW = 3  # token ids drawn from [3, vocab): pad 0, bos 1, eos 2 stay out of prompts


@dataclass(frozen=True)
class Result:
    """One check on one model: passed, and the number it was judged by."""

    check: str
    passed: bool
    error: float | None = None  # max abs logit difference (logits, compile, remove)
    detail: str = ""
    applicable: bool = True  # False: transformers' own model fails it (or the family needs a newer release)

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "passed": self.passed, "error": self.error, "detail": self.detail,
                "applicable": self.applicable}  # fmt: skip


def small_model(model_type: str, **overrides: Any) -> nn.Module:
    """A small random-weight causal LM of a verified family (``overrides`` go to its config)."""
    import transformers

    family = FAMILIES.get(model_type)
    if family is None:
        raise PosencError(f"model_type must be one of {sorted(FAMILIES)}, got {model_type!r}")
    config = getattr(transformers, family.config_class)(**family.small_config(**overrides))
    torch.manual_seed(0)
    return getattr(transformers, family.model_class)(config).eval()


def _tokens(vocab: int, batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(VOCAB_LOW, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _logits(model: nn.Module, ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """The logits (the last hidden states of a base model without a language-model head)."""
    with torch.no_grad():
        out = model(ids, **kwargs)
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def _vocab(model: nn.Module) -> int:
    return int(text_config(model).vocab_size)


def _difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _generate(model: nn.Module, prompt: torch.Tensor, mask: torch.Tensor, use_cache: bool) -> torch.Tensor:
    with torch.no_grad():
        return cast(Any, model).generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=0,
            use_cache=use_cache,
        )


def check_logits(make: Callable[[], nn.Module], **apply_kwargs: Any) -> Result:
    model = make()
    ids = _tokens(_vocab(model), 2, 40, seed=1)
    want = _logits(model, ids)
    apply(model, **apply_kwargs)
    error = _difference(_logits(model, ids), want)
    return Result("logits", error <= TOLERANCE, error)


def _check_generation(name: str, make: Callable[[], nn.Module], padded: int) -> Result:
    model = make()
    if not callable(getattr(model, "can_generate", None)) or not cast(Any, model).can_generate():
        return Result(name, False, detail="a base model without a language-model head", applicable=False)
    prompt = _tokens(_vocab(model), 2, 6, seed=2)
    mask = torch.ones_like(prompt)
    mask[1, :padded] = 0
    prompt = prompt.masked_fill(mask == 0, 0)
    want = {cache: _generate(model, prompt, mask, cache) for cache in (True, False)}
    apply(model)
    got = {cache: _generate(model, prompt, mask, cache) for cache in (True, False)}
    same = {cache: torch.equal(got[cache], want[cache]) for cache in (True, False)}
    detail = ", ".join(
        f"{'cache' if c else 'no cache'}: {'same' if s else 'different'}" for c, s in same.items()
    )
    return Result(name, all(same.values()), detail=detail)


def check_generate(make: Callable[[], nn.Module]) -> Result:
    return _check_generation("generate", make, padded=0)


def check_left_padding(make: Callable[[], nn.Module]) -> Result:
    return _check_generation("left_padding", make, padded=2)


def check_remove(make: Callable[[], nn.Module]) -> Result:
    model = make()
    ids = _tokens(_vocab(model), 2, 40, seed=3)
    want = _logits(model, ids)
    before = {name: type(module) for name, module in model.named_modules()}
    apply(model, "alibi" if _takes_bias(model) else None)
    apply(model)  # applying again replaces the first application
    remove(model)
    after = {name: type(module) for name, module in model.named_modules()}
    error = _difference(_logits(model, ids), want)
    hooks = sum(len(m._forward_pre_hooks) for m in model.modules())
    passed = error == 0.0 and after == before and hooks == 0
    return Result("remove", passed, error, detail="" if after == before else "modules differ after remove")


def _takes_bias(model: nn.Module) -> bool:
    _, family = family_of(cast(Any, model).config, type(model).__name__)
    return not family.no_bias and getattr(text_config(model), "attn_logit_softcapping", None) is None


def _compiled_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    torch._dynamo.reset()
    return _logits(cast(nn.Module, torch.compile(model, fullgraph=True)), ids)


def check_compile(make: Callable[[], nn.Module]) -> Result:
    model = make()
    ids = _tokens(_vocab(model), 2, 24, seed=4)
    apply(model)
    eager = _logits(model, ids)
    try:
        error = _difference(_compiled_logits(model, ids), eager)
    except Exception as exc:
        try:  # is it posenc, or does transformers' own model not compile either?
            _compiled_logits(make(), ids)
        except Exception as own:
            detail = f"transformers' own model does not compile either: {type(own).__name__}: {own}"
            return Result("compile", False, detail=detail.splitlines()[0], applicable=False)
        raise exc
    return Result("compile", error <= TOLERANCE, error)


RUNNERS: dict[str, Callable[[Callable[[], nn.Module]], Result]] = {
    "logits": check_logits,
    "generate": check_generate,
    "left_padding": check_left_padding,
    "remove": check_remove,
    "compile": check_compile,
}


def check(make: Callable[[], nn.Module], checks: tuple[str, ...] = CHECKS) -> list[Result]:
    """Run ``checks`` on models from ``make()`` (a fresh model per check); a check that raises
    fails with the error as its detail."""
    results = []
    for name in checks:
        if name not in RUNNERS:
            raise PosencError(f"checks must be among {list(CHECKS)}, got {name!r}")
        try:
            results.append(RUNNERS[name](make))
        except Exception as exc:  # a failed check is a result, reported with its cause
            results.append(Result(name, False, detail=f"{type(exc).__name__}: {exc}".splitlines()[0]))
    return results


def check_family(model_type: str, checks: tuple[str, ...] = CHECKS) -> list[Result]:
    """:func:`check` on small models of a verified family (not applicable where the installed
    transformers predates the family's seam: :attr:`Family.since`)."""
    if not family_available(model_type):
        detail = f"needs transformers {FAMILIES[model_type].since}"
        return [Result(name, False, detail=detail, applicable=False) for name in checks]
    return check(lambda: copy.deepcopy(_cached(model_type)), checks)


_MODELS: dict[str, nn.Module] = {}


def _cached(model_type: str) -> nn.Module:
    if model_type not in _MODELS:
        _MODELS[model_type] = small_model(model_type)
    return _MODELS[model_type]


__all__ = ["CHECKS", "RUNNERS", "Result", "check", "check_family", "small_model"]
