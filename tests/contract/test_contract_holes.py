"""The contract has no holes: classes that each break it in one way (tests/outoftree/posenc_broken,
installed nowhere, as a user's package would be) fail ``posenc check`` with a reason that names
the property or the declaration, the way scikit-learn's own suite holds deliberately broken
estimators for its estimator checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import posenc
import posenc.testing
from posenc.cli import main

OUT_OF_TREE = Path(__file__).parents[1] / "outoftree"
FAST = [p for p in posenc.testing.PROPERTIES if p != "compile"]  # compile: seconds, not needed here


@pytest.fixture
def broken(monkeypatch):
    """The broken package importable; forgotten afterwards."""
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    import posenc_broken

    yield posenc_broken
    sys.modules.pop("posenc_broken", None)


def failures(report) -> dict[str, str]:
    return {r.name: r.detail for r in report.failures}


def check(spec: str, *args: str):
    """``posenc check SPEC --format json``: (exit code, report dict)."""
    result = CliRunner().invoke(main, ["check", spec, "--format", "json", *args])
    return result.exit_code, (json.loads(result.output) if result.exit_code in (0, 1) else result.output)


# -- shapes and layouts, exactly ---------------------------------------------------------------


def test_a_rotary_that_drops_the_last_pair_fails_shapes(broken):
    report = posenc.testing.check_encoding(broken.DroppedPair, properties=FAST)
    why = failures(report)["shapes_and_dtypes"]
    assert "(3, 2, 5, 6)" in why and "(3, 2, 5, 8)" in why, why  # what came out, what went in
    code, data = check("posenc_broken:DroppedPair", *(x for p in FAST for x in ("--property", p)))
    assert code == 1 and not data["passed"]
    assert "shapes_and_dtypes" in {r["name"] for r in data["results"] if r["status"] == "FAIL"}


def test_a_rotary_that_ignores_layout_fails_layout_and_nothing_else(broken):
    report = posenc.testing.check_encoding(broken.IgnoresLayout, properties=FAST)
    assert set(failures(report)) == {"layout"}, str(report)
    assert "layout" in failures(report)["layout"] and "bshd" in failures(report)["layout"]
    assert report["shapes_and_dtypes"].passed  # its shapes are right in the layout it reads
    fixed = posenc.testing.check_encoding(broken.PlainTurn, properties=FAST)
    assert fixed.passed and fixed["layout"].passed, str(fixed)


def test_every_kind_has_its_output_shapes_checked_against_its_input():
    """Each kind's hook is fed queries and keys of different lengths; the builtins pass."""
    for name in ("sinusoidal", "rope", "alibi", "shaw", "cope", "nope"):
        report = posenc.testing.check_encoding(name, properties=["shapes_and_dtypes"])
        assert report.passed, str(report)
        detail = report["shapes_and_dtypes"].detail
        assert "5 queries and 7 keys" in detail, detail


# -- NaN: a reason in every property that compares, never an internal error or a false PASS -------


#: The properties that compare what each NaN class returns (the others do not apply to it).
NAN_COMPARED = {
    "NaNOutput": {
        "shapes_and_dtypes", "default_positions", "offsets", "padding", "packing", "kv_cache",
        "gradients", "numpy_reference", "compile",
    },
    "NaNTurn": {
        "shapes_and_dtypes", "layout", "default_positions", "offsets", "padding", "packing",
        "kv_cache", "grouped_kv", "relative_invariance", "gradients", "compile",
    },
    "NaNRoPE": {
        "shapes_and_dtypes", "layout", "default_positions", "offsets", "padding", "packing",
        "kv_cache", "grouped_kv", "relative_invariance", "capabilities", "gradients",
        "numpy_reference", "compile",
    },
}  # fmt: skip


def _assert_nan_reasons(report, compared: set[str]) -> None:
    assert set(failures(report)) == compared, str(report)
    for name, why in failures(report).items():
        assert "NaN" in why, (name, why)
        assert "Expected reduction dim" not in why and "not deterministic" not in why, (name, why)
        assert not why.startswith("raised"), (name, why)  # a reason, not an exception from inside
    assert not any(r.passed for r in report.results if r.name in compared)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NAN_COMPARED))
def test_nan_outputs_fail_every_comparison_with_a_nan_reason(broken, name):
    _assert_nan_reasons(posenc.testing.check_encoding(getattr(broken, name)), NAN_COMPARED[name])


@pytest.mark.parametrize("name", ["NaNTurn", "NaNRoPE"])
def test_nan_from_rotate_fails_every_fast_comparison_even_where_attention_hides_it(broken, name):
    """PyTorch's fused CPU attention outputs 0 for a row of NaN scores (rotary q and k, finite v):
    grouped_kv, which compares attention outputs, must still fail, and capabilities must say NaN."""
    report = posenc.testing.check_encoding(getattr(broken, name), properties=FAST)
    _assert_nan_reasons(report, NAN_COMPARED[name] - {"compile"})


# -- a wrong output shape: every later property says so, never a raw torch error ---------------


def test_a_wrong_rotary_shape_fails_every_later_property_naming_the_shape(broken):
    report = posenc.testing.check_encoding(broken.DroppedKeyPair, properties=FAST)
    assert "(3, 2, 7, 6), the input's is (3, 2, 7, 8)" in failures(report)["shapes_and_dtypes"]
    for name in ("padding", "packing", "kv_cache", "grouped_kv", "relative_invariance"):
        why = failures(report).get(name)
        assert why is not None, (name, str(report))
        assert "shape" in why and "see shapes_and_dtypes" in why, (name, why)
        assert not why.startswith("raised"), (name, why)
    for result in report.failures:
        assert not result.detail.startswith("raised"), result.line()


# -- every declared capability has a check that names it when false ----------------------------


@pytest.mark.parametrize(
    ("name", "prop", "declaration"),
    [
        ("QueryTerm", "relative_invariance", "translation_invariant"),
        ("PerHeadTurn", "grouped_kv", "supports_grouped_kv"),
        ("ClaimsScaling", "capabilities", "supports_scaling"),
        ("LengthTurn", "kv_cache", "supports_kv_cache"),
    ],
)
def test_a_false_declaration_fails_a_property_naming_it(broken, name, prop, declaration):
    report = posenc.testing.check_encoding(getattr(broken, name), properties=FAST)
    why = failures(report).get(prop)
    assert why is not None and declaration in why, str(report)


def test_a_query_only_term_is_caught_in_the_hook_not_only_through_attention(broken):
    """Softmax cancels a term of the query position alone, so attention outputs cannot show it;
    the bias itself, shifted, does."""
    report = posenc.testing.check_encoding(broken.QueryTerm, properties=["relative_invariance"])
    why = failures(report)["relative_invariance"]
    assert why.startswith("declares translation_invariant = True, but the bias"), why
    assert report["relative_invariance"].numbers["max_abs_diff"] > 1.0  # 0.1 x the shift of 11


def test_cos_sin_is_checked_against_rotate(broken):
    class WrongTables(broken.PlainTurn):
        def cos_sin(self, positions, dtype):  # angles of the next position: not what rotate uses
            import torch

            pos = (positions + 1).double()[..., None]
            freq = self.config.base ** (
                -torch.arange(0, self.config.head_dim, 2).double() / self.config.head_dim
            )
            return (pos * freq).cos().to(dtype), (pos * freq).sin().to(dtype)

    report = posenc.testing.check_encoding(WrongTables, properties=["capabilities"])
    assert "cos_sin" in failures(report)["capabilities"], str(report)
    rope = posenc.testing.check_encoding("rope", properties=["capabilities"])
    assert rope.passed and "cos_sin()" in rope["capabilities"].detail


def test_numpy_reference_none_means_no_reference(broken):
    report = posenc.testing.check_encoding(broken.NoReference)
    assert report.passed, str(report)
    assert report["numpy_reference"].passed is None and "None" in report["numpy_reference"].detail


# -- the command line on the broken classes -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "prop", "reason"),
    [
        ("DroppedPair", "shapes_and_dtypes", "(3, 2, 5, 6), the input's is (3, 2, 5, 8)"),
        ("IgnoresLayout", "layout", "rotate must honour layout"),
        ("NaNOutput", "kv_cache", "NaN in both outputs"),
        ("NaNTurn", "grouped_kv", "NaN in what rotate returned"),
        ("NaNRoPE", "capabilities", "NaN in what rotate returned"),
        ("DroppedKeyPair", "padding", "rotate returned k of shape"),
        ("QueryTerm", "relative_invariance", "declares translation_invariant = True"),
    ],
)
def test_posenc_check_fails_each_broken_class_naming_the_property(broken, name, prop, reason):
    code, data = check(f"posenc_broken:{name}", "--property", prop)
    assert code == 1 and not data["passed"], data
    (result,) = data["results"]
    assert result["name"] == prop and result["status"] == "FAIL" and reason in result["detail"], result
    table = CliRunner().invoke(main, ["check", f"posenc_broken:{name}", "--property", prop])
    assert table.exit_code == 1 and prop in table.output and "0 passed, 1 failed" in table.output


def test_a_class_that_exits_inside_a_property_is_a_failure_not_exit_0(broken):
    class Exits(broken.PlainTurn):
        def rotate(self, q, k, **kwargs):
            raise SystemExit(0)

    report = posenc.testing.check_encoding(Exits, properties=["shapes_and_dtypes", "padding"])
    assert set(failures(report)) == {"shapes_and_dtypes", "padding"}
    assert all("SystemExit" in why for why in failures(report).values())


def test_a_broken_task_fails_its_contract(broken):
    report = posenc.testing.check_task(broken.MarkerTask)
    assert "examples" in failures(report) and "ids outside" in failures(report)["examples"]
