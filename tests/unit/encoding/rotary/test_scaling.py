"""RoPE scalings: NumPy reference parity, the papers' properties, validation, hooks.

HF parity lives in tests/hf/test_hf_parity.py; the CLI in tests/unit/cli/test_rope_command.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc import reference
from posenc.encoding.base import RotaryEncoding
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.encoding.rotary.scaling import ROPE_SCALINGS, compute
from tolerances import tol

F64 = tol(torch.float64)

dims = st.integers(2, 64).map(lambda x: 2 * x)  # even, >= 4
bases = st.sampled_from([100.0, 10000.0, 500000.0, 1e6])
factors = st.floats(1.0, 64.0)
originals = st.sampled_from([16, 512, 2048, 4096, 8192])


def default(dim, base):
    return compute(None, dim=dim, base=base)[0]


# ---------------------------------------------------------------------------
# The registry and its validation table stay parallel.
# ---------------------------------------------------------------------------


def test_registry_and_validators_are_parallel():
    assert list(ROPE_SCALINGS) == list(rope_scaling.ROPE_SCALING_VALIDATORS)
    assert list(ROPE_SCALINGS) == list(rope_scaling.ROPE_SCALING_KEYS)
    assert set(ROPE_SCALINGS) <= set(rope_scaling.PAPERS)
    for name, spec in ROPE_SCALINGS.items():  # one spec per scaling; the tables above are its views
        assert "http" in (spec.compute.__doc__ or ""), f"{name} docstring lacks the paper link"
        assert "http" in spec.paper and rope_scaling.PAPERS[name] == spec.paper
        assert rope_scaling.ROPE_SCALING_KEYS[name] == (spec.required, spec.optional)
        assert rope_scaling.ROPE_SCALING_VALIDATORS[name] is spec.validate


# ---------------------------------------------------------------------------
# Against the NumPy reference, full tensors, float64.
# ---------------------------------------------------------------------------


def check_reference(scaling, dim, base, seq_len, ref):
    got, got_scale = compute(scaling, dim=dim, base=base, seq_len=seq_len)
    want, want_scale = ref
    torch.testing.assert_close(got, torch.from_numpy(np.asarray(want, dtype=np.float64)), **F64)
    assert got_scale == pytest.approx(want_scale, rel=1e-12)


@given(dim=dims, base=bases, factor=factors)
def test_linear_and_ntk_match_reference(dim, base, factor):
    check_reference(
        {"rope_type": "linear", "factor": factor},
        dim,
        base,
        None,
        reference.rope_scaling_linear(dim, base, factor),
    )
    check_reference(
        {"rope_type": "ntk", "factor": factor}, dim, base, None, reference.rope_scaling_ntk(dim, base, factor)
    )
    check_reference(None, dim, base, None, reference.rope_scaling_default(dim, base))


@given(dim=dims, base=bases, factor=factors, original=originals, seq_len=st.integers(1, 200000))
def test_dynamic_matches_reference(dim, base, factor, original, seq_len):
    scaling = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": original}
    ref = reference.rope_scaling_dynamic(dim, base, factor, original, seq_len)
    check_reference(scaling, dim, base, seq_len, ref)


@given(
    dim=dims,
    base=bases,
    factor=factors,
    original=originals,
    betas=st.tuples(st.floats(0.5, 64.0), st.floats(0.25, 8.0)).map(lambda b: (max(b), min(b))),
    truncate=st.booleans(),
    extra=st.sampled_from(
        [{}, {"attention_factor": 0.9}, {"mscale": 1.0, "mscale_all_dim": 0.707}, {"mscale": 0.5}]
    ),
)
def test_yarn_matches_reference(dim, base, factor, original, betas, truncate, extra):
    scaling = {
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": original,
        "beta_fast": betas[0],
        "beta_slow": betas[1],
        "truncate": truncate,
        **extra,
    }
    ref = reference.rope_scaling_yarn(
        dim, base, factor, original, betas[0], betas[1], truncate=truncate, **extra
    )
    check_reference(scaling, dim, base, None, ref)


@given(
    dim=dims, base=bases, factor=factors, original=originals, low=st.floats(0.5, 2.0), gap=st.floats(0.0, 8.0)
)
def test_llama3_matches_reference(dim, base, factor, original, low, gap):  # gap 0: Llama 4 Scout's bands
    high = low + gap
    scaling = {
        "rope_type": "llama3",
        "factor": factor,
        "original_max_position_embeddings": original,
        "low_freq_factor": low,
        "high_freq_factor": high,
    }
    check_reference(
        scaling, dim, base, None, reference.rope_scaling_llama3(dim, base, factor, original, low, high)
    )


@given(dim=dims, original=originals, seq_len=st.integers(1, 20000), data=st.data())
def test_longrope_matches_reference(dim, original, seq_len, data):
    lists = st.lists(st.floats(1.0, 64.0), min_size=dim // 2, max_size=dim // 2)
    short, long = data.draw(lists), data.draw(lists)
    factor = data.draw(st.floats(1.0, 64.0))
    scaling = {
        "rope_type": "longrope",
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": original,
        "factor": factor,
    }
    ref = reference.rope_scaling_longrope(dim, 10000.0, short, long, original, seq_len, factor=factor)
    check_reference(scaling, dim, 10000.0, seq_len, ref)


# ---------------------------------------------------------------------------
# The papers' properties.
# ---------------------------------------------------------------------------


@given(dim=dims, base=bases, factor=factors)
def test_linear_is_default_divided_by_factor(dim, base, factor):
    got, scale = compute({"rope_type": "linear", "factor": factor}, dim=dim, base=base)
    torch.testing.assert_close(got, default(dim, base) / factor, **F64)
    assert scale == 1.0


@given(dim=dims, base=bases, factor=factors)
def test_ntk_rescales_the_base(dim, base, factor):
    """b' = b s^(d/(d-2)): the highest pair is unchanged, the lowest is divided by exactly s."""
    got, _ = compute({"rope_type": "ntk", "factor": factor}, dim=dim, base=base)
    torch.testing.assert_close(got, default(dim, base * factor ** (dim / (dim - 2))), **F64)
    plain = default(dim, base)
    assert got[0].item() == 1.0
    assert got[-1].item() == pytest.approx(plain[-1].item() / factor, rel=1e-12)
    assert torch.all(got <= plain * (1 + 1e-12))


@given(dim=dims, base=bases, factor=factors, original=originals, frac=st.floats(0.0, 1.0))
def test_dynamic_is_default_up_to_the_original_length(dim, base, factor, original, frac):
    scaling = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": original}
    seq_len = max(1, int(frac * original))
    for length in (seq_len, original, None):
        got, scale = compute(scaling, dim=dim, base=base, seq_len=length)
        torch.testing.assert_close(got, default(dim, base), **F64)
        assert scale == 1.0


@given(dim=dims, factor=st.floats(1.5, 16.0), original=originals)
def test_dynamic_frequencies_fall_as_the_length_grows(dim, factor, original):
    scaling = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": original}
    lengths = [original, original + 1, 2 * original, 10 * original]
    freqs = [compute(scaling, dim=dim, base=10000.0, seq_len=n)[0] for n in lengths]
    for shorter, longer in zip(freqs, freqs[1:]):
        assert torch.all(longer[1:] < shorter[1:])  # pair 0 (theta = 1) never moves
    # HF's formula: at L = L0 * s... the NTK scale is s*L/L0 - (s-1)
    at_double = compute(scaling, dim=dim, base=10000.0, seq_len=2 * original)[0]
    ntk = compute({"rope_type": "ntk", "factor": factor + 1}, dim=dim, base=10000.0)[0]
    torch.testing.assert_close(at_double, ntk, **F64)


@given(dim=dims, base=bases, factor=factors, original=originals)
def test_yarn_lies_between_interpolation_and_extrapolation(dim, base, factor, original):
    scaling = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original}
    got, scale = compute(scaling, dim=dim, base=base)
    plain = default(dim, base)
    assert torch.all(got >= plain / factor * (1 - 1e-12))
    assert torch.all(got <= plain * (1 + 1e-12))
    ramp = rope_scaling.yarn_ramp(dim=dim, base=base, params=scaling)
    torch.testing.assert_close(got[ramp == 0], plain[ramp == 0], **F64)  # extrapolated: unchanged
    torch.testing.assert_close(got[ramp == 1], plain[ramp == 1] / factor, **F64)  # interpolated
    assert scale == pytest.approx(0.1 * math.log(factor) + 1.0)  # sqrt(1/t), eq. 22


def test_yarn_bands_for_llama2_like_settings():
    """d=128, b=1e4, L0=4096: pairs turning > 32 times over L0 extrapolate, < 1 time interpolate."""
    params = {"factor": 16.0, "original_max_position_embeddings": 4096}
    bands = rope_scaling.frequency_bands({"rope_type": "yarn", **params}, dim=128, base=10000.0)
    rotations = 4096 / (2 * math.pi / default(128, 10000.0))  # r_i = L0 / lambda_i
    for r, band in zip(rotations.tolist(), bands):
        if r > 32:
            assert band == "extrapolate"
        if r < 1:
            assert band == "interpolate"
    assert {"extrapolate", "ramp", "interpolate"} == set(bands)


@given(dim=dims, base=bases, factor=factors, original=originals)
def test_llama3_keeps_high_and_divides_low_frequencies(dim, base, factor, original):
    scaling = {
        "rope_type": "llama3",
        "factor": factor,
        "original_max_position_embeddings": original,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }
    got, scale = compute(scaling, dim=dim, base=base)
    plain = default(dim, base)
    wavelength = 2 * math.pi / plain
    high, low = wavelength < original / 4.0, wavelength > original / 1.0
    torch.testing.assert_close(got[high], plain[high], **F64)
    torch.testing.assert_close(got[low], plain[low] / factor, **F64)
    mid = ~high & ~low
    assert torch.all(got[mid] <= plain[mid] * (1 + 1e-12))
    assert torch.all(got[mid] >= plain[mid] / factor * (1 - 1e-12))
    bands = rope_scaling.frequency_bands(scaling, dim=dim, base=base)
    assert [b == "high" for b in bands] == high.tolist()
    assert [b == "low" for b in bands] == low.tolist()
    assert scale == 1.0


def test_llama3_published_setting():
    """Llama 3.1 (8k -> 128k): factor 8, low 1, high 4, d=128, b=5e5."""
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }
    bands = rope_scaling.frequency_bands(scaling, dim=128, base=500000.0)
    # wavelength 2 pi 5e5^(2i/128) crosses L0/4 = 2048 at i = 64 ln(2048/2pi)/ln(5e5) ~ 28.2
    # and L0 = 8192 at i ~ 35.0: pairs 0-28 unchanged, 29-34 blended, 35-63 divided by 8
    assert bands == ["high"] * 29 + ["mid"] * 6 + ["low"] * 29


@given(dim=dims, original=originals)
def test_longrope_switches_at_the_original_length(dim, original):
    short = [1.0 + i for i in range(dim // 2)]
    long = [2.0 + 3 * i for i in range(dim // 2)]
    scaling = {
        "rope_type": "longrope",
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": original,
        "factor": 8.0,
    }
    plain = default(dim, 10000.0)
    for seq_len, factors in (
        (None, short),
        (1, short),
        (original, short),
        (original + 1, long),
        (10 * original, long),
    ):
        got, scale = compute(scaling, dim=dim, base=10000.0, seq_len=seq_len)
        torch.testing.assert_close(got, plain / torch.tensor(factors, dtype=torch.float64), **F64)
        assert scale == pytest.approx(math.sqrt(1 + math.log(8.0) / math.log(original)))


def test_resolve_fills_what_hf_infers_from_max_position_embeddings():
    resolved = rope_scaling.resolve({"rope_type": "yarn", "factor": 2.0}, max_position_embeddings=4096)
    assert resolved["original_max_position_embeddings"] == 4096
    phi3 = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 4,
        "long_factor": [2.0] * 4,
        "original_max_position_embeddings": 4096,
    }
    assert rope_scaling.resolve(phi3, max_position_embeddings=131072)["factor"] == 32.0
    assert rope_scaling.resolve({"rope_type": "linear", "factor": 2.0}, max_position_embeddings=9) == {
        "rope_type": "linear",
        "factor": 2.0,
    }
    # compute(max_position_embeddings=...) is the same as resolving first
    direct = compute(phi3, dim=8, base=10000.0, max_position_embeddings=131072)
    assert direct[1] == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))


def test_depends_on_seq_len():
    assert rope_scaling.depends_on_seq_len({"rope_type": "dynamic", "factor": 2.0})
    assert rope_scaling.depends_on_seq_len({"rope_type": "longrope"})
    for name in ("default", "linear", "ntk", "yarn", "llama3"):
        assert not rope_scaling.depends_on_seq_len({"rope_type": name})
    assert not rope_scaling.depends_on_seq_len(None)


# ---------------------------------------------------------------------------
# Validation: clear errors naming the key.
# ---------------------------------------------------------------------------

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}


@pytest.mark.parametrize(
    "scaling,dim,error,match",
    [
        ({"rope_type": "linear", "factor": 0.5}, 8, ValueError, "'factor'.*>= 1"),
        ({"rope_type": "linear"}, 8, ValueError, "requires key 'factor'"),
        ({"rope_type": "yarn", "factor": 4.0}, 8, ValueError, "original_max_position_embeddings"),
        ({"rope_type": "dynamic", "factor": 2.0}, 8, ValueError, "original_max_position_embeddings"),
        ({**YARN, "beta_fast": 1.0, "beta_slow": 4.0}, 8, ValueError, "beta_fast.*beta_slow"),
        ({**YARN, "beta_fast": -1.0}, 8, ValueError, "beta_fast"),
        ({**YARN, "truncate": "yes"}, 8, TypeError, "truncate"),
        ({**YARN, "atention_factor": 1.0}, 8, ValueError, "did you mean 'attention_factor'"),
        ({**YARN, "attention_factor": 0.0}, 8, ValueError, "attention_factor"),
        ({"rope_type": "linear", "factor": 2.0, "beta_fast": 3}, 8, ValueError, "unknown key 'beta_fast'"),
        ({"rope_type": "yran", "factor": 2.0}, 8, ValueError, "did you mean 'yarn'"),
        ({"rope_type": "linear", "factor": 2.0}, 7, ValueError, "even"),
        ({"rope_type": "ntk", "factor": 2.0}, 2, ValueError, "dim.*>= 4"),
        ({"rope_type": "linear", "factor": "2"}, 8, TypeError, "factor"),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 3,
                "long_factor": [1.0] * 4,
                "original_max_position_embeddings": 16,
            },
            8,
            ValueError,
            "short_factor.*4 entries.*got 3",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 4,
                "long_factor": 2.0,
                "original_max_position_embeddings": 16,
            },
            8,
            TypeError,
            "long_factor",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 4,
                "long_factor": [1.0, 1.0, 0.0, 1.0],
                "original_max_position_embeddings": 16,
            },
            8,
            ValueError,
            "long_factor",
        ),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "original_max_position_embeddings": 8192,
                "low_freq_factor": 4.0,
                "high_freq_factor": 1.0,
            },
            8,
            ValueError,
            "high_freq_factor.*low_freq_factor",
        ),
        ({**YARN, "original_max_position_embeddings": 0}, 8, ValueError, "original_max_position_embeddings"),
        ("yarn", 8, TypeError, "scaling must be a dict"),
    ],
)
def test_validation_errors_name_the_key(scaling, dim, error, match):
    with pytest.raises(error, match=match):
        compute(scaling, dim=dim, base=10000.0)


def test_compute_checks_base_and_seq_len():
    with pytest.raises(ValueError, match="base"):
        compute(None, dim=8, base=1.0)
    with pytest.raises(ValueError, match="seq_len"):
        compute(None, dim=8, base=10000.0, seq_len=0)


# ---------------------------------------------------------------------------
# The evaluation hook and the KV-cache rule.
# ---------------------------------------------------------------------------


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        shared = posenc.build("rope", head_dim=8, max_position_embeddings=64)
        self.layers = torch.nn.ModuleList(
            [
                torch.nn.ModuleDict({"pos": shared}),
                torch.nn.ModuleDict({"pos": shared}),
                torch.nn.ModuleDict({"pos": posenc.build("rope", head_dim=16, max_position_embeddings=64)}),
                torch.nn.ModuleDict({"pos": posenc.build("sinusoidal", dim=16)}),
            ]
        )


def test_apply_to_model_sets_every_rotary_encoding():
    model = TwoLayers()
    ropes = [model.layers[0]["pos"], model.layers[2]["pos"]]
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    assert rope_scaling.apply_to_model(model, yarn) == 2  # the shared one counts once
    for enc in ropes:
        want = compute(yarn, dim=enc.rotary_dim, base=10000.0)
        torch.testing.assert_close(enc.frequencies(0)[0], want[0], **F64)
        assert enc.frequencies(0)[1] == pytest.approx(want[1])
    assert rope_scaling.apply_to_model(model, None) == 2
    for enc in ropes:
        torch.testing.assert_close(enc.frequencies(0)[0], default(enc.rotary_dim, 10000.0), **F64)
    with pytest.raises(ValueError, match="rope_type"):
        rope_scaling.apply_to_model(model, {"rope_type": "nope"})
    with pytest.raises(TypeError, match="nn.Module"):
        rope_scaling.apply_to_model("model", None)


def decode_vs_recompute(encoding, steps: int = 10) -> float:
    """Largest |decode step t - last row of a full forward over the prefix 0..t|."""
    from posenc.nn.attention import KVCache, MultiHeadAttention

    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, encoding=encoding, causal=True).double()
    x = torch.randn(1, steps, 16, dtype=torch.float64)
    cache = KVCache()
    worst = 0.0
    with torch.no_grad():
        for t in range(steps):
            step = attn(x[:, t : t + 1], cache=cache)[:, -1]
            full = attn(x[:, : t + 1])[:, -1]
            worst = max(worst, float((step - full).abs().max()))
    return worst


def test_dynamic_scaling_decode_equals_full_recompute():
    """posenc's rule: with a length-dependent scaling, attention caches keys unrotated."""
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 3}
    enc = posenc.build("rope", head_dim=8, base=100.0, scaling=scaling)
    assert enc.cache_unrotated_keys
    assert decode_vs_recompute(enc) < 1e-12

    class StaleRoPE(type(enc)):  # dynamic frequencies but rotated keys cached: what the rule prevents
        cache_unrotated_keys = False

        def frequencies(self, max_position):
            return compute(
                self.config.scaling, dim=self.rotary_dim, base=self.config.base, seq_len=max_position + 1
            )

    stale = StaleRoPE(enc.config)
    assert decode_vs_recompute(stale) > 1e-4


def test_longrope_decode_equals_full_recompute_across_the_switch():
    short, long = [1.0, 1.5, 2.0, 3.0], [1.0, 4.0, 9.0, 20.0]
    scaling = {
        "rope_type": "longrope",
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": 5,
        "factor": 4.0,
    }
    enc = posenc.build("rope", head_dim=8, base=100.0, scaling=scaling)
    assert decode_vs_recompute(enc) < 1e-12


@pytest.mark.parametrize("share", [False, True])
def test_apply_to_model_on_a_transformer_changes_then_restores_its_output(share):
    from posenc.nn.transformer import Transformer, TransformerConfig

    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=13, d_model=16, num_heads=2, num_layers=3, share_encoding=share)
    model = Transformer(config).eval()
    tokens = torch.randint(0, 13, (2, 40))
    with torch.no_grad():
        before = model(tokens)
        linear = {"rope_type": "linear", "factor": 4.0}
        assert rope_scaling.apply_to_model(model, linear) == (1 if share else 3)
        scaled = model(tokens)
        assert rope_scaling.apply_to_model(model, None) == (1 if share else 3)
        after = model(tokens)
    assert (scaled - before).abs().max() > 1e-5  # a random model barely uses positions, but does
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    rope_scaling.apply_to_model(model, linear)
    ropes = [m for m in model.modules() if isinstance(m, posenc.get_encoding_class("rope"))]
    assert len(ropes) == (1 if share else 3)
    for enc in ropes:
        torch.testing.assert_close(enc.frequencies(39)[0], default(enc.rotary_dim, 10000.0) / 4.0, **F64)


@pytest.mark.parametrize("name", list(rope_scaling.ROPE_SCALINGS))
def test_every_scaling_has_a_numpy_reference_and_an_example_and_they_agree(name):
    """The registry entry's NumPy reference (what the conformance vectors use) == compute()."""
    spec = rope_scaling.ROPE_SCALINGS[name]
    assert spec.reference is not None and spec.example is not None
    scaling = {"rope_type": name, **spec.example(64)}
    for seq_len in (None, 100, 2048, 2049, 9000):  # across the examples' L0 = 2048
        got, got_scale = compute(scaling, dim=64, base=10000.0, seq_len=seq_len, max_position_embeddings=8192)
        want, want_scale = rope_scaling.reference(
            scaling, dim=64, base=10000.0, seq_len=seq_len, max_position_embeddings=8192
        )
        torch.testing.assert_close(got, torch.from_numpy(want), rtol=1e-13, atol=0)
        assert got_scale == pytest.approx(want_scale, rel=1e-13)


def test_a_scaling_is_parsed_once_and_never_checked_on_the_forward_path(monkeypatch):
    """set_scaling fills (as ``resolve`` does) and checks (as ``validate`` does) its scaling once; a
    dynamic scaling's forward (new frequencies at every length) checks nothing again. The typed
    Scaling round-trips."""
    calls = {"_filled": 0, "_checked": 0}
    for name in calls:
        original = getattr(rope_scaling, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(rope_scaling, name, counted)
    enc = posenc.build("rope", head_dim=8, max_position_embeddings=16)
    calls.update(_filled=0, _checked=0)
    enc.set_scaling({"rope_type": "dynamic", "factor": 2.0})
    assert calls == {"_filled": 1, "_checked": 1}
    assert isinstance(enc.config.parsed_scaling, rope_scaling.Scaling)
    assert enc.config.parsed_scaling.params == {"factor": 2.0, "original_max_position_embeddings": 16}
    q = torch.randn(1, 2, 40, 8)
    for n in (8, 24, 40):  # within and past the original context: the frequencies change
        enc.rotate(q[:, :, :n], q[:, :, :n])
    assert calls == {"_filled": 1, "_checked": 1}
    parsed = rope_scaling.Scaling.parse(
        {"rope_type": "yarn", "factor": 4.0}, dim=8, max_position_embeddings=32
    )
    assert rope_scaling.Scaling.parse(parsed, dim=8) is parsed  # already checked for this dim
    assert parsed.to_dict() == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    enc.set_scaling(parsed)
    assert enc.config.scaling == parsed.to_dict() and enc.config.parsed_scaling == parsed
    with pytest.raises(posenc.PosencError, match="must have dim/2 = 8 entries"):
        rope_scaling.Scaling.parse(
            {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}, dim=16,
            max_position_embeddings=32,
        )  # fmt: skip


@pytest.fixture
def parses(monkeypatch):
    """Calls of ``Scaling.parse`` (a scaling dict turned typed) and ``split`` (its name looked up),
    counted wherever they happen (posenc.hf and RoPE call them through the module)."""
    calls = {"parse": 0, "split": 0}
    parse, split = rope_scaling.Scaling.parse.__func__, rope_scaling.split

    def counted_parse(cls, *args, **kwargs):
        calls["parse"] += 1
        return parse(cls, *args, **kwargs)

    def counted_split(*args, **kwargs):
        calls["split"] += 1
        return split(*args, **kwargs)

    monkeypatch.setattr(rope_scaling.Scaling, "parse", classmethod(counted_parse))
    monkeypatch.setattr(rope_scaling, "split", counted_split)
    return calls


def test_rope_set_scaling_parses_a_dict_once_and_keeps_a_typed_scaling(parses):
    """A dict is parsed (and its name looked up) once per set_scaling; a ``Scaling`` travels typed
    to the frequencies, never turned back into a dict and parsed again."""
    enc = posenc.build("rope", head_dim=8, max_position_embeddings=16)
    assert parses["parse"] <= 1 and parses["split"] <= 1, parses  # building parses it once
    parses.update(parse=0, split=0)
    enc.set_scaling({"rope_type": "yarn", "factor": 4.0})
    assert parses["parse"] <= 1 and parses["split"] <= 1, parses
    typed = rope_scaling.Scaling.parse({"rope_type": "linear", "factor": 2.0}, dim=8)
    parses.update(parse=0, split=0)
    enc.set_scaling(typed)
    assert parses["parse"] <= 1 and parses["split"] <= 1, parses
    assert enc.config.parsed_scaling is typed and enc.config.scaling == {"rope_type": "linear", "factor": 2.0}
    torch.testing.assert_close(enc.frequencies(0)[0], compute(typed, dim=8, base=10000.0)[0], rtol=0, atol=0)


def test_hf_apply_set_scaling_parses_once_for_every_layer(parses):
    """``posenc.hf.apply(model).set_scaling``: one parse for all of a model's RoPE layers, checked
    before any changes; a ``Scaling`` reaches every layer as it is."""
    transformers = pytest.importorskip("transformers")
    import posenc.hf

    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=16,
    )  # fmt: skip
    torch.manual_seed(0)
    handle = posenc.hf.apply(transformers.LlamaForCausalLM(config).eval())
    parses.update(parse=0, split=0)
    assert handle.set_scaling({"rope_type": "yarn", "factor": 4.0}) >= 1
    assert parses["parse"] <= 1 and parses["split"] <= 1, parses
    ropes = [enc for enc in handle.encodings if isinstance(enc, RotaryEncoding)]
    assert {enc.config.parsed_scaling.params[rope_scaling.ORIGINAL] for enc in ropes} == {16}
    typed = ropes[0].config.parsed_scaling
    parses.update(parse=0, split=0)
    handle.set_scaling(None)
    assert parses["parse"] <= 1 and parses["split"] <= 1, parses
    parses.update(parse=0, split=0)
    handle.set_scaling(typed)
    assert parses["parse"] <= 1 and parses["split"] <= 1, parses
    assert all(enc.config.parsed_scaling is typed for enc in ropes)
    with pytest.raises(posenc.PosencError, match="rope_type must be one of"):
        handle.set_scaling({"rope_type": "yran", "factor": 4.0})
    assert all(enc.config.parsed_scaling is typed for enc in ropes)  # nothing changed


def test_an_original_context_of_zero_is_refused_by_name_not_divided_by():
    from posenc.core.errors import PosencError
    from posenc.encoding.rotary import scaling as rope_scaling

    for value in (0, -3):
        with pytest.raises(PosencError, match="original_max_position_embeddings must be an integer >= 1"):
            rope_scaling.resolve(
                {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                 "original_max_position_embeddings": value},
                max_position_embeddings=256,
            )  # fmt: skip
