"""``torch.compile(fullgraph=True)``: every registered encoding's hook, MultiHeadAttention and the
Transformer compile without a graph break and equal eager, forward and backward.

Most cases trace with the ``aot_eager`` backend: dynamo must capture one whole graph (no
``.item()``, nothing data-dependent) and AOTAutograd must trace forward and backward with fake
tensors (the rotary custom op's fake implementation and autograd included), without paying
for inductor's C++ code generation. A few cases also run through ``inductor``, the default
backend, end to end. Shapes are tiny; the speed of compiled code is measured by the speed races (benchmarks/run_speed.py).
"""

from __future__ import annotations

import pytest
import torch
from tests import hooks
from tests.tolerances import tol

import posenc
from posenc.kernels import fused_rope as rope
from posenc.nn.attention import MultiHeadAttention
from posenc.nn.transformer import Transformer, TransformerConfig

NAMES = list(posenc.ENCODINGS)
TRACE = "aot_eager"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def grads(out: torch.Tensor, inputs: list[torch.Tensor]) -> list[torch.Tensor | None]:
    g = torch.Generator().manual_seed(5)
    weight = torch.randn(out.shape, generator=g, dtype=out.dtype)
    return list(torch.autograd.grad(out, inputs, weight, allow_unused=True))


def assert_same(compiled, eager, dtype=torch.float64):
    if isinstance(eager, torch.Tensor):
        torch.testing.assert_close(compiled, eager, **tol(dtype))
        return
    assert len(compiled) == len(eager)
    for a, b in zip(compiled, eager):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, **tol(dtype))


def run_hook(name: str, explicit: bool, backend: str) -> None:
    enc = hooks.make(name).double()
    positions = torch.tensor([[3, 4, 9, 10, 11]]) if explicit else None
    tensors = {key: t.requires_grad_() for key, t in hooks.inputs(enc, 2, 5, dtype=torch.float64).items()}
    wrt = [*tensors.values(), *enc.parameters()]

    def call(tensors):
        return hooks.apply(enc, 2, 5, tensors, positions)

    eager = call(tensors)
    compiled = torch.compile(call, fullgraph=True, backend=backend)(tensors)
    assert_same(compiled, eager)
    if eager.requires_grad:
        assert_same(grads(compiled, wrt), grads(eager, wrt))


@pytest.mark.parametrize("explicit", [False, True], ids=["arange", "explicit-positions"])
@pytest.mark.parametrize("name", NAMES)
def test_every_hook_compiles_as_one_graph(name, explicit):
    """Explicit positions are checked inside the graph by device-side asserts, and their tables
    computed directly (a traced graph cannot size a table from values)."""
    run_hook(name, explicit, TRACE)


def attention(name: str, **kwargs) -> MultiHeadAttention:
    torch.manual_seed(0)
    enc = hooks.make(name)
    return MultiHeadAttention(hooks.D_MODEL, hooks.NUM_HEADS, encoding=enc, **kwargs).double()


def run_attention(module: MultiHeadAttention, backend: str, **kwargs) -> None:
    x = torch.randn(2, 6, hooks.D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x.requires_grad_()
    wrt = [x, *module.parameters()]
    eager = module(x, **kwargs)
    compiled = torch.compile(module, fullgraph=True, backend=backend)(x, **kwargs)
    assert_same(compiled, eager)
    assert_same(grads(compiled, wrt), grads(eager, wrt))


@pytest.mark.parametrize("name", NAMES)
def test_every_kind_of_attention_compiles_as_one_graph(name):
    run_attention(attention(name), TRACE)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "shaw"])
def test_attention_with_padding_and_explicit_positions_compiles(name):
    mask = torch.tensor([[True] * 6, [False, False] + [True] * 4])
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 0, 1, 2, 3]])
    run_attention(attention(name), TRACE, padding_mask=mask, positions=positions)


def tiny_model(name: str) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=11, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, encoding=name
    )
    return Transformer(config).double()


def run_model(model: Transformer, backend: str) -> None:
    tokens = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(2))
    wrt = list(model.parameters())
    eager = model(tokens)
    compiled = torch.compile(model, fullgraph=True, backend=backend)(tokens)
    assert_same(compiled, eager)
    assert_same(grads(compiled, wrt), grads(eager, wrt))


@pytest.mark.parametrize("name", NAMES)
def test_every_encoding_in_the_transformer_compiles_as_one_graph(name):
    run_model(tiny_model(name), TRACE)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_inductor_end_to_end(name):
    """The default backend generates and runs its own kernels: hook, attention and model."""
    run_hook(name, False, "inductor")
    run_attention(attention(name), "inductor")
    run_model(tiny_model(name), "inductor")


@pytest.mark.parametrize("path", ["op", "plain"])
def test_rotary_under_compile_through_the_custom_op_or_the_traced_plain_path(path, monkeypatch):
    monkeypatch.setattr(rope, "COMPILED_PATH", path)
    run_hook("rope", True, "inductor")
    run_attention(attention("xpos"), TRACE)


def test_compiled_bad_positions_still_raise():
    """Inside a graph the position checks are device-side asserts: a negative position raises."""
    enc = hooks.make("rope")
    q = torch.randn(1, 2, 3, hooks.HEAD_DIM)

    def call(q, positions):
        return enc.rotate(q, q, q_positions=positions, k_positions=positions)[0]

    compiled = torch.compile(call, fullgraph=True, backend=TRACE)
    torch.testing.assert_close(compiled(q, torch.tensor([[0, 1, 2]])), call(q, torch.tensor([[0, 1, 2]])))
    with pytest.raises(RuntimeError, match="q_positions must be >= 0"):
        compiled(q, torch.tensor([[0, -1, 2]]))


# ---------------------------------------------------------------------------
# The C kernel as a torch.library custom op.
# ---------------------------------------------------------------------------


@pytest.mark.skipif(not rope.available(), reason="no C compiler: the op runs the plain path")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_custom_op_passes_opcheck(dtype, interleaved):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    angles = torch.randn(1, 1, 5, 3, generator=g, dtype=torch.float64)
    wide = rope.table_dtype(dtype)
    cos, sin = angles.cos().to(wide), angles.sin().to(wide)
    torch.library.opcheck(rope.rotary_op, (x, cos, sin, interleaved, 6, 1))
    layout = "interleaved" if interleaved else "half"
    expected = rope._plain(x, cos, sin, layout, 6)
    torch.testing.assert_close(rope.rotary_op(x, cos, sin, interleaved, 6, 1), expected, **tol(dtype))


@pytest.mark.parametrize("name", ["learned", "rope", "t5", "transformer_xl"])  # each sizes tables by bounds
def test_transformer_compiles_with_dynamic_shapes(name):
    """Training batches vary in length (the benchmark's task batches): with symbolic shapes the
    position bound is unknown, tables are computed in the graph, and two lengths share it."""
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=11, d_model=16, num_heads=2, num_layers=1, ffn_dim=32, encoding=name
    )
    model = Transformer(config).double()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=TRACE)
    for n in (5, 9):
        tokens = torch.randint(0, 11, (2, n), generator=torch.Generator().manual_seed(n))
        wrt = list(model.parameters())
        out = compiled(tokens)
        assert_same(out, model(tokens))
        assert_same(grads(out, wrt), grads(model(tokens), wrt))


DYNAMIC_SCALINGS = {
    "dynamic-ntk": {"rope_type": "dynamic", "factor": 4.0},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
                 "original_max_position_embeddings": 8},
}  # fmt: skip


@pytest.mark.parametrize("dynamic_shapes", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("scaling", list(DYNAMIC_SCALINGS))
def test_length_dependent_rope_scalings_compile_from_the_length(scaling, dynamic_shapes):
    """Dynamic NTK and LongRoPE recompute their frequencies from the current length: with
    positions=None that length is a shape, so the frequencies are traced into the graph (both
    within the original context and past it, where they change); explicit positions carry no
    bound a graph can read and are refused by name."""
    enc = posenc.build(
        "rope", head_dim=16, scaling=DYNAMIC_SCALINGS[scaling], max_position_embeddings=8
    ).double()

    def call(q, k, positions=None):
        return enc.rotate(q, k, q_positions=positions, k_positions=positions)

    compiled = torch.compile(call, fullgraph=True, dynamic=dynamic_shapes, backend=TRACE)
    g = torch.Generator().manual_seed(3)
    for n in (6, 20, 33):  # inside, then past the original context of 8
        q, k = (torch.randn(1, 2, n, 16, generator=g, dtype=torch.float64).requires_grad_() for _ in "qk")
        eager, out = call(q, k), compiled(q, k)
        assert_same(out, eager)
        assert_same(grads(out[0] + out[1], [q, k]), grads(eager[0] + eager[1], [q, k]))
    with pytest.raises(Exception, match="depends on the largest position"):
        compiled(q, k, torch.arange(33)[None])
