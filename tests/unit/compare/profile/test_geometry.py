"""Before the first run (posenc.compare.profile.geometry): the model's memory against the device's, the LM's bytes against the corpus, and the shipped profiles fitting a laptop."""

from __future__ import annotations

import dataclasses

import pytest

from posenc.compare import compare
from posenc.compare.profile import (
    PROFILES,
    check_fits,
    load_profile,
    memory_needed,
    parameter_count,
)
from posenc.core.errors import PosencError
from posenc.nn import transformer as posenc_model


def test_the_parameter_count_is_a_lower_bound_of_the_built_model():
    for settings in ([], ["model.num_kv_heads=1"], ["model.num_layers=3", "model.ffn_dim=8"]):
        prof = load_profile("smoke", settings)
        config = posenc_model.TransformerConfig(
            vocab_size=256, encoding="nope", **dataclasses.asdict(prof.model)
        )
        built = sum(p.numel() for p in posenc_model.Transformer(config).parameters())
        counted = parameter_count(prof.model, 256)
        assert 0.5 * built < counted <= built, (settings, counted, built)


def test_a_model_too_large_for_the_device_is_refused_before_any_run(tmp_path):
    """Found: model.d_model = 2**63 ended in C++ stack frames; a model that cannot fit started anyway."""
    prof = load_profile("smoke", ["model.d_model=65536", "model.num_heads=1", "tasks=['copy']"])
    params, needed = memory_needed(prof, "copy")
    assert params > 65536**2 and needed > 16 * params
    with pytest.raises(PosencError) as caught:
        check_fits(prof, "cpu", memory=needed - 1)
    message = str(caught.value)
    assert "model" in message and "parameters" in message and "GiB" in message and "cpu has" in message
    check_fits(prof, "cpu", memory=needed)  # fits exactly: no error
    huge = load_profile("smoke", ["model.d_model=1048576", "model.num_heads=1", "model.num_layers=64"])
    with pytest.raises(PosencError, match="needs at least"):  # on this machine, whatever its memory
        compare(huge, out=tmp_path, show_progress=False, log=lambda _: None)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("eval.lm_bytes=1000000000", "eval.lm_bytes"),
        ("eval.lastk_contexts=[1.0, 10000000.0]", "eval.lastk_contexts"),
        ("lm_train.max_len=100000000", "lm_train.max_len"),
    ],
)
def test_lm_bytes_past_the_corpus_are_refused_before_any_run(setting, key):
    with pytest.raises(PosencError) as caught:  # at load (a test file's span) or before the runs (the corpus)
        prof = load_profile("smoke", [setting, "lm_train.batch_size=1", "eval.lm_lengths=[16]"])
        check_fits(prof, "cpu", memory=1 << 60)
    message = str(caught.value)
    assert key.removeprefix("eval.") in message and ("corpus" in message or "span" in message), message


def test_the_shipped_profiles_fit_a_laptop():
    for name, prof in PROFILES.items():
        if not name.startswith("paper-") and name != "full":
            check_fits(prof, "cpu", memory=8 << 30)
