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
