"""The FlexAttention path never returns a wrong result: length sweeps in fresh processes.

torch 2.13's compiled CPU FlexAttention reads past the end of ``k`` for some key counts
(with AVX2 vector code: ``j = 8 (mod 16)``), so its output depended on whatever memory
followed the tensor: NaN, right, or wrong rows, differing from process to process. posenc
pads every length to whole blocks. These tests check that over lengths 1..130 and larger,
causal and not, queries != keys, each in a fresh process with a fresh inductor cache, with
NaN placed after every buffer the kernel reads (so an out-of-bounds read cannot pass by
luck), with the machine's own vector ISA and with AVX2 forced.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tests.tolerances import tol

import posenc
from posenc.kernels import bias_attention as flex_module
from posenc.registry import ENCODINGS

SCRIPT = Path(__file__).parents[2] / "flex_sweep.py"
BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]
#: score_mods torch 2.13's FlexAttention cannot compile (the call falls back to the chunked path, said once)
FLEX_UNSUPPORTED = {
    "sandwich": "its score_mod sums over frequencies: inductor cannot lower it as a pointwise subgraph",
}
FLEX_NAMES = [name for name in BIAS_NAMES if name not in FLEX_UNSUPPORTED]


def has_avx2() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


# name -> (extra environment, sweep arguments)
SWEEPS = {
    "native": ({}, []),
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, []),
    # each encoding's score_mod once (queries past the keys, no mask: both signs of distance);
    # the masks do not depend on the encoding and are swept above
    "every-bias-encoding": ({}, ["--encodings", ",".join(FLEX_NAMES), "--lengths", "40", "--modes", "cross"]),
    "unpadded-kernel": ({"ATEN_CPU_CAPABILITY": "avx2"}, ["--no-pad", "--lengths", "40"]),
}
if torch.cuda.is_available():
    SWEEPS["cuda"] = ({}, ["--device", "cuda", "--encodings", ",".join(FLEX_NAMES)])


@pytest.fixture(scope="module")
def sweeps():
    """Start every sweep at once (each its own process and inductor cache); yield their results."""
    if not flex_module.flex_available():
        pytest.skip("this torch has no FlexAttention")
    procs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (extra, args) in SWEEPS.items():
            if "ATEN_CPU_CAPABILITY" in extra and not has_avx2():
                continue
            if name == "avx2" and torch.backends.cpu.get_cpu_capability() == "AVX2":
                continue  # the native sweep already runs AVX2's code: the same sweep twice
            env = {**os.environ, **extra, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / name)}
            procs[name] = subprocess.Popen(
                [sys.executable, str(SCRIPT), *args], env=env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        results = {}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{err[-3000:]}"
            results[name] = json.loads(out.strip().splitlines()[-1])
        yield results


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SWEEPS if n != "unpadded-kernel"])
def test_flex_sweep_matches_dense_attention(sweeps, name):
    if name == "avx2" and torch.backends.cpu.get_cpu_capability() == "AVX2":
        pytest.skip("this CPU's own vector code is AVX2: the native sweep is this sweep")
    if name not in sweeps:
        pytest.skip("AVX2 cannot be forced on this CPU")
    result = sweeps[name]
    assert result["cases"] > 0 and result["flex_calls"] == result["cases"]  # flex ran, not the fallback
    assert result["failures"] == [], result["failures"][:10]


@pytest.mark.slow
def test_the_sweep_catches_the_unpadded_kernel(sweeps):
    """Without posenc's padding the same sweep fails: the check above can fail."""
    if "unpadded-kernel" not in sweeps:
        pytest.skip("AVX2 cannot be forced on this CPU")
    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the out-of-bounds read was seen in torch 2.13; this is {torch.__version__}")
    failures = sweeps["unpadded-kernel"]["failures"]
    assert any(f["j"] == 40 for f in failures)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FLEX_UNSUPPORTED))
def test_a_score_mod_flex_cannot_compile_falls_back_to_chunked_said_once(name, caplog, monkeypatch):
    """Found: the sweep counted a FlexAttention call that raised (and fell back) as one that ran, so
    Sandwich passed it without FlexAttention ever running. Should torch learn to compile it, this fails:
    then take it off FLEX_UNSUPPORTED."""
    from posenc.kernels import _build

    monkeypatch.setattr(_build, "_warned", set())
    enc = posenc.build_for_model(name, d_model=16, num_heads=2)
    q, k, v = (torch.randn(1, 2, 40, 8) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="posenc"), torch.no_grad():
        out = flex_module.bias_attention(q, k, v, enc, causal=True, path="flex")
    assert "FlexAttention path not used (an error" in caplog.text
    torch.testing.assert_close(
        out, flex_module.chunked_bias_attention(q, k, v, enc, causal=True), rtol=0, atol=0
    )


def test_flex_path_with_gradients_falls_back_to_chunked(caplog):
    enc = posenc.build_for_model("alibi", d_model=8, num_heads=2).double()
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="posenc"):
        out = flex_module.bias_attention(q, k, v, enc, causal=True, path="flex")
    bias = enc.bias(6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), **tol(torch.float64)
    )
    out.sum().backward()
    assert q.grad is not None
    with pytest.raises(ValueError, match="path"):
        flex_module.bias_attention(q, k, v, enc, path="sparse")


def test_what_flex_cannot_take_is_known_before_a_compile():
    """An H200 run showed CUDA's FlexAttention refusing head_dim 8 only after a failed compile: posenc
    says so up front. The other reasons: gradients on the CPU, a mask, dropout."""
    refusal = flex_module._flex_refusal
    assert refusal("cuda", 8, 8, False, False, 0.0) == "head_dim 8 (CUDA's FlexAttention takes 16 or more)"
    assert refusal("cuda", 64, 8, False, False, 0.0).startswith("head_dim 8")
    assert refusal("cuda", 16, 16, True, False, 0.0) is None  # CUDA has a FlexAttention backward
    assert refusal("cpu", 8, 8, False, False, 0.0) is None
    assert refusal("cpu", 8, 8, True, False, 0.0).startswith("gradients")
    assert refusal("cuda", 64, 64, False, True, 0.0) == "an explicit mask"
    assert refusal("cuda", 64, 64, False, False, 0.1) == "dropout"


def test_past_the_recompile_limit_the_chunked_path_is_used(monkeypatch, caplog):
    """torch would run FlexAttention eagerly (every score materialised); posenc says so and chunks."""
    limit = torch._dynamo.config.recompile_limit
    monkeypatch.setattr(flex_module, "_FLEX_SHAPES", {("another shape", n) for n in range(limit)})
    called = []
    monkeypatch.setattr(flex_module, "flex_bias_attention", lambda *a, **k: called.append(1))
    enc = posenc.build_for_model("alibi", d_model=8, num_heads=2)
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="posenc"), torch.no_grad():
        out = flex_module.bias_attention(q, k, v, enc, causal=True, path="flex")
    assert not called and "recompile limit" in caplog.text
    chunked = flex_module.chunked_bias_attention(q, k, v, enc, causal=True)
    torch.testing.assert_close(out, chunked, rtol=0, atol=0)


def test_padded_length_is_whole_blocks():
    block = flex_module.FLEX_BLOCK
    for n, expected in ((1, block), (block, block), (block + 1, 2 * block), (3 * block - 1, 3 * block)):
        assert flex_module._padded_length(n) == expected
