"""The claims table (``posenc.results.claims``): its verdict rules (scale, fixed-step papers, few seeds, a
scaling's own baseline), and the notes' claims about trained models judged from records by seed-level tests,
the claims shown corrected together as one family (Holm)."""

from __future__ import annotations

import math

from posenc.analysis import notes
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


# ---------------------------------------------------------------------------
# The notes' claims about trained models, judged from benchmark records with intervals.
# ---------------------------------------------------------------------------


def _record(label, seed, em_in, em_2x, converged=True, task="copy"):
    """A copy run trained on n <= 4: 64 examples at n = 3 (in) and at n = 8 (2x bucket), ``hits``
    eighths of them right (64 examples: enough for an interval to reach past 90%)."""

    def rows(hits):
        return [1] * (8 * hits) + [0] * (64 - 8 * hits)

    per = [rows(em_in), rows(em_2x)]
    encoding, _, tag = label.partition("[")
    return {
        "label": label,
        "spec": {"task": task, "seed": seed, "encoding": encoding, "train": {"max_len": 4}},
        "result": {
            "train": {"converged": converged},
            "eval": {
                "default": {"lengths": [3, 8], "per_example": {"exact_match": per, "token_accuracy": per}}
            },
        },
    }


def _runs(label, em_in, em_2x, converged=True):
    return [_record(label, seed, em_in, e, converged) for seed, e in enumerate(em_2x)]


def test_every_pending_measure_has_claims_and_every_claim_is_in_the_table():
    measures = {m for m, _ in claims.NOTES_CLAIMS}
    assert measures == set(notes.MEASURES)
    assert all(claim in claims.CLAIMS for _, claim in claims.NOTES_CLAIMS)
    for measure, claim in claims.NOTES_CLAIMS:  # named by the notes' own ids
        ids = [c.id for c in notes.CLAIMS if c.measure == measure]
        assert ids and all(i in claim.source for i in ids), measure


def _verdicts(seeds):
    records = [
        *_runs("rope", 8, [8] * seeds),  # 100% at 2x on every seed and example: holds
        *_runs("t5", 8, ([0, 1, 0] * 3)[:seeds]),  # near 0: "excellent" contradicted
        *_runs("alibi", 8, ([8, 4, 8] * 3)[:seeds]),  # 83% with seeds 50%..100%: straddles 90%
        *_runs("learned", 8, [0] * seeds),  # fails past its training length: holds
        *_runs("sinusoidal", 1, [0, 0, 0], converged=False),  # not even in-distribution
    ]
    return claims.notes_measurements(records)


def test_verdicts_come_from_the_family_of_claims():
    """The claims shown are one family (Holm): with 8 seeds per encoding the clear ones are decided."""
    got = _verdicts(8)
    assert got["extrapolation:rope"][0] == notes.HOLDS
    assert got["extrapolation:t5"][0] == notes.CONTRADICTED
    assert got["extrapolation:alibi"][0] == notes.INCONCLUSIVE
    assert got["extrapolation:learned"][0] == notes.HOLDS
    verdict, text = got["extrapolation:sinusoidal"]
    assert verdict == notes.PENDING and text.startswith("Not measured (no run converged in-distribution)")
    # relative (rope, t5, alibi) vs absolute (learned; sinusoidal did not converge): rope and alibi are
    # decided above learned pair by pair, t5 (near 0 too) is not: every pair is what the claim needs
    verdict, text = got["extrapolation:relative"]
    assert verdict == notes.INCONCLUSIVE and "2 pair(s) agree, 0 disagree, 1 undecided" in text
    assert "extrapolation:integer_index" not in got and "open:warmup" not in got  # not run: not judged
    assert "100% [" in got["extrapolation:rope"][1] and "(8 seeds)" in got["extrapolation:rope"][1]
    assert "Holm-adjusted p" in got["extrapolation:rope"][1]


def test_three_seeds_decide_none_of_them_after_the_familys_correction():
    """The same claims with 3 seeds: a t test over 2 degrees of freedom, corrected over the family,
    decides none of rope's and learned's (each alone passed its 95% interval before)."""
    got = _verdicts(3)
    assert got["extrapolation:rope"][0] == notes.INCONCLUSIVE
    assert got["extrapolation:learned"][0] == notes.INCONCLUSIVE
    assert "100% [72, 100] (3 seeds)" in got["extrapolation:rope"][1]  # never [100, 100]: one error more


def test_open_questions_compare_each_variant_with_its_default_run():
    records = [
        *_runs("learned", 8, [0, 0, 0]),
        *_runs("learned[every_layer]", 8, [8, 8, 7]),  # better at 2x, equal in-distribution
        *_runs("learned[concat]", 8, [0, 0, 0]),  # add as good as concat in and past training
    ]
    got = claims.notes_measurements(records)
    verdict, text = got["open:add_vs_concat"]  # both at 100% in, 0% at 2x on every seed: ties
    assert verdict == notes.INCONCLUSIVE and "(uninformative)" in text and "(agrees)" not in text
    verdict, text = got["open:every_layer"]  # in-distribution an exact tie, 2x better: not all agree
    assert verdict == notes.INCONCLUSIVE and "(agrees)" in text and "(disagrees)" not in text
    assert "a tie: identical on every seed and example (uninformative)" in text


def test_an_exact_tie_neither_supports_nor_refutes_better_but_shows_at_least_as_good():
    tie = [*_runs("rope", 8, [0, 0, 0]), *_runs("rope+rand", 8, [0, 0, 0])]
    better = claims.Compare("rope+rand", "rope", "copy", "em_2x", ">")
    ours, verdict, rule = better.judge(tie)
    assert verdict == "uninformative" and "+0.00 [-" in ours and "tie" in ours  # not zero-width
    uneven = [*_runs("rope", 8, [0, 0]), *_runs("rope+rand", 8, [0, 0, 0])]  # 2 and 3 converged seeds
    assert better.judge(uneven)[1] == "uninformative"  # a tie at the floor whatever the seeds converged
    no_worse = claims.Compare("rope+rand", "rope", "copy", "em_2x", ">", 0.05, non_inferior=True)
    assert no_worse.judge(tie)[1] == "uninformative"  # a shared floor shows neither "as good" nor "better"
    worse = [*_runs("rope", 8, [4, 4, 4]), *_runs("rope+rand", 8, [0, 0, 0])]  # decided, not a tie
    assert better.judge(worse)[1] == "disagrees"
    both_learn = [*_runs("rope", 8, [0, 0, 0]), *_runs("rope+rand", 8, [0, 0, 0])]
    assert claims.Converges("rope+rand", "rope", "copy", ">").judge(both_learn)[1] == "uninformative"
    assert claims.Converges("rope+rand", "rope", "copy", ">=").judge(both_learn)[1] == "uninformative"


def test_claims_table_shows_only_claims_whose_task_ran():
    rows = claims.claims(_runs("rope", 8, [8, 8, 8]))
    sources = {r["claim"] for r in rows}
    assert 'RoPE "excellent extrapolation"' in sources
    assert not any("perplexity" in r["claim"] for r in rows)  # LM claims about rope: no LM run


def test_measured_notes_page_names_the_verdicts():
    records = [*_runs("rope", 8, [8] * 8), *_runs("t5", 8, [0, 1, 0, 0, 0, 1, 0, 0])]
    selected = notes.with_measurements(
        claims.notes_measurements(records), command="posenc compare --profile notes"
    )
    page = notes.markdown(selected=selected, measured_by="posenc compare --profile notes")
    assert "| **contradicted** |" in page and "`posenc compare --profile notes`" in page
    v18 = next(c for c in selected if c.id == "V18")
    assert v18.verdict == notes.HOLDS and "RoPE" in notes.render_truth(v18, {})


def test_a_variant_that_learns_where_the_default_does_not_counts_as_better():
    records = [
        *_runs("learned", 0, [0] * 6, converged=False),
        *_runs("learned[scaled-emb]", 8, [0] * 6),
        *_runs("sinusoidal", 0, [0, 0, 0], converged=False),
        *_runs("sinusoidal[concat]", 0, [0, 0, 0], converged=False),
    ]
    got = claims.notes_measurements(records)
    verdict, text = got["open:scaling"]
    assert verdict == notes.HOLDS and "learned[scaled-emb]: 6/6 seeds converged, learned: 0/6" in text
    assert "Boschloo p = 0.000 (more often)" in text  # 6/6 against 0/6
    three = [*_runs("learned", 0, [0] * 3, converged=False), *_runs("learned[scaled-emb]", 8, [0] * 3)]
    ours, verdict, _ = claims.Converges("learned[scaled-emb]", "learned", "copy").judge(three)
    assert verdict == "agrees" and "Boschloo p = 0.016 (more often)" in ours  # its own test, alone
    assert claims.notes_measurements(three)["open:scaling"][0] == notes.INCONCLUSIVE  # not in the family
    verdict, text = got["open:add_vs_concat"]  # neither learns: a tie at the floor, not "no worse"
    assert verdict == notes.INCONCLUSIVE and "0/3 seeds converged" in text and "not measured" in text
    assert "(uninformative)" in text
    ours, verdict, _ = claims.Converges("learned[scaled-emb]", "learned", "copy").judge(records[3:7])
    assert (ours, verdict) == ("learned[scaled-emb]: 1/1 seeds converged, learned: 0/3 (copy)", "undecided")
    ours, verdict, _ = claims.Converges("sinusoidal[concat]", "sinusoidal", "copy").judge(records)
    assert verdict == "uninformative"  # 0/3 against 0/3: a tie at the floor
    partial = [
        *_runs("a", 8, [0, 0, 0]),
        *_runs("b", 8, [0, 0, 0], converged=False)[:2],
        _record("b", 2, 8, 0),
    ]
    ours, verdict, _ = claims.Converges("a", "b", "copy").judge(partial)  # 3/3 against 1/3
    assert verdict == "inconclusive" and "(more often)" in ours  # Boschloo p = 0.1: not shown
    one_seed = claims.fmt_cell(
        claims.stats.cell(records[6:7], label="learned[scaled-emb]", task="copy", column="em_in"),
        percent=True,
    )
    assert one_seed.endswith("(1 seed)")
