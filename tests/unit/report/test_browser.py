"""Open the report in a real headless Chromium (Debian's package, driven by playwright).

Checks what only a browser can: every <img> decodes (naturalWidth > 0), the page logs
no console errors, every registered encoding's section is rendered, and a screenshot
can be taken. Skipped only when CI is unset AND chromium or playwright is missing;
under CI=true a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil

import pytest

import posenc
from posenc.report import build_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.browser


def _driver():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    return sync_playwright


def _require_browser():
    missing = []
    if CHROMIUM is None:
        missing.append("chromium (apt-get install chromium)")
    if _driver() is None:
        missing.append("playwright (pip install playwright)")
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"browser test cannot run under CI: missing {', '.join(missing)}")
        pytest.skip(f"missing {', '.join(missing)}")


def test_report_renders_in_headless_chromium(tmp_path):
    _require_browser()
    sync_playwright = _driver()
    # A seconds-long benchmark run, so the train-short / test-long fragment is rendered too.
    from click.testing import CliRunner

    from posenc.cli import main

    results = tmp_path / "results"
    name = next(n for n in posenc.ENCODINGS if posenc.ENCODINGS[n].kind != "none")
    args = ["compare", "--profile", "smoke", "--encodings", name, "--tasks", "copy"]
    run = CliRunner().invoke(main, args + ["--out", str(results), "--no-report", "--workers", "1"])
    assert run.exit_code == 0, run.output
    # Every encoding, a figure kind of each family, low dpi: enough to prove decoding.
    path = build_report(
        tmp_path / "report",
        results_dir=results,
        figure_kinds=("similarity", "rotation", "bias", "decay"),
        probes_enabled=False,
        dpi=40,
        progress=False,
    )
    errors: list[str] = []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh --user-data-dir
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = context.new_page()
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("requestfailed", lambda req: errors.append(f"request failed: {req.url}"))
            page.goto(path.resolve().as_uri(), wait_until="load")
            images = page.evaluate(
                "() => Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])"
            )
            sections = page.evaluate(
                "() => Array.from(document.querySelectorAll('section.encoding')).map(s => s.dataset.encoding)"
            )
            visible = page.evaluate(
                "names => names.filter(n => { const s = document.getElementById('enc-' + n);"
                " return s && s.getBoundingClientRect().height > 50; })",
                list(posenc.ENCODINGS),
            )
            has_results = page.evaluate("() => !!document.getElementById('extrapolation')")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
        finally:
            context.close()
    assert images, "the report has no images"
    broken = [alt for alt, complete, width in images if not complete or width <= 0]
    assert not broken, f"images that did not decode: {broken}"
    assert not errors, f"console errors: {errors}"
    assert sorted(sections) == sorted(posenc.ENCODINGS)
    assert sorted(visible) == sorted(posenc.ENCODINGS)
    assert has_results, "the benchmark section is missing"
    assert (tmp_path / "report.png").stat().st_size > 10_000
    out = os.environ.get("POSENC_SCREENSHOT")  # keep the screenshot for a human to look at
    if out:
        shutil.copy(tmp_path / "report.png", out)
