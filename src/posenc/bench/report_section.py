"""The benchmark's section of the HTML report: curves, the summary table, and the papers' claims.

``render(results_dir) -> str`` returns an HTML *fragment* (one ``<section>``,
images inline as base64 PNG) that ``posenc report --results DIR`` embeds;
:func:`write_page` wraps it into a standalone page for ``posenc compare``.

Each published claim (what the papers report, see docs/benchmark.md) sits next to
what we measured and a verdict: ``agrees``, ``partly``, ``disagrees`` or
``not measured`` (the runs needed are missing). The verdict rules are written
next to each claim; they compare *directions and orderings*, never absolute
numbers: a 150k-parameter CPU model is not a 247M-parameter WikiText model.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posenc.bench.store import ResultStore, atomic_write_text
from posenc.bench.tables import BUCKETS, _fmt, summarize, table_columns
from posenc.viz.extrapolation import figure_base64, figures

HOLDS = 1.10  # a perplexity ratio <= this counts as "holds" (does not degrade)


def _get(summary: dict[str, Any], label: str, key: str) -> float:
    value = summary["rows"].get(label, {}).get(key, math.nan)
    return math.nan if value is None else float(value)


def _present(x: float) -> bool:
    return not math.isnan(x)


Claim = dict[str, Any]  # source, claim, paper, ours, verdict, rule


def _claim(source: str, claim: str, paper: str, ours: str, verdict: str, rule: str) -> Claim:
    return {"source": source, "claim": claim, "paper": paper, "ours": ours, "verdict": verdict, "rule": rule}


def _alibi_ratios(summary: dict[str, Any]) -> list[Claim]:
    paper = {"sinusoidal": (2.17, 6.6), "rope": (1.06, 1.57), "t5": (0.96, 1.04), "alibi": (0.95, 0.93)}
    out = []
    for name, (two, five) in paper.items():
        ours2, ours4 = _get(summary, name, "lm:ratio_2x"), _get(summary, name, "lm:ratio_4x")
        if not _present(ours2):
            verdict = "not measured"
        else:
            same = [(p <= HOLDS) == (o <= HOLDS) for p, o in ((two, ours2), (five, ours4)) if _present(o)]
            verdict = "agrees" if all(same) else ("partly" if any(same) else "disagrees")
        out.append(
            _claim(
                "ALiBi paper (Press et al. 2022), WikiText-103, L_train 512",
                f"{name}: perplexity ratio at 2x and ~5x L_train",
                f"{two:.2f} / {five:.2f}",
                f"{_fmt(ours2, False)} / {_fmt(ours4, False)} (2x / 4x)",
                verdict,
                f"same side of {HOLDS} (holds vs degrades) at each length; we stop at 4x",
            )
        )
    return out


def _unseen_score(summary: dict[str, Any], label: str, task: str) -> tuple[float, float]:
    """(exact match, token accuracy) averaged over the 2x and 4x buckets; token accuracy breaks ties."""
    out = []
    for metric in ("em", "tok"):
        values = [_get(summary, label, f"{task}:{metric}_{b}") for b in ("2x", "4x")]
        values = [v for v in values if _present(v)]
        out.append(sum(values) / len(values) if values else -1.0)
    return out[0], out[1]


def _reciprocal_ranks(scores: dict[str, tuple[float, float]]) -> dict[str, float]:
    """1/rank per name, higher score first; tied names share the mean of their reciprocal ranks."""
    ordered = sorted(scores, key=lambda n: scores[n], reverse=True)
    out, i = {}, 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and scores[ordered[j + 1]] == scores[ordered[i]]:
            j += 1
        share = sum(1 / r for r in range(i + 1, j + 2)) / (j - i + 1)
        out.update({name: share for name in ordered[i : j + 1]})
        i = j + 1
    return out


def _kendall_tau(ours: dict[str, float], paper: dict[str, float]) -> float:
    """Kendall tau-a between two scorings of the same names (ties count as neither)."""
    names = [n for n in paper if n in ours]
    pairs = total = 0
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            x, y = names[a], names[b]
            pairs += 1
            total += _sign(ours[x] - ours[y]) * _sign(paper[x] - paper[y])
    return total / pairs if pairs else math.nan


def _sign(x: float) -> int:
    return (x > 1e-12) - (x < -1e-12)


def _nope_ranking(summary: dict[str, Any]) -> list[Claim]:
    paper_order = ["nope", "t5", "alibi", "rope", "sinusoidal"]
    paper_mrr = {"nope": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}
    tasks = [t for t in summary["tasks"] if t != "lm"]
    present = [n for n in paper_order if n in summary["rows"]]
    if len(present) < 3 or not tasks:
        return [
            _claim("NoPE paper (Kazemnejad et al. 2023)", "length-generalisation ranking by mean reciprocal rank",
                   " > ".join(paper_order), "need >= 3 of these encodings on a synthetic task", "not measured", "")
        ]  # fmt: skip
    mrr = {n: 0.0 for n in present}
    for task in tasks:
        for name, rr in _reciprocal_ranks({n: _unseen_score(summary, n, task) for n in present}).items():
            mrr[name] += rr / len(tasks)
    ours = sorted(present, key=lambda n: -mrr[n])
    tau = _kendall_tau(mrr, paper_mrr)
    verdict = "agrees" if tau >= 0.6 else ("partly" if tau > 0 else "disagrees")
    return [
        _claim(
            "NoPE paper (Kazemnejad et al. 2023), 10 tasks, train <= 20, test <= 40",
            "ranking by mean reciprocal rank on unseen lengths",
            " > ".join(f"{n} {paper_mrr[n]:.2f}" for n in paper_order),
            " > ".join(f"{n} {mrr[n]:.2f}" for n in ours) + f" ({len(tasks)} task(s); Kendall tau {tau:.2f})",
            verdict,
            "rank per task by exact match, then token accuracy, in the 2x and 4x buckets (ties share a rank); "
            "agrees if tau >= 0.6, partly if > 0",
        )
    ]


def _nope_copy(summary: dict[str, Any]) -> list[Claim]:
    expect = {"nope": "high", "t5": "high", "rope": "low", "sinusoidal": "low", "learned": "low"}
    out = []
    for name, level in expect.items():
        ours = _get(summary, name, "copy:em_2x")
        if not _present(ours):
            verdict = "not measured"
        elif level == "high":
            verdict = "agrees" if ours >= 0.9 else ("partly" if ours >= 0.5 else "disagrees")
        else:
            verdict = "agrees" if ours <= 0.1 else ("partly" if ours <= 0.5 else "disagrees")
        out.append(
            _claim(
                "NoPE paper (Kazemnejad et al. 2023), copy task",
                f"{name}: exact match past the training length",
                "~100%" if level == "high" else "~0%",
                f"{_fmt(ours, True)} (copy, 2x bucket)",
                verdict,
                ">= 90% (high) or <= 10% (low) agrees; halfway counts as partly",
            )
        )
    return out


def _lastk(records: list[dict[str, Any]]) -> list[Claim]:
    paper = {"rope": "explodes at 1.2-1.4x", "nope": "holds to ~1.5x", "alibi": "holds to ~1.5x"}
    out = []
    for name, text in paper.items():
        rec = next((r for r in records if r["label"] == name and r["spec"]["task"] == "lm"), None)
        if rec is None:
            out.append(_claim("NoPE paper, last-k loss (1B code model)", name, text, "-", "not measured", ""))
            continue
        lk = rec["result"]["eval"]["default"]["lastk"]
        l_train = rec["spec"]["train"]["max_len"]
        loss = {c / l_train: float(v) for c, v in zip(lk["contexts"], lk["nats_per_byte"])}
        base = loss.get(1.0, math.nan)
        at = loss.get(1.5, math.nan)
        rise = at / base - 1 if base and _present(at) else math.nan
        exploded = rise > 0.10
        verdict = (
            "not measured"
            if not _present(rise)
            else ("agrees" if exploded == (name == "rope") else "disagrees")
        )
        out.append(
            _claim(
                "NoPE paper (Kazemnejad et al. 2023), last-k loss, 1B code model",
                f"{name}: loss on the last {lk['k']} bytes as the context grows",
                text,
                f"{100 * rise:+.0f}% loss at 1.5x vs 1x" if _present(rise) else "-",
                verdict,
                "explodes = last-k loss at 1.5x L_train more than 10% above 1x",
            )
        )
    return out


def _randomized(summary: dict[str, Any]) -> list[Claim]:
    gains = []
    for label in summary["rows"]:
        if not label.endswith("+rand"):
            continue
        base = label[: -len("+rand")]
        for task in summary["tasks"]:
            if task == "lm":
                continue
            for bucket in ("2x", "4x"):
                a = _get(summary, label, f"{task}:tok_{bucket}")
                b = _get(summary, base, f"{task}:tok_{bucket}")
                if _present(a) and _present(b):
                    gains.append(a - b)
    if not gains:
        return [_claim("Randomized positions (Ruoss et al. 2023)", "+12.0% average accuracy on unseen lengths",
                       "+12.0%", "-", "not measured", "")]  # fmt: skip
    mean = sum(gains) / len(gains)
    return [
        _claim(
            "Randomized positions (Ruoss et al. 2023), 15 tasks",
            "randomized positions improve accuracy on unseen lengths",
            "+12.0% average",
            f"{100 * mean:+.1f}% (answer-token accuracy, {len(gains)} task x bucket pairs)",
            "agrees" if mean > 0.02 else ("partly" if mean > 0 else "disagrees"),
            "mean gain of X+rand over X in the 2x and 4x buckets; > +2 points agrees",
        )
    ]


def _context_extension(summary: dict[str, Any]) -> list[Claim]:
    """Each scaling with factor s is judged at s x L_train (4x for s >= 4, else 2x) against plain RoPE."""
    out = []
    for label in summary["rows"]:
        if not label.startswith("rope["):
            continue
        kind, _, factor = label[len("rope[") : -1].partition(":")
        key = "lm:ratio_4x" if float(factor or 0) >= 4 else "lm:ratio_2x"
        where = key[-2:]
        ours, plain = _get(summary, label, key), _get(summary, "rope", key)
        if not _present(ours):
            continue
        expected_hold = kind in ("dynamic", "yarn")
        holds = ours <= HOLDS or (_present(plain) and ours < plain)
        if expected_hold:
            verdict = "agrees" if holds else "disagrees"
            if holds and _present(plain) and plain <= HOLDS:
                verdict = "partly"  # plain RoPE did not blow up here, so the contrast is untested
        else:
            verdict = "agrees" if not holds else "partly"
        out.append(
            _claim(
                "Context extension without fine-tuning (dynamic NTK, YaRN; PI needs fine-tuning)",
                f"{label}: perplexity ratio at {where} L_train",
                "holds where plain RoPE blows up" if expected_hold else "needs fine-tuning",
                f"{_fmt(ours, False)} (plain rope {_fmt(plain, False)})",
                verdict,
                f"holds = ratio <= {HOLDS} or below plain RoPE's; partly if plain RoPE held too",
            )
        )
    return out


def _speed(summary: dict[str, Any]) -> list[Claim]:
    task = next((t for t in summary["tasks"] if t != "lm"), "lm")
    sin, t5 = (_get(summary, n, f"{task}:steps_per_second") for n in ("sinusoidal", "t5"))
    if not (_present(sin) and _present(t5)):
        return []
    ratio = sin / t5
    return [
        _claim(
            "ALiBi paper (Press et al. 2022)",
            "T5 bias trains >= 2x slower than sinusoidal",
            ">= 2x",
            f"{ratio:.2f}x ({task}, steps/s)",
            "agrees" if ratio >= 2 else ("partly" if ratio > 1.2 else "disagrees"),
            "sinusoidal steps/s over T5 steps/s (tiny model: attention is a small share of the cost)",
        )
    ]


def _bias_family(summary: dict[str, Any]) -> list[Claim]:
    alibi = _get(summary, "alibi", "lm:ratio_4x")
    out = []
    for name in ("kerple_log", "kerple_power", "sandwich", "fire"):
        ours = _get(summary, name, "lm:ratio_4x")
        if not (_present(ours) and _present(alibi)):
            continue
        out.append(
            _claim(
                "KERPLE / Sandwich / FIRE papers",
                f"{name} extrapolates at least as well as ALiBi",
                "<= ALiBi",
                f"{_fmt(ours, False)} vs ALiBi {_fmt(alibi, False)} (LM ratio at 4x)",
                "agrees" if ours <= alibi * 1.05 else "disagrees",
                "LM perplexity ratio at 4x within 5% of ALiBi's or better",
            )
        )
    return out


CHECKS: list[Callable[..., list[Claim]]] = [
    _alibi_ratios,
    _nope_ranking,
    _nope_copy,
    _randomized,
    _context_extension,
    _speed,
    _bias_family,
]


def claims(records: list[dict[str, Any]]) -> list[Claim]:
    """Every claim row for these records (the same rows the HTML shows)."""
    summary = summarize(records)
    rows = []
    for check in CHECKS:
        rows += check(summary)
    rows += _lastk(records)
    return rows


def _table(headers: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _summary_html(summary: dict[str, Any]) -> str:
    cols = table_columns(summary)
    rows = [
        [html.escape(label)] + [_fmt(entry.get(key, math.nan), pct) for _, key, pct in cols]
        for label, entry in summary["rows"].items()
    ]
    return _table(["encoding"] + [c[0] for c in cols], rows, "posenc-summary")


_VERDICT_COLOUR = {
    "agrees": "#1a7f37",
    "partly": "#9a6700",
    "disagrees": "#cf222e",
    "not measured": "#57606a",
}


def _claims_html(rows: list[Claim]) -> str:
    cells = [
        [
            html.escape(r["source"]),
            html.escape(r["claim"]),
            html.escape(r["paper"]),
            html.escape(r["ours"]),
            f'<b style="color:{_VERDICT_COLOUR[r["verdict"]]}">{html.escape(r["verdict"])}</b>',
            f"<small>{html.escape(r['rule'])}</small>",
        ]
        for r in rows
    ]
    return _table(["source", "claim", "paper", "ours", "verdict", "rule"], cells, "posenc-claims")


_CAPTIONS = {
    "exact_match": "Sequence exact match vs input length; dotted line: longest training length.",
    "token_accuracy": "Answer-token accuracy vs input length.",
    "lm_ratio": "Perplexity at L_valid over perplexity at L_train, non-overlapping windows (ALiBi protocol).",
    "lm_lastk": "Loss on the same last k bytes as the context grows (NoPE paper's protocol).",
    "lm_loss_by_position": "Loss at each position of long windows; learned absolute should break at L_train.",
}


def render(results_dir: str | Path) -> str:
    """HTML fragment for ``posenc report``: curves, summary table, claims vs measurements."""
    records = ResultStore(results_dir).records()
    parts = ['<section class="posenc-compare">', "<h2>Train short, test long (posenc compare)</h2>"]
    if not records:
        parts.append(f"<p>No finished runs under <code>{html.escape(str(results_dir))}</code>.</p></section>")
        return "\n".join(parts)
    summary = summarize(records)
    profiles = sorted({r["spec"].get("profile") or "?" for r in records})
    seeds = sorted({r["spec"]["seed"] for r in records})
    v = records[0]["versions"]
    parts.append(
        f"<p>{len(records)} runs; profile(s) {html.escape(', '.join(profiles))}; seeds {seeds}; "
        f"python {html.escape(v['python'])}, torch {html.escape(v['torch'])}, posenc {html.escape(v['posenc'])}. "
        f"Buckets: {', '.join(b for b, _, _ in BUCKETS)} = n up to 1x / 2x / 4x the longest training n.</p>"
    )
    parts.append("<h3>Summary</h3>" + _summary_html(summary))
    parts.append("<h3>Published claims next to our measurements</h3>")
    parts.append(
        "<p>A tiny CPU model trained for minutes may disagree with papers that trained large models for days; "
        "the verdicts compare directions and orderings only.</p>"
    )
    parts.append(_claims_html(claims(records)))
    parts.append("<h3>Curves</h3>")
    for stem, fig in figures(records).items():
        caption = next((c for k, c in _CAPTIONS.items() if stem.endswith(k) or stem == k), stem)
        parts.append(
            f'<figure><img alt="{html.escape(stem)}" src="data:image/png;base64,{figure_base64(fig)}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    parts.append("</section>")
    return "\n".join(parts)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>posenc compare</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #d0d7de; padding: 0.3em 0.6em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.posenc-claims td {{ text-align: left; }}
figure img {{ max-width: 100%; }}
</style></head><body>
{body}
</body></html>
"""


def write_page(results_dir: str | Path, path: str | Path | None = None) -> Path:
    """A standalone HTML page holding only this section (``posenc compare`` writes it to ``report.html``)."""
    target = Path(path) if path is not None else Path(results_dir) / "report.html"
    atomic_write_text(target, PAGE.format(body=render(results_dir)))
    return target
