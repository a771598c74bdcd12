"""The contenders of the speed races (:mod:`speed`): zero-argument callables over tensors made once.

Axis legend: b batch, h heads, n / i / j sequence, d head_dim, D d_model, V vocab.

Each ``*_cases`` function returns ``{name: callable | "skipped: reason"}``; a peer that is not
installed (or fails to build) is reported as skipped, never dropped. Peers are imported
here only (benchmark-only extras, ``pip install posenc[peers]``):

- Hugging Face ``transformers.models.llama.modeling_llama.apply_rotary_pos_emb`` (cos/sin
  precomputed once, as its model does per forward);
- ``rotary_embedding_torch.RotaryEmbedding.rotate_queries_or_keys`` (its own cache);
- x-transformers ``apply_rotary_pos_emb`` (freqs precomputed), ``AlibiPositionalBias`` /
  ``RelativePositionBias`` + ``Attend``, ``TransformerWrapper(Decoder(...))``;
- torchtune ``RotaryPositionalEmbeddings`` (interleaved, ``(b, n, h, d)``).

- Hugging Face ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` for a decode step (cos/sin
  from the position ids, then the rotation, as a Llama layer does per token).

The rooflines are a copy of the same bytes on the same tensors (``clone`` of q and k:
one read and one write, what a rotation must move at least; ``x * 1`` through autograd
for forward + backward) and, for attention, unbiased causal SDPA (forward, or forward +
backward).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F

import posenc
from posenc.core.checks import compute_dtype
from posenc.core.positions import Positions
from posenc.encoding.base import BiasEncoding
from posenc.encoding.rotary.rope import RoPE, apply_rotary
from posenc.kernels import fused_rope as rope_kernel
from posenc.kernels.bias_attention import bias_attention
from posenc.kernels.fused_rope import apply_rotary_fused
from posenc.nn.attention import KVCache, MultiHeadAttention
from posenc.nn.transformer import Transformer, TransformerConfig
from posenc.records.spec import ModelSpec

Case = Callable[[], object] | str
POSENC_EAGER = "posenc rotate"
#: Where the rope and bias contenders' tensors and modules live (``run_speed.py --device``); the decode
#: and training cases stay on the CPU.
DEVICE = torch.device("cpu")


def _skip(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return f"skipped: not installed ({getattr(exc, 'name', None) or exc})"
    return f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


def _inputs(shape, dtype, *, seed: int, grad: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(DEVICE, dtype).requires_grad_(grad)


# ---------------------------------------------------------------------------
# RoPE application.
# ---------------------------------------------------------------------------


def rope_cases(b: int, h: int, n: int, d: int, dtype: torch.dtype, *, backward: bool) -> dict[str, Case]:
    """Rotate q and k ``(b, h, n, d)`` (forward, or forward + backward with fixed grads)."""
    q = _inputs((b, h, n, d), dtype, seed=1, grad=backward)
    k = _inputs((b, h, n, d), dtype, seed=2, grad=backward)
    gq, gk = (
        _inputs((b, h, n, d), dtype, seed=3, grad=False),
        _inputs((b, h, n, d), dtype, seed=4, grad=False),
    )

    def wrap(fn: Callable) -> Callable[[], object]:
        if not backward:
            return lambda: fn(q, k)

        def step():
            q.grad = k.grad = None
            qo, ko = fn(q, k)
            torch.autograd.backward((qo, ko), (gq, gk))

        return step

    cases: dict[str, Case] = {}
    if backward:  # x * 1 forward and backward: one read and one write each way, through autograd
        cases["roofline (copy)"] = wrap(lambda x, y: (x * 1, y * 1))
    else:
        cases["roofline (copy)"] = lambda: (q.clone(), k.clone())

    enc = cast(RoPE, posenc.build("rope", head_dim=d))
    cases["posenc rotate"] = wrap(lambda x, y: enc.rotate(x, y))
    wide = compute_dtype(dtype)
    cos, sin = enc.cos_sin(
        torch.arange(n, device=DEVICE)[None], wide
    )  # (1, n, d/2), as a model computes once
    cos, sin = cos[:, None], sin[:, None]  # (1, 1, n, d/2)

    def fused(x, y):
        return (apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=d),
                apply_rotary_fused(y, cos, sin, layout="half", rotary_dim=d))  # fmt: skip

    def plain(x, y):
        return tuple(
            apply_rotary(t.to(wide), cos, sin, layout="half", rotary_dim=d).to(dtype) for t in (x, y)
        )

    cases["posenc fused (tables given)"] = wrap(fused)
    cases["posenc plain (reference)"] = wrap(plain)

    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_apply

        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv  # (n, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)[None]  # (1, n, d), as LlamaRotaryEmbedding
        hf_cos, hf_sin = emb.cos().to(DEVICE, dtype), emb.sin().to(DEVICE, dtype)
        cases["hf transformers"] = wrap(lambda x, y: hf_apply(x, y, hf_cos, hf_sin))
    except Exception as exc:  # noqa: BLE001 - any import/build failure is a skip
        cases["hf transformers"] = _skip(exc)

    try:
        from rotary_embedding_torch import RotaryEmbedding

        ret = RotaryEmbedding(dim=d).to(DEVICE)
        cases["rotary-embedding-torch"] = wrap(
            lambda x, y: (ret.rotate_queries_or_keys(x), ret.rotate_queries_or_keys(y))
        )
    except Exception as exc:  # noqa: BLE001
        cases["rotary-embedding-torch"] = _skip(exc)

    try:
        from x_transformers.x_transformers import RotaryEmbedding as XRotary
        from x_transformers.x_transformers import apply_rotary_pos_emb as x_apply

        xfreqs, xscale = XRotary(d).to(DEVICE)(torch.arange(n, device=DEVICE))
        cases["x-transformers"] = wrap(lambda x, y: (x_apply(x, xfreqs, xscale), x_apply(y, xfreqs, xscale)))
    except Exception as exc:  # noqa: BLE001
        cases["x-transformers"] = _skip(exc)

    try:
        from torchtune.modules import RotaryPositionalEmbeddings

        tt = RotaryPositionalEmbeddings(dim=d, max_seq_len=n).to(DEVICE)
        cases["torchtune"] = wrap(
            lambda x, y: (tt(x.transpose(1, 2)).transpose(1, 2), tt(y.transpose(1, 2)).transpose(1, 2))
        )
    except Exception as exc:  # noqa: BLE001
        cases["torchtune"] = _skip(exc)
    return cases


def _inductor_corrupts_the_heap() -> bool:
    """torch 2.13's inductor, generating AVX-512 code, corrupts the heap compiling two of the race's
    graphs on a 2-core AMD EPYC: the traced plain rotation of (1, 32, 2048, 128) float32 (5 of 5 speed
    races) and the training step of the benchmark model with RoPE on 32 x 18 tokens ("free(): invalid
    size", a segmentation fault: 3 of 3 loops of 60 steps, with posenc's kernel as AVX-512 or AVX2 code or
    disabled, and 2 of 2 races). With inductor's AVX2 code (ATEN_CPU_CAPABILITY=avx2: 0 of 4 races, 0 of
    1 loops) or torch 2.15 (0 of 1 race, 0 of 1 loops) neither crashed."""
    return (
        DEVICE.type == "cpu"
        and torch.__version__.startswith("2.13.")
        and torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    )


#: What a contender skipped by :func:`_inductor_corrupts_the_heap` says.
HEAP_BUG = "skipped: torch 2.13's inductor corrupts the heap compiling this graph with AVX-512 code"


def compiled_rope_cases(b: int, h: int, n: int, d: int, dtype: torch.dtype) -> dict[str, Case]:
    """``torch.compile(rotate)`` with the C kernel as a custom op vs the plain path traced and
    fused by inductor (forward); compile time is paid in the warm-up call, not timed."""
    q = _inputs((b, h, n, d), dtype, seed=1, grad=False)
    k = _inputs((b, h, n, d), dtype, seed=2, grad=False)
    cases: dict[str, Case] = {"roofline (copy)": lambda: (q.clone(), k.clone())}
    enc = cast(RoPE, posenc.build("rope", head_dim=d))
    cases[POSENC_EAGER] = lambda: enc.rotate(q, k)
    for path in ("op", "plain"):
        if path == "plain" and _inductor_corrupts_the_heap():
            cases["compiled: traced plain path"] = (
                f"{HEAP_BUG} (posenc's default under compile on a CPU is the custom op)"
            )
            continue

        def make(path=path):
            compiled = torch.compile(lambda x, y: enc.rotate(x, y), fullgraph=True, dynamic=False)

            def call():
                previous, rope_kernel.COMPILED_PATH = rope_kernel.COMPILED_PATH, path
                try:
                    return compiled(q, k)
                finally:
                    rope_kernel.COMPILED_PATH = previous

            return call

        cases[f"compiled: {'custom op' if path == 'op' else 'traced plain path'}"] = make()
    return cases


# ---------------------------------------------------------------------------
# Decoding one token.
# ---------------------------------------------------------------------------


def rope_decode_cases(h: int, d: int, position: int = 1000) -> dict[str, Case]:
    """One token ``(1, h, 1, d)`` through the rotary hook, as a decode step does."""
    q = _inputs((1, h, 1, d), torch.float32, seed=1, grad=False)
    k = _inputs((1, h, 1, d), torch.float32, seed=2, grad=False)
    pos = torch.tensor([[position]])
    trusted = Positions.arange(1, start=position)
    enc = cast(RoPE, posenc.build("rope", head_dim=d))
    enc.rotate(q, k, q_positions=pos, k_positions=pos)  # tables built outside the timing
    cases: dict[str, Case] = {
        "posenc rotate (checked positions)": lambda: enc.rotate(q, k, q_positions=pos, k_positions=pos),
        "posenc rotate (attention's positions)": lambda: enc.rotate(
            q, k, q_positions=trusted, k_positions=trusted
        ),
    }
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

        rotary = LlamaRotaryEmbedding(LlamaConfig(hidden_size=h * d, num_attention_heads=h, head_dim=d))

        def hf():  # what a Llama layer does per step: cos/sin for the position ids, then rotate
            cos, sin = rotary(q, pos)
            return apply_rotary_pos_emb(q, k, cos, sin)

        cases["hf transformers"] = hf
    except Exception as exc:  # noqa: BLE001
        cases["hf transformers"] = _skip(exc)
    return cases


def attention_decode_cases(
    d_model: int, heads: int, cached: int, encodings: dict[str, dict | None], *, alternate: bool = False
) -> dict[str, Case]:
    """One token through :class:`MultiHeadAttention` with a KV cache of ``cached`` tokens, per
    encoding (label -> build arguments for ``posenc.build_for_model``; None = no encoding).

    After each step the cache is cut back, so every call decodes at the same length;
    ``alternate`` cuts it back to ``cached`` and ``cached - 1`` in turn, so the largest position
    changes every call, as it does in a real decode (length-dependent scalings then see new
    frequencies every step, as they would)."""
    x = _inputs((1, 1, d_model), torch.float32, seed=1, grad=False)
    prefix = _inputs((1, cached, d_model), torch.float32, seed=2, grad=False)
    cases: dict[str, Case] = {}
    for label, spec in encodings.items():
        enc = None if spec is None else posenc.build_for_model(d_model=d_model, num_heads=heads, **spec)
        torch.manual_seed(0)
        module = MultiHeadAttention(d_model, heads, encoding=enc).eval()
        cache = KVCache()
        with torch.no_grad():
            module(prefix, cache=cache)

        lengths = [cached - 1, cached] if alternate else [cached]

        def step(module=module, cache=cache, lengths=lengths):
            with torch.no_grad():
                out = module(x, cache=cache)
            lengths.append(lengths.pop(0))
            cache.truncate(lengths[0])  # the next call decodes at this length
            return out

        lengths.reverse()  # the prefill left `cached` tokens: the first step cuts back to the other
        step()  # the first step may (re)build tables and rotate the cache
        cases[label] = step
    return cases


# ---------------------------------------------------------------------------
# Attention with a bias encoding.
# ---------------------------------------------------------------------------

X_BIAS = {"alibi": "alibi", "t5": "t5"}  # encodings x-transformers has


def bias_cases(
    name: str,
    b: int,
    h: int,
    n: int,
    d: int,
    dtype: torch.dtype,
    *,
    flex: bool = False,
    backward: bool = False,
) -> dict[str, Case]:
    """Causal self-attention over q, k, v ``(b, h, n, d)`` with bias encoding ``name``: forward,
    or forward + backward into q, k, v and the encoding's parameters (``backward``)."""
    q, k, v = (_inputs((b, h, n, d), dtype, seed=s, grad=backward) for s in (1, 2, 3))
    grad = _inputs((b, h, n, d), dtype, seed=4, grad=False)
    enc = posenc.build_for_model(name, d_model=h * d, num_heads=h).to(DEVICE)
    enc.requires_grad_(backward)

    def wrap(fn: Callable[[], torch.Tensor]) -> Callable[[], object]:
        if not backward:
            return fn

        def step():
            for t in (q, k, v, *enc.parameters()):
                t.grad = None
            fn().backward(grad)

        return step

    cases: dict[str, Case] = {
        "sdpa unbiased (floor)": wrap(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    }

    def dense():
        bias = (
            cast(BiasEncoding, enc).bias(n, n, device=q.device).to(dtype)
        )  # (1, h, i, j), as the dense path
        future = torch.ones(n, n, dtype=torch.bool, device=DEVICE).triu(1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(future, float("-inf")))

    cases["sdpa + dense bias"] = wrap(dense)
    cases["posenc chunked"] = wrap(lambda: bias_attention(q, k, v, enc, causal=True, path="chunked"))
    if (
        DEVICE.type != "cpu"
    ):  # what attention runs there: the path measured fastest (posenc.kernels.bias_paths)
        cases["posenc auto (measured path)"] = wrap(lambda: bias_attention(q, k, v, enc, causal=True))
    if flex and (not backward or DEVICE.type == "cuda"):  # FlexAttention has a backward on CUDA only
        cases["posenc flex"] = wrap(lambda: bias_attention(q, k, v, enc, causal=True, path="flex"))
    if backward:
        return cases
    if name not in X_BIAS:
        cases["x-transformers"] = f"skipped: x-transformers has no {name!r} bias"
        return cases
    try:
        from x_transformers.attend import Attend
        from x_transformers.x_transformers import AlibiPositionalBias, RelativePositionBias

        if name == "alibi":
            rel = AlibiPositionalBias(heads=h, total_heads=h)
        else:
            rel = RelativePositionBias(scale=d**0.5, causal=True, heads=h)
        rel.to(DEVICE).requires_grad_(False)
        attend = Attend(causal=True, heads=h).to(DEVICE)

        def x_attention():
            out, _ = attend(q, k, v, attn_bias=rel(n, n))
            return out

        cases["x-transformers"] = x_attention
    except Exception as exc:  # noqa: BLE001
        cases["x-transformers"] = _skip(exc)
    return cases


# ---------------------------------------------------------------------------
# One training step of the tiny model.
# ---------------------------------------------------------------------------

X_DECODER = {
    "rope": {"rotary_pos_emb": True},
    "xpos": {"rotary_pos_emb": True, "rotary_xpos": True},
    "alibi": {"alibi_pos_bias": True},
    "t5": {"rel_pos_bias": True},
}
TINY = ModelSpec()  # the benchmark's model (posenc compare): 3 layers, d_model 64, 4 heads
VOCAB = 64
POSENC_COMPILED = "posenc compiled"


def train_cases(name: str, b: int, n: int, *, compiled: bool = True) -> dict[str, Case]:
    """AdamW step (forward, loss, backward, update) of the benchmark's decoder on ``(b, n)`` tokens:
    posenc eager, posenc with ``torch.compile`` (compiled in the warm-up call, not timed; the
    seconds it took are reported), and x-transformers at the same configuration."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (b, n + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def stepper(model: torch.nn.Module, forward: Callable | None = None) -> Callable[[], object]:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        run = model if forward is None else forward  # a compiled module has no truth value

        def step():
            opt.zero_grad(set_to_none=True)
            logits = run(x)  # (b, n, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        return step

    def model() -> Transformer:
        torch.manual_seed(0)
        config = TransformerConfig(
            vocab_size=VOCAB, d_model=TINY.d_model, num_heads=TINY.num_heads, num_layers=TINY.num_layers,
            ffn_dim=TINY.ffn_dim, encoding=name,
        )  # fmt: skip
        return Transformer(config)

    cases: dict[str, Case] = {}
    try:
        cases["posenc"] = stepper(model())
        if compiled and _inductor_corrupts_the_heap():
            cases[POSENC_COMPILED] = HEAP_BUG
        elif compiled:
            eager = model()
            cases[POSENC_COMPILED] = stepper(eager, torch.compile(eager))
    except Exception as exc:  # noqa: BLE001
        cases["posenc"] = _skip(exc)
    if name not in X_DECODER:
        cases["x-transformers"] = f"skipped: no x-transformers equivalent of {name!r}"
        return cases
    try:
        from x_transformers import Decoder, TransformerWrapper

        xmodel = TransformerWrapper(
            num_tokens=VOCAB, max_seq_len=n, use_abs_pos_emb=False,
            attn_layers=Decoder(dim=TINY.d_model, depth=TINY.num_layers, heads=TINY.num_heads,
                                ff_mult=TINY.ffn_dim // TINY.d_model, **X_DECODER[name]),
        )  # fmt: skip
        cases["x-transformers"] = stepper(xmodel)
    except Exception as exc:  # noqa: BLE001
        cases["x-transformers"] = _skip(exc)
    return cases
