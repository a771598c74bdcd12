"""The benchmark's section of the HTML report: curves, the summary table, and the papers' claims.

``render(results_dir) -> str`` returns an HTML *fragment* (one ``<section>``,
images inline as base64 PNG) that ``posenc report --results DIR`` embeds;
:func:`write_page` wraps it into a standalone page for ``posenc compare``.

Each published claim (:data:`posenc.results.claims.CLAIMS`) sits next to what we
measured, its verdict and the rule that gave it; every number is a mean with a 95%
interval over converged runs (:mod:`posenc.results.stats`).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from posenc.records.files import atomic_write_text
from posenc.records.store import ResultStore
from posenc.results.claims import claims
from posenc.results.result_figures import figure_base64, figures
from posenc.results.stats import BUCKETS
from posenc.results.tables import (
    POWER_ROWS,
    _fmt,
    caption,
    format_cell,
    power_cells,
    speed_key,
    summarize,
    table_columns,
)

__all__ = ["claims", "render", "write_page"]


def _table(headers: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _summary_html(summary: dict[str, Any]) -> str:
    cols = table_columns(summary)
    speed = speed_key(summary)
    rows = [
        [html.escape(label)]
        + [html.escape(format_cell(entry.get(key), pct)) for _, key, pct in cols]
        + [_fmt(entry.get(speed, float("nan")), False)]
        for label, entry in summary["rows"].items()
    ]
    rows += [[f"<i>{name}</i>", *row, ""] for name, row in zip(POWER_ROWS, power_cells(summary, cols))]
    table = _table(["encoding"] + [c[0] for c in cols] + ["steps/s"], rows, "posenc-summary")
    reasons = "".join(
        f"<li><code>{html.escape(key)}</code>: {html.escape(text)}</li>"
        for key, text in summary.get("reasons", {}).items()
    )
    why = f"<p>Why a cell is n.c., k/N or failed:</p><ul>{reasons}</ul>" if reasons else ""
    return table + f"<p><small>{html.escape(caption(summary))}</small></p>" + why


_VERDICT_COLOUR = {
    "agrees": "#1a7f37",
    "inconclusive": "#9a6700",
    "mixed": "#9a6700",
    "undecided": "#9a6700",
    "uninformative": "#57606a",
    "not reproduced at this scale": "#57606a",
    "disagrees": "#cf222e",
    "not measured": "#57606a",
}


def _claims_html(rows: list[dict[str, str]]) -> str:
    cells = [
        [
            html.escape(r["source"]),
            html.escape(r["claim"]),
            html.escape(r["paper"]),
            html.escape(r["ours"]),
            f'<b style="color:{_VERDICT_COLOUR.get(r["verdict"], "#57606a")}">{html.escape(r["verdict"])}</b>',
            f"<small>{html.escape(r.get('scale', ''))}</small>",
            f"<small>{html.escape(r['rule'])}</small>",
        ]
        for r in rows
    ]
    return _table(["source", "claim", "paper", "ours", "verdict", "scale", "rule"], cells, "posenc-claims")


_CAPTIONS = {
    "exact_match": "Sequence exact match vs length (longest row over the longest training row, in tokens); "
    "dotted line: the trained length.",
    "free_prefix": "Free-running correct prefix (greedy decoding, the model's own outputs fed back): the share "
    "of the answer right before the first error, vs length.",
    "token_accuracy": "Teacher-forced token accuracy (answer and EOS, the gold answer fed in) vs length.",
    "lm_ratio": "Perplexity at L_valid over perplexity at L_train, non-overlapping windows (ALiBi protocol).",
    "lm_lastk": "Loss on the same last k bytes as the context grows (NoPE paper's protocol).",
    "lm_loss_by_position": "Loss at each position of long windows; learned absolute should break at L_train.",
}


def _methods(records: list[dict[str, Any]]) -> list[str]:
    """One line per RoPE scaling evaluated: without training or fine-tuned, its bands, its regime."""
    out: dict[str, str] = {}
    for record in records:
        for variant, ev in record["result"]["eval"].items():
            method = ev.get("method")
            if variant == "default" or not method or variant in out:
                continue
            text = f"{variant} ({record['spec']['task']}): "
            tuned = method.get("finetune")
            text += (
                f"fine-tuned {tuned['steps']} steps at {tuned['length']} tokens before evaluation"
                if tuned
                else "applied to the trained model without training"
            )
            params = method.get("params", {})
            if "beta_fast" in params:
                text += f"; beta_fast {params['beta_fast']:.3g}, beta_slow {params['beta_slow']:.3g}"
            if method.get("bands"):
                text += f" ({method['bands']})"
            if method.get("outside_regime"):
                text += f"; outside its regime: {method['outside_regime']}"
            out[variant] = text
    return list(out.values())


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
    not_converged = sorted({f"{r['label']} ({r['spec']['task']}, seed {r['spec']['seed']})"
                            for r in records if not r["result"]["train"]["converged"]})  # fmt: skip
    parts.append(
        f"<p>{len(records)} runs; profile(s) {html.escape(', '.join(profiles))}; seeds {html.escape(str(seeds))}; "
        f"python {html.escape(v['python'])}, torch {html.escape(v['torch'])}, posenc {html.escape(v['posenc'])}. "
        f"Buckets: {', '.join(b for b, _, _ in BUCKETS)} = rows of (0, 1], (1, 1.25], (1.25, 1.5], (1.5, 2], "
        "(2, 4] x the tokens of the longest training row ([BOS] x [SEP] y). "
        "Training stops once a held-out in-distribution set is solved (tasks: exact match >= the profile's "
        "threshold; LM: its loss stops improving), or at the step cap; each encoding's learning rate was "
        "chosen by in-distribution validation only.</p>"
    )
    if not_converged:
        parts.append(
            "<p><b>Not converged in-distribution</b> (shown as n.c. and left out of curves; a failure in the claims of papers that train for fixed steps, left out of the others): "
            + html.escape("; ".join(not_converged))
            + "</p>"
        )
    parts.append("<h3>Summary</h3>" + _summary_html(summary))
    methods = _methods(records)
    if methods:
        parts.append(
            "<h3>How each RoPE scaling was used</h3><ul>"
            + "".join(f"<li>{html.escape(m)}</li>" for m in methods)
            + "</ul>"
        )
    parts.append("<h3>Published claims next to our measurements</h3>")
    parts.append(
        "<p>A tiny CPU model trained for minutes is not the papers' large models trained for days: each claim "
        "names both scales, and where the paper's is beyond the run's a disagreement reads \"not reproduced at "
        'this scale", never "disagrees". The verdicts compare directions and orderings only, and only where '
        "a test over seeds decides (fewer than 2 converged seeds on a side: undecided; both sides at the same "
        "floor or ceiling: uninformative).</p>"
    )
    parts.append(_claims_html(claims(records)))
    parts.append("<h3>Curves</h3>")
    for stem, fig in figures(records).items():
        text = next((c for k, c in _CAPTIONS.items() if stem.endswith(k) or stem == k), stem)
        parts.append(
            f'<figure><img alt="{html.escape(stem)}" src="data:image/png;base64,{figure_base64(fig)}">'
            f"<figcaption>{html.escape(text)} Band: 95% interval over seeds.</figcaption></figure>"
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
