"""Verdict rules of the claims table: scale, fixed-step papers, few seeds, a scaling's own baseline."""

from __future__ import annotations

import math

from posenc.results import claims


def _copy(label, seed, hits, *, converged=True, params=150_000, steps=1000):
    """A copy run trained on n <= 4, 64 examples at n = 8 (the 2x bucket), ``hits`` of them right."""
    rows = [[1] * hits + [0] * (64 - hits)]
    return {
        "label": label,
        "spec": {"task": "copy", "seed": seed, "encoding": label, "train": {"max_len": 4}},
        "result": {
            "num_parameters": params,
            "train": {"converged": converged, "steps": steps},
            "eval": {"default": {"lengths": [8], "per_example": {"exact_match": rows}}},
        },
    }


def _lm(seed, base_nats, scaled_nats, scaled_short=None):
    """An LM run (L_train 4) evaluated plainly and after a PI fine-tune ("linear:4")."""
    plain = {"lengths": [4, 16], "window_nats": [[base_nats] * 8, [base_nats] * 2]}
    short = base_nats if scaled_short is None else scaled_short
    tuned = {"lengths": [4, 16], "window_nats": [[short] * 8, [scaled_nats] * 2], "method": {"finetune": {}}}
    return {
        "label": "rope",
        "spec": {"task": "lm", "seed": seed, "encoding": "rope", "train": {"max_len": 4}},
        "result": {"train": {"converged": True, "steps": 100}, "eval": {"default": plain, "linear:4": tuned}},
    }


PAPER = claims.Scale("a 100M-parameter paper", parameters=1e8, train_length=4, fixed_steps=True)


def test_a_disagreement_beyond_the_runs_scale_is_not_reproduced_at_this_scale():
    records = [_copy("x", s, 2) for s in range(3)]  # ~3% at 2x
    holds = claims.Threshold("x", "copy", "em_2x", 0.9, ">=")
    small = claims.Claim("p", "x extrapolates", "~100%", holds, PAPER).row(records)
    assert small["verdict"] == "not reproduced at this scale"
    assert "paper: 100M parameters" in small["ours"] and "run: 150k parameters" in small["ours"]
    big = [_copy("x", s, 2, params=2e8) for s in range(3)]
    assert claims.Claim("p", "x extrapolates", "~100%", holds, PAPER).row(big)["verdict"] == "disagrees"
    assert (
        claims.Claim("p", "x extrapolates", "~100%", holds).row(records)["verdict"] == "disagrees"
    )  # no scale


def test_a_fixed_step_paper_ranks_a_run_that_did_not_converge_as_a_failure():
    records = [
        *(_copy("a", s, 60) for s in range(3)),
        *(_copy("b", s, 0, converged=False) for s in range(3)),
    ]
    ranking = claims.Ranking(("a", "b"), ("copy",), "em_2x")
    fixed = claims.Claim("p", "a > b", "yes", ranking, PAPER).row(records)
    assert (
        fixed["verdict"] == "agrees" and "1 pair(s) agree" in fixed["ours"] and "fixed steps" in fixed["rule"]
    )
    converging = claims.Scale("a paper that trains to convergence", parameters=1e8)
    dropped = claims.Claim("p", "a > b", "yes", ranking, converging).row(records)
    assert dropped["verdict"] == "not measured"  # b has no converged run to rank


def test_one_converged_seed_is_undecided():
    records = [_copy("x", 0, 64), _copy("x", 1, 0, converged=False), _copy("y", 0, 0), _copy("y", 1, 0)]
    assert claims.Threshold("x", "copy", "em_2x", 0.5, ">=").judge(records)[1] == "undecided"
    assert claims.Compare("x", "y", "copy", "em_2x", ">").judge(records)[1] == "undecided"


def test_a_scaling_is_judged_against_the_model_before_it_not_its_own_baseline():
    # after the fine-tune: flat from L to 4L on its own (ratio 1), but 0.5 nats/byte worse than the
    # model before it at L_train: exp(0.5) = 1.65 over the unscaled model
    records = [_lm(s, 1.0 + 0.01 * s, 1.5 + 0.01 * s, scaled_short=1.5 + 0.01 * s) for s in range(3)]
    test = claims.BaselineRatio("rope", "linear:4", 4, 1.1, "<=")
    ours, verdict, rule = test.judge(records)
    assert verdict == "disagrees" and ours.startswith(f"{math.exp(0.5):.2f}") and "unscaled" in rule
    good = [_lm(s, 1.0 + 0.01 * s, 1.02 + 0.01 * s) for s in range(3)]
    assert test.judge(good)[1] == "agrees"


def test_every_claim_names_its_scale_and_the_alibi_papers_t5_is_judged_as_its_paper_set_it_up():
    """The notes' open questions included (they ask at no scale: the encodings' papers' is theirs).
    The ALiBi paper's T5 perplexity claim is judged on t5@scaled only: its max_distance 128 lies
    inside the paper's L_train 512, where plain t5 at L_train 64 puts it outside training."""
    assert all(c.scale is not None for c in claims.CLAIMS)
    alibi_t5 = [
        c
        for c in claims.CLAIMS
        if c.source.startswith("ALiBi paper") and getattr(c.test, "column", "").startswith("ratio")
    ]
    assert {c.test.label for c in alibi_t5 if "t5" in c.test.label} == {"t5@scaled"}
    holds = [c for c in claims.CLAIMS if "dynamic" in c.claim and "holds" in c.claim]
    assert holds and all(isinstance(c.test, claims.Threshold) and c.test.threshold == 1.1 for c in holds)
    pi = next(c for c in claims.CLAIMS if c.claim.startswith("PI after"))
    assert isinstance(pi.test, claims.BaselineRatio)
    speed = next(c for c in claims.CLAIMS if isinstance(c.test, claims.SeedRatio))
    assert speed.paper == "1.98x slower" and speed.test.threshold < 1.98


def test_a_claim_naming_an_unknown_scale_is_refused_by_name():
    import copy

    import pytest

    from posenc.core.datafiles import read_json
    from posenc.core.errors import PosencError

    data = copy.deepcopy(read_json("posenc.results", claims.CLAIMS_FILE))
    data["papers"][0]["scale"] = "alibi-wikitext"
    with pytest.raises(PosencError, match=r"papers\[0\]\.scale.*alibi-wikitext103"):
        claims.load_claims(data)
    del data["scales"]
    with pytest.raises(PosencError, match="scales"):
        claims.load_claims(data)
