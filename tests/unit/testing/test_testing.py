"""posenc.testing can fail: classes each breaking one property are caught by that property,
with numbers, and the report and pytest form say which."""

from __future__ import annotations

import pytest
import torch

import posenc
import posenc.testing
from posenc.encoding.base import AdditiveEncoding
from posenc.registry import BUILTINS

Sinusoidal = BUILTINS["sinusoidal"]
ALiBi = BUILTINS["alibi"]
RoPE = BUILTINS["rope"]


class BatchMean(Sinusoidal):
    """Adds the batch mean to every row: rows are no longer independent."""

    def embed(self, x, *, positions=None):
        return super().embed(x, positions=positions) + x.mean(dim=0, keepdim=True)


class AbsoluteALiBi(ALiBi):
    """Claims translation invariance but adds the query position."""

    translation_invariant = True

    def evaluate(self, q_pos, k_pos, head):
        out = super().evaluate(q_pos, k_pos, head)
        return out + 0.01 * q_pos.to(out.dtype)

    def bias_fn(self, q_pos, k_pos, head):
        return self.evaluate(q_pos, k_pos, head)


class WrongReference(Sinusoidal):
    """Its NumPy reference is off by 1e-3."""

    def numpy_reference(self, x, positions):
        return super().numpy_reference(x, positions) + 1e-3


class ReadsValues(Sinusoidal):
    """Breaks the graph in its hook (as host-side reads do): torch.compile(fullgraph=True) refuses it."""

    def embed(self, x, *, positions=None):
        torch._dynamo.graph_break()
        return super().embed(x, positions=positions)


class IgnoresPositions(RoPE):
    """Rotates by arange(n) whatever the positions: padding, packing and the KV cache break."""

    def rotate(self, q, k, *, q_positions=None, k_positions=None, layout="bhsd"):
        return super().rotate(q, k, layout=layout)


class Undocumented(AdditiveEncoding):
    Config = Sinusoidal.Config
    paper = ""

    def encode(self, positions):
        return torch.zeros(*positions.shape, self.config.dim)


@pytest.mark.parametrize(
    ("cls", "broken"),
    [
        (BatchMean, {"offsets", "numpy_reference"}),
        # a false declaration also misleads the fast path, which then evaluates the bias per distance
        (AbsoluteALiBi, {"relative_invariance", "padding", "packing", "kv_cache"}),
        (WrongReference, {"numpy_reference"}),
        (ReadsValues, {"compile"}),
        # RoPE is shift-invariant: padding holds; its cos_sin (what transformers' models use) disagrees
        (IgnoresPositions, {"kv_cache", "numpy_reference", "capabilities"}),
        (Undocumented, {"declares"}),
    ],
)
def test_each_broken_property_is_caught(cls, broken):
    report = posenc.testing.check_encoding(cls)
    assert {r.name for r in report.failures} == broken, str(report)
    assert not report.passed and "FAIL" in str(report)
    for result in report.failures:
        assert result.detail
    numeric = [
        r
        for r in report.failures
        if r.name in ("offsets", "padding", "packing", "kv_cache", "numpy_reference")
    ]
    for result in numeric:
        assert result.numbers["max_abs_diff"] > result.numbers["tolerance"]
    with pytest.raises(AssertionError, match=sorted(broken)[0]):
        posenc.testing.assert_encoding(cls)


def test_report_shape_and_selection():
    report = posenc.testing.check_encoding("alibi", properties=["padding", "gradients"])
    assert [r.name for r in report.results] == ["padding", "gradients"]
    assert report["padding"].passed and report["gradients"].passed is None  # nothing to differentiate
    data = report.to_dict()
    assert data["passed"] and [r["status"] for r in data["results"]] == ["PASS", "SKIP"]
    with pytest.raises(posenc.PosencError, match="unknown property 'padd'"):
        posenc.testing.check_encoding("alibi", properties=["padd"])
    with pytest.raises(posenc.PosencError, match="unknown config key 'bse'"):
        posenc.testing.check_encoding("rope", bse=3.0)
    with pytest.raises(posenc.PosencTypeError):
        posenc.testing.check_encoding(3)  # type: ignore[arg-type]


def test_config_and_instances():
    report = posenc.testing.check_encoding("rope", base=100.0, properties=["numpy_reference"])
    assert report.passed and report["numpy_reference"].passed
    rope = posenc.build("rope", head_dim=8, layout="interleaved")
    assert posenc.testing.check_encoding(rope, properties=["numpy_reference", "kv_cache"]).passed


def test_posenc_check_command():
    from click.testing import CliRunner

    from posenc.cli import main

    runner = CliRunner()
    ok = runner.invoke(main, ["check", "alibi", "--property", "padding", "--property", "kv_cache"])
    assert ok.exit_code == 0, ok.output
    assert "padding" in ok.output and "2 passed, 0 failed" in ok.output
    failing = runner.invoke(
        main, ["check", "tests.unit.testing.test_testing:WrongReference", "--format", "json"]
    )
    assert failing.exit_code == 1
    data = __import__("json").loads(failing.output)
    assert not data["passed"] and {r["name"] for r in data["results"] if r["status"] == "FAIL"} == {
        "numpy_reference"
    }
    configured = runner.invoke(
        main, ["check", "rope", "--config", "base=500.0", "--property", "numpy_reference"]
    )
    assert configured.exit_code == 0, configured.output
    bad = runner.invoke(main, ["check", "no_such_module_xyz:Enc"])
    assert bad.exit_code == 2 and "cannot import module" in bad.output
