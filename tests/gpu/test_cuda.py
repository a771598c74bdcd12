"""posenc on a CUDA device: every encoding, the KV cache, bfloat16, ``posenc.hf`` and ``posenc extend``
compute on the GPU what they compute on the CPU. Skipped where there is no CUDA device (the CI machine
has none); ``scripts/gpu_check.sh`` runs this file on a GPU.

``POSENC_TEST_DEVICE=cpu`` runs the same checks with the CPU on both sides (a check of the checks
where no GPU is at hand; it proves nothing about CUDA).
"""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch
from tests.tolerances import tol
from tests.unit.nn.test_kv_cache import tiny_model as tiny
from tests.unit.nn.test_kv_cache import tokens

import posenc

DEVICE = os.environ.get("POSENC_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE.startswith("cuda") and not torch.cuda.is_available(), reason="no CUDA device"
)

NAMES = list(posenc.ENCODINGS)
CACHEABLE = [n for n, c in posenc.ENCODINGS.items() if c.supports_kv_cache]
BIAS = [n for n, c in posenc.ENCODINGS.items() if c.kind == "bias"]


@pytest.mark.parametrize("name", NAMES)
def test_every_encoding_computes_on_the_gpu_what_it_computes_on_the_cpu(name):
    """Forward (with and without left padding) and backward, float64: logits and every gradient agree."""
    cpu = tiny(name).train()
    gpu = tiny(name).train().to(DEVICE)
    toks = tokens(2, 11)
    mask = torch.tensor([[True] * 11, [False] * 3 + [True] * 8])
    results = []
    for model in (cpu, gpu):
        device = next(model.parameters()).device
        padded = model(toks.to(device), padding_mask=mask.to(device))
        plain = model(toks.to(device))  # contiguous positions: the bias encodings' blocked path
        loss = (
            torch.nn.functional.cross_entropy(padded[1, 3:], toks[1, 3:].to(device)) + plain.square().mean()
        )
        loss.backward()
        grads = {k: p.grad.detach().cpu() for k, p in model.named_parameters() if p.grad is not None}
        results.append((torch.cat((padded, plain)).detach().cpu(), grads))
    (cpu_logits, cpu_grads), (gpu_logits, gpu_grads) = results
    assert next(gpu.parameters()).device.type == torch.device(DEVICE).type
    torch.testing.assert_close(gpu_logits, cpu_logits, **tol(torch.float64))
    assert cpu_grads.keys() == gpu_grads.keys()
    for key, grad in cpu_grads.items():
        torch.testing.assert_close(gpu_grads[key], grad, **tol(torch.float64), msg=key)


@pytest.mark.parametrize("name", BIAS)
@pytest.mark.parametrize("causal", [True, False])
def test_bias_attention_in_blocks_on_the_gpu_equals_the_cpus(name, causal):
    """Several row blocks, forward and backward into q, k, v and the encoding's parameters, float64."""
    from posenc.kernels.bias_attention import bias_attention

    torch.manual_seed(0)
    enc = posenc.build_for_model(name, d_model=12, num_heads=3).double()
    with torch.no_grad():
        for param in enc.parameters():
            param.add_(0.3 * torch.randn_like(param))
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(2, 3, 19, 4, generator=g, dtype=torch.float64) for _ in range(4)]
    results = []
    for device in ("cpu", DEVICE):
        moved = copy.deepcopy(enc).to(device)
        q, k, v, grad = (x.to(device).requires_grad_(i < 3) for i, x in enumerate(inputs))
        out = bias_attention(q, k, v, moved, causal=causal, chunk=4)
        grads = torch.autograd.grad(out, [q, k, v, *moved.parameters()], grad)
        results.append([out.detach().cpu(), *(x.cpu() for x in grads)])
    for cpu, gpu in zip(*results):
        torch.testing.assert_close(gpu, cpu, **tol(torch.float64))


@pytest.mark.parametrize("name", CACHEABLE)
def test_decoding_with_a_kv_cache_on_the_gpu_equals_the_full_pass(name):
    model = tiny(name).to(DEVICE)
    toks = tokens(2, 10).to(DEVICE)
    cache = model.new_cache()
    with torch.inference_mode():
        steps = [model(toks[:, :4], cache=cache)] + [
            model(toks[:, t : t + 1], cache=cache) for t in range(4, 10)
        ]
        full = model(toks)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **tol(torch.float64))


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_autocast_on_the_gpu_stays_near_float32(name):
    """The benchmark's ``--precision bf16``: autocast to bfloat16 around a float32 model."""
    model = tiny(name).float().to(DEVICE)
    toks = tokens(2, 16).to(DEVICE)
    with torch.inference_mode():
        full = model(toks)
        with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
            half = model(toks)
    assert torch.isfinite(half).all()
    scale = float(full.abs().max())
    assert float((half.float() - full).abs().max()) <= 0.05 * max(scale, 1.0)


def test_posenc_hf_on_the_gpu_gives_the_stock_logits_and_each_scaling_the_built_models():
    transformers = pytest.importorskip("transformers")
    import posenc.hf

    def llama(**rope):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=97, max_position_embeddings=64,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, **rope},
        )  # fmt: skip
        return transformers.LlamaForCausalLM(config).eval().to(DEVICE)

    ids = torch.randint(0, 97, (2, 150), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    model = llama()
    with torch.inference_mode():
        stock = model(ids).logits
        handle = posenc.hf.apply(model)
        applied = model(ids).logits
        torch.testing.assert_close(applied, stock, rtol=0, atol=2e-4)
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
        handle.set_scaling(yarn)
        scaled = model(ids).logits
        torch.testing.assert_close(scaled, llama(**yarn)(ids).logits, rtol=0, atol=2e-4)
        assert float((scaled - stock).abs().max()) > 1e-2
        handle.remove()
        assert torch.equal(model(ids).logits, stock)
        generated = model.generate(ids[:1, :20], max_new_tokens=8, do_sample=False)
        handle = posenc.hf.apply(model)
        assert torch.equal(model.generate(ids[:1, :20], max_new_tokens=8, do_sample=False), generated)
        handle.remove()


def test_posenc_extend_on_the_gpu_measures_what_it_measures_on_the_cpu(tmp_path):
    """A tiny random Llama checkpoint through ``posenc extend --device`` on both devices: the same cells,
    the same perplexities (float32 on each: within 1e-3 relative) and the same passkey answers."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from click.testing import CliRunner

    from posenc.cli import main
    from posenc.extend.documents import python_docs_text

    root = tmp_path / "tiny"
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [python_docs_text()[:60_000]], vocab_size=300, min_frequency=2, show_progress=False
    )
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer).save_pretrained(root)
    vocab = len(transformers.AutoTokenizer.from_pretrained(root))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=vocab, max_position_embeddings=64, initializer_range=0.5,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(root)
    summaries = {}
    for device in ("cpu", DEVICE):
        out = tmp_path / device.replace(":", "_")
        args = ["extend", "--model", str(root), "--lengths", "32,128", "--documents", "2",
                "--scalings", "none,yarn:2,dynamic:2", "--passkey-lengths", "256", "--passkey-depths", "0.5",
                "--chunk", "64", "--workers", "1", "--device", device, "--no-figures", "--out", str(out)]  # fmt: skip
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        summaries[device] = json.loads((out / "summary.json").read_text())
    cpu, gpu = summaries["cpu"], summaries[DEVICE]
    assert gpu["perplexity"].keys() == cpu["perplexity"].keys() and len(cpu["perplexity"]) == 3
    for label, by_length in cpu["perplexity"].items():
        for length, cell in by_length.items():
            assert abs(gpu["perplexity"][label][length]["value"] - cell["value"]) <= 1e-3 * cell["value"], (
                label,
                length,
            )
    assert gpu["passkey"] == cpu["passkey"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("d,r", [(128, 128), (64, 64), (40, 34)], ids=str)
def test_fused_rotary_on_the_gpu_gives_the_plain_paths_bits(dtype, layout, d, r):
    """On CUDA the Triton kernel (posenc.kernels.triton_rope) rotates: forward and backward equal the
    plain PyTorch path on the same device to the last bit; strided (b, n, h, d) input, tables per batch."""
    from posenc.encoding.rotary.rope import apply_rotary
    from posenc.kernels import fused_rope

    g = torch.Generator().manual_seed(d + r)
    x = torch.randn(2, 37, 4, d, generator=g).to(DEVICE, dtype).transpose(1, 2).requires_grad_()
    angles = torch.randn(2, 1, 37, r // 2, generator=g, dtype=torch.float64) * 3
    cos, sin = angles.cos().float().to(DEVICE), angles.sin().float().to(DEVICE)
    if torch.device(DEVICE).type == "cuda":
        assert fused_rope._backend(x) == "triton", "the Triton kernel is not used on this CUDA device"
    fast = fused_rope.apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=r)
    slow = apply_rotary(x.float(), cos, sin, layout=layout, rotary_dim=r).to(dtype)
    assert not fused_rope._TRITON_FAILED, fused_rope._TRITON_FAILED
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    grad = torch.randn(2, 4, 37, d, generator=g).to(DEVICE, dtype)
    torch.testing.assert_close(
        torch.autograd.grad(fast, x, grad)[0], torch.autograd.grad(slow, x, grad)[0], rtol=0, atol=0
    )


@pytest.mark.parametrize("name", BIAS)
@pytest.mark.parametrize("path", ["chunked", "flex", "dense"])
def test_every_bias_path_on_the_gpu_equals_the_cpus_float64(name, path):
    """The paths the measured table (posenc.kernels.bias_paths) may choose on a GPU: forward and
    backward into q, k, v and the encoding's parameters, float32 on the device against float64 on
    the CPU. (With POSENC_TEST_DEVICE=cpu FlexAttention has no backward: forward only there.)"""
    from tests.unit.kernels.test_flex import FLEX_UNSUPPORTED

    from posenc.kernels.bias_attention import _try_flex, bias_attention

    if path == "flex" and name in FLEX_UNSUPPORTED:
        pytest.skip(f"FlexAttention cannot compile {name}'s score_mod: {FLEX_UNSUPPORTED[name]}")
    torch.manual_seed(0)
    enc = posenc.build_for_model(name, d_model=32, num_heads=2)
    with torch.no_grad():
        for param in enc.parameters():
            param.add_(0.3 * torch.randn_like(param))
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(1, 2, 150, 16, generator=g, dtype=torch.float64) for _ in range(4)]
    backward = not (path == "flex" and torch.device(DEVICE).type == "cpu")
    results = []
    for device, dtype in (("cpu", torch.float64), (DEVICE, torch.float32)):  # the reference, then the path
        reference = dtype == torch.float64
        moved = copy.deepcopy(enc).double() if reference else copy.deepcopy(enc).to(device)
        q, k, v, grad = (x.to(device, dtype).requires_grad_(i < 3 and backward) for i, x in enumerate(inputs))
        with torch.set_grad_enabled(backward):
            if path == "flex" and not reference:
                out = _try_flex(q, k, v, moved, None, None, None, True, 0.0, say=True)
                assert out is not None, "FlexAttention did not run"
            else:
                out = bias_attention(q, k, v, moved, causal=True, path="chunked" if reference else path)
            grads = torch.autograd.grad(out, [q, k, v, *moved.parameters()], grad) if backward else ()
        results.append([out.detach().cpu().double(), *(x.cpu().double() for x in grads)])
    for cpu, gpu in zip(*results):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-4 * max(1.0, float(cpu.abs().max())))
