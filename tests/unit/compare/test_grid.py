"""The grids the shipped profiles expand to: the encodings, tasks, seeds and variants each runs, sized to its lengths; unknown names refused naming the parameter."""

from __future__ import annotations

import pytest

import posenc
from posenc.compare.grid import RANDOMIZED_PAPER_MAX_LEN, build_grid, eval_length, train_length, variants_note
from posenc.compare.profile import PROFILES, get_profile, load_profile
from posenc.compare.work import execute
from posenc.records.spec import RunSpec

SMOKE = get_profile("smoke")


def smoke_specs(**narrow) -> list[RunSpec]:
    """The smoke grid, seed 0 only unless ``seeds`` is given (the profile has three)."""
    narrow.setdefault("seeds", (0,))
    return build_grid(SMOKE, **narrow).specs


def test_quick_profile_meets_the_brief():
    grid = build_grid(get_profile("quick"))
    labels = {s.label for s in grid.specs}
    # the five encodings the NoPE paper ranks, the ALiBi paper's four among them
    assert labels == set(get_profile("paper-nope").encodings) == {"sinusoidal", "nope", "rope", "alibi", "t5"}
    assert set(get_profile("paper-alibi").encodings) <= labels
    # learned embeddings and randomized RoPE run in standard (quick's 10 minutes: docs/benchmark.md)
    assert {"learned", "rope+rand"} <= {
        s.label for s in build_grid(get_profile("standard"), tasks=("copy",)).specs
    }
    assert {s.task for s in grid.specs} == {"copy", "passkey", "lm"}
    assert len(get_profile("quick").seeds) >= 3
    rope_lm = [s for s in grid.specs if s.label == "rope" and s.task == "lm"]
    assert rope_lm and all(s.finetune > 0 and "yarn:4" in s.scalings for s in rope_lm)
    rope_copy = [s for s in grid.specs if s.label == "rope" and s.task == "copy"]
    assert all(
        "yarn:4" not in s.scalings and "dynamic:4" in s.scalings for s in rope_copy
    )  # no fine-tune on tasks
    assert all(s.encoding in posenc.ENCODINGS for s in grid.specs)


def test_standard_covers_the_registry_and_full_adds_scaled_and_seeds():
    standard = build_grid(get_profile("standard"), tasks=("copy",))
    # every sequence encoding; the ones whose positions have axes (grids) run on the grid task
    sequence = {name for name, cls in posenc.ENCODINGS.items() if cls.position_axes == 1}
    assert {s.encoding for s in standard.specs} == sequence and len(sequence) >= 19
    full = build_grid(get_profile("full"), tasks=("copy",))
    assert {s.seed for s in full.specs} == {0, 1, 2, 3, 4}
    assert all(len(p.seeds) >= 3 for p in PROFILES.values())
    t5 = [s for s in full.specs if s.encoding == "t5" and s.seed == 0 and not s.randomized_max_len]
    assert {s.variant for s in t5} == {"default", "scaled"}
    scaled = next(s for s in t5 if s.variant == "scaled")
    assert scaled.encoding_config["max_distance"] == train_length("copy", scaled.train)
    assert {s.randomized_max_len for s in full.specs if s.encoding == "t5" and s.seed == 0} >= {
        None,
        RANDOMIZED_PAPER_MAX_LEN,
    }


def test_learned_table_keeps_untrained_rows_for_long_evaluation():
    (spec,) = smoke_specs(encodings=("learned",), tasks=("copy",))
    t_len = train_length("copy", spec.train)
    e_len = eval_length("copy", spec.train, spec.eval)
    assert spec.encoding_config == {"max_len": t_len, "extra_rows": e_len - t_len}
    assert execute(spec)["eval"]["default"]["lengths"][-1] == SMOKE.eval.lengths[-1]  # no error, no clamp


def test_unknown_names_are_rejected_with_the_parameter_named():
    with pytest.raises(ValueError, match="encoding"):
        build_grid(SMOKE, encodings=("ropee",))
    with pytest.raises(ValueError, match="task"):
        build_grid(SMOKE, tasks=("cpy",))
    with pytest.raises(ValueError, match="profile"):
        get_profile("quik")


def test_the_variants_note_names_the_encodings_left_out():
    prof = load_profile("smoke", ('encodings=["sinusoidal", "nope"]', 'variants=["combine=concat"]'))
    note = variants_note(prof)
    assert note == "note: variants combine=concat apply to additive encodings only; not run for: nope"
    assert variants_note(load_profile("smoke")) is None
