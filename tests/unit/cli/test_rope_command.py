"""``posenc rope inspect`` through click's CliRunner."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from posenc import hf
from posenc.cli import main
from posenc.encoding.rotary import scaling as rope_scaling

YARN = [
    "--scaling",
    "yarn",
    "--factor",
    "4",
    "--original-max-position-embeddings",
    "2048",
    "--head-dim",
    "64",
]
LLAMA3 = [
    "--scaling", "llama3", "--factor", "8", "--low-freq-factor", "1", "--high-freq-factor", "4",
    "--original-max-position-embeddings", "8192", "--base", "500000", "--head-dim", "128",
]  # fmt: skip


def run(*args: str):
    return CliRunner().invoke(main, ["rope", "inspect", *args])


def run_json(*args: str) -> dict:
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_yarn_json_matches_the_library():
    report = run_json(*YARN)
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    inv_freq, attention = rope_scaling.compute(scaling, dim=64, base=10000.0)
    assert report["rope_type"] == "yarn" and len(report["pairs"]) == 32
    torch.testing.assert_close(
        torch.tensor([p["inv_freq"] for p in report["pairs"]], dtype=torch.float64), inv_freq
    )
    assert report["attention_scaling"] == pytest.approx(attention)
    first, last = report["pairs"][0], report["pairs"][-1]
    assert first["band"] == "extrapolate" and first["scale"] == pytest.approx(1.0)
    assert last["band"] == "interpolate" and last["scale"] == pytest.approx(4.0)
    for pair in report["pairs"]:  # wavelength is 2 pi / frequency, the factor default/scaled
        assert pair["wavelength"] == pytest.approx(2 * math.pi / pair["inv_freq"])
        assert pair["scale"] == pytest.approx(pair["wavelength"] / pair["default_wavelength"])
        assert 1.0 - 1e-12 <= pair["scale"] <= 4.0 + 1e-12


def test_llama3_table_shows_the_three_bands():
    result = run(*LLAMA3)
    assert result.exit_code == 0, result.output
    for word in ("rope_type=llama3", "wavelength", "high", "mid", "low"):
        assert word in result.stdout
    report = run_json(*LLAMA3)
    bands = [p["band"] for p in report["pairs"]]
    assert bands == rope_scaling.frequency_bands(
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192}, dim=128, base=500000.0)  # fmt: skip


def test_param_option_and_seq_len_for_dynamic():
    args = ["--scaling", "dynamic", "--factor", "2", "--param", "original_max_position_embeddings=1024"]
    short = run_json(*args, "--seq-len", "1000")
    long = run_json(*args, "--seq-len", "8192")
    assert all(p["scale"] == pytest.approx(1.0) for p in short["pairs"])
    assert long["pairs"][-1]["scale"] > 2.0 and long["pairs"][0]["scale"] == pytest.approx(1.0)


def test_param_parses_json_lists_for_longrope():
    short, long = [1.0] * 4, [1.0, 2.0, 4.0, 8.0]
    args = ["--scaling", "longrope", "--head-dim", "8", "--original-max-position-embeddings", "16",
            "--param", f"short_factor={json.dumps(short)}", "--param", f"long_factor={json.dumps(long)}"]  # fmt: skip
    assert [p["scale"] for p in run_json(*args, "--seq-len", "16")["pairs"]] == pytest.approx(short)
    assert [p["scale"] for p in run_json(*args, "--seq-len", "17")["pairs"]] == pytest.approx(long)


def test_hf_config_file(tmp_path):
    cfg = {"hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": 8192, "rope_theta": 10000.0,
           "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    report = run_json("--hf-config", str(path))
    kwargs = hf.from_hf(cfg)
    want, attention = rope_scaling.compute(kwargs["scaling"], dim=128, base=10000.0)
    assert report["dim"] == 128 and report["attention_scaling"] == pytest.approx(attention)
    assert [p["inv_freq"] for p in report["pairs"]] == pytest.approx(want.tolist(), rel=1e-12)


def test_default_without_scaling_changes_nothing():
    report = run_json("--head-dim", "16", "--base", "100")
    assert report["rope_type"] == "default" and report["attention_scaling"] == 1.0
    assert [p["scale"] for p in report["pairs"]] == pytest.approx([1.0] * 8)
    assert all(p["band"] is None for p in report["pairs"])


def test_plot_writes_a_png(tmp_path):
    out = tmp_path / "spectrum.png"
    result = run(*LLAMA3, "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_plot_has_log_axis_labels_and_legend(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posenc.cli import rope_command as rope_cli

    seen = {}
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, path, **kw: seen.update(fig=fig, path=path))
    monkeypatch.setattr(plt, "close", lambda fig=None: None)
    report = rope_scaling.describe(
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}, dim=32, base=10000.0
    )
    rope_cli.plot_spectrum(report, "ignored.png")
    ax = seen["fig"].axes[0]
    assert ax.get_yscale() == "log"
    assert "wavelength" in ax.get_ylabel() and "pair" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["default RoPE", "yarn scaled"] and "2048" in labels[2]
    default_line, scaled_line = ax.get_lines()[:2]
    assert list(scaled_line.get_ydata()) == pytest.approx([p["wavelength"] for p in report["pairs"]])
    assert list(default_line.get_ydata()) == pytest.approx([p["default_wavelength"] for p in report["pairs"]])
    plt.close(seen["fig"])


@pytest.mark.parametrize(
    "args,match",
    [
        (["--scaling", "yran", "--factor", "4"], "did you mean 'yarn'"),
        (["--scaling", "linear", "--factor", "0.5"], "'factor'"),
        (["--scaling", "yarn", "--factor", "4"], "original_max_position_embeddings"),
        ([*YARN, "--beta-fast", "1", "--beta-slow", "2"], "beta_fast"),
        (["--scaling", "linear", "--param", "factor"], "key=value"),
        (["--scaling", "linear", "--factor", "2", "--param", "fctor=3"], "did you mean 'factor'"),
        (["--factor", "2"], "without --scaling"),
        (["--scaling", "linear", "--factor", "2", "--head-dim", "7"], "even"),
        (["--hf-config", "/nonexistent/config.json"], "/nonexistent/config.json' does not exist"),
        (["--hf-config", "/nonexistent/config.json", "--factor", "2"], "--hf-config"),
        (
            [
                "--scaling",
                "longrope",
                "--head-dim",
                "8",
                "--original-max-position-embeddings",
                "16",
                "--param",
                "short_factor=[1,1]",
                "--param",
                "long_factor=[1,1,1,1]",
            ],
            "short_factor",
        ),  # fmt: skip
    ],
)
def test_bad_input_exits_2_with_one_line(args, match):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc: error:"), result.stderr
    assert match in lines[0]
    assert result.stdout == ""
