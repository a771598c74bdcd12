"""The seeds' central claim: attention alone is permutation-equivariant; a positional encoding breaks it.

"dog bites man" and "man bites dog" hold the same word vectors in a different order.
Without position, a bidirectional attention layer gives "dog" the same output in
both sentences, so nothing downstream can tell who bit whom.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc.analysis import permutation_equivariance_gap
from posenc.nn.transformer import Transformer, TransformerConfig

NO_POSITION = [n for n, c in posenc.ENCODINGS.items() if c.kind == "none"]
WITH_POSITION = [n for n, c in posenc.ENCODINGS.items() if c.kind != "none"]
DOG, BITES, MAN = 0, 1, 2


@pytest.mark.parametrize("name", [None, *NO_POSITION])
def test_without_position_attention_is_permutation_equivariant(name):
    assert permutation_equivariance_gap(name) < 1e-12


@pytest.mark.parametrize("name", WITH_POSITION)
def test_every_positional_encoding_breaks_equivariance(name):
    # perturb: stands in for training (CoPE's table starts at zero, i.e. as NoPE)
    assert permutation_equivariance_gap(name, perturb=0.1) > 1e-3


@given(st.permutations(list(range(6))), st.integers(0, 5))
def test_any_permutation_without_position(permutation, seed):
    assert permutation_equivariance_gap(None, permutation=permutation, seed=seed) < 1e-12


def reversal_blind(name) -> bool:
    """A bias whose bidirectional table is symmetric, ``B[i, j] == B[j, i]`` (a function of
    ``|i - j|``), is unchanged by reversing the sequence: reversal keeps every distance."""
    enc = posenc.build_for_model(name, d_model=16, num_heads=2, causal=False)
    if enc.kind != "bias":
        return False
    bias = enc.bias(6, 6)
    return bool(torch.equal(bias, bias.transpose(-1, -2)))


@pytest.mark.parametrize("name", [None, *WITH_POSITION])
def test_dog_bites_man(name):
    """Same words, reversed: without position, "dog" gets the same vector in both sentences.

    So does every encoding whose bidirectional bias is symmetric in i, j (ALiBi, KERPLE,
    Sandwich in encoder mode): "man bites dog" is the mirror image of "dog bites man".
    """
    torch.manual_seed(0)
    words = torch.randn(3, 16, dtype=torch.float64)  # embeddings of dog, bites, man
    sentence = words[[DOG, BITES, MAN]][None]  # "dog bites man"
    gap = permutation_equivariance_gap(name, inputs=sentence, permutation=[2, 1, 0], perturb=0.1)
    if name is None or reversal_blind(name):
        assert gap < 1e-12
    else:
        assert gap > 1e-4


def test_identity_permutation_has_no_gap_and_bad_permutations_are_named():
    assert permutation_equivariance_gap(WITH_POSITION[0], permutation=list(range(6))) == 0.0
    with pytest.raises(ValueError, match="permutation"):
        permutation_equivariance_gap(None, permutation=[0, 0, 1, 2, 3, 4])


def _model(name: str, causal: bool) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=5, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, encoding=name, causal=causal
    )
    return Transformer(config).double().eval()


@pytest.mark.parametrize("name", NO_POSITION)
def test_nope_encoder_is_equivariant_but_nope_decoder_is_not(name):
    """A bidirectional NoPE encoder is blind to order; the causal mask alone leaks it
    (Kazemnejad et al. 2023): token t sees t+1 tokens, so order changes the outputs."""
    toks = torch.tensor([[DOG, BITES, MAN, 3, 4]])
    perm = torch.tensor([2, 1, 0, 4, 3])
    encoder, decoder = _model(name, causal=False), _model(name, causal=True)
    torch.testing.assert_close(encoder(toks[:, perm]), encoder(toks)[:, perm], rtol=1e-10, atol=1e-10)
    assert (decoder(toks[:, perm]) - decoder(toks)[:, perm]).abs().max() > 1e-4
