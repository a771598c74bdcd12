"""The notes' claims about trained models, judged from benchmark records by seed-level tests, the claims
shown corrected together as one family (Holm)."""

from __future__ import annotations

from posenc.analysis import notes
from posenc.results import claims


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
