"""The HTML report (``posenc.report``): one self-contained page with a section for every registered encoding,
and the same page in a real headless browser (marked ``browser``)."""

from __future__ import annotations

import base64
import html
import io
import os
import re
import shutil

import pytest
from click.testing import CliRunner
from PIL import Image

import posenc
from posenc.cli import main
from posenc.report import build_report

# A reduced report (few figure kinds, no model probes, low dpi) keeps this file fast;
# `posenc report` with defaults draws every figure kind through the same code.
FAST = dict(figure_kinds=("similarity", "bias", "decay"), probes_enabled=False, dpi=30, progress=False)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    path = build_report(tmp_path_factory.mktemp("report"), **FAST)
    assert path.name == "index.html"
    return path.read_text(encoding="utf-8")


def test_every_registered_encoding_has_its_section(page):
    for name, cls in posenc.ENCODINGS.items():
        match = re.search(rf'<section id="enc-{re.escape(name)}"[^>]*>(.*?)</section>', page, re.S)
        assert match, f"no section for {name}"
        section = match.group(1)
        assert html.escape(cls.equation, quote=True) in section, f"{name}: equation missing"
        assert html.escape(cls.paper, quote=True) in section, f"{name}: paper missing"
        for field in cls.Config.parameters():
            assert f"<td>{field}</td>" in section, f"{name}: parameter {field} missing"
        assert "learnable parameters" in section  # the property table


def test_comparison_tables_list_every_encoding(page):
    comparison = re.search(r'<section id="comparison">(.*?)</section>', page, re.S).group(1)
    for name in posenc.ENCODINGS:
        assert f"<td>{name}</td>" in comparison


def test_self_contained_no_external_resources(page):
    # Every src/href is a data: URI or an in-page anchor; no scripts, stylesheets or fonts from outside.
    for attr, value in re.findall(r'\b(src|href)\s*=\s*"([^"]*)"', page):
        assert value.startswith(("data:", "#")), f"{attr}={value[:60]!r} points outside the page"
    assert "<link" not in page and "<script" not in page and "@import" not in page
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page)
    assert "<style>" in page  # the CSS is inline


def test_every_image_is_an_inline_png_that_decodes(page):
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert len(sources) >= len(posenc.ENCODINGS)  # at least a figure per encoding on average
    for uri in sources:
        prefix = "data:image/png;base64,"
        assert uri.startswith(prefix)
        with Image.open(io.BytesIO(base64.b64decode(uri[len(prefix) :]))) as image:
            assert image.format == "PNG" and image.width > 20 and image.height > 20


def test_seed_checks_are_reported(page):
    checks = re.search(r'<section id="claims">(.*?)</section>', page, re.S).group(1)
    assert "widely shared tutorial" in checks and "M_k" in checks and "integer indices" in checks


def test_the_notes_claims_and_corrections_are_reported(page):
    from posenc.analysis import notes

    section = re.search(r'<section id="notes">(.*?)</section>', page, re.S).group(1)
    assert 'href="#notes"' in page
    for c in notes.CLAIMS:
        assert f"<td>{c.id}</td>" in section, c.id
    for c in notes.claims(verdict="corrected"):
        assert f'data-claim="{c.id}"' in section, c.id
    flat = html.unescape(" ".join(section.split()))
    for shown in (
        "q^T R_{n-m} k = -1.9417",
        "0.046 at 400",
        "nn, num_heads, relative_position_to_bucket",
        "47,117",
    ):
        assert shown in flat, shown
    measured = notes.measured_claims()  # what posenc compare --profile notes settled, shipped
    pending = [c for c in measured if c.verdict == notes.PENDING]
    assert ("pending: measured by posenc compare" in flat) == bool(pending)
    settled = [c for c in measured if c.measure is not None and c.verdict != notes.PENDING]
    assert settled  # the shipped verdicts of the notes grid
    for c in settled:  # each with what was measured ("Holds: ... 4% [0, 10] ...")
        assert c.truth.split(" (")[0] in flat, c.id


def test_results_dir_adds_the_benchmark_section(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    name = next(iter(posenc.ENCODINGS))
    path = build_report(tmp_path / "out", results_dir=results, encodings=[name], **FAST)
    text = path.read_text(encoding="utf-8")
    assert 'id="extrapolation"' in text and 'href="#extrapolation"' in text
    with pytest.raises(FileNotFoundError):
        build_report(tmp_path / "out2", results_dir=tmp_path / "missing", encodings=[name], **FAST)


def test_cli_report(tmp_path):
    name = next(iter(posenc.ENCODINGS))
    runner = CliRunner()
    args = [
        "report",
        "-o",
        str(tmp_path),
        "--encoding",
        name,
        "--figure",
        "decay",
        "--dpi",
        "30",
        "--no-progress",
    ]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f'id="enc-{name}"' in (tmp_path / "index.html").read_text(encoding="utf-8")
    bad = runner.invoke(main, ["report", "-o", str(tmp_path), "--encoding", "no_such_encoding"])
    assert bad.exit_code == 2 and "unknown encoding" in bad.output


# ---------------------------------------------------------------------------
# In a real headless Chromium (Debian's package, driven by playwright): what only a browser can check.
# Every <img> decodes (naturalWidth > 0), the page logs no console errors, every registered encoding's
# section is rendered, and a screenshot can be taken. Skipped only when CI is unset AND chromium or
# playwright is missing; under CI=true a missing browser is a failure.
# ---------------------------------------------------------------------------


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


@pytest.mark.browser
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
