"""The bias-attention path a device runs comes from measurements (posenc/kernels/bias_paths.json).

- the shipped table parses, and a device it does not list (every device today) runs the
  chunked path, as before the table;
- a rule chooses by encoding, mode, dtype and length, the dense bias never past the lengths it
  was measured at; a wrong table is one error naming the key;
- ``bias_attention(path="auto")`` runs what the table chooses (the dense bias, FlexAttention), and
  a flex choice a call cannot take runs chunked without a word;
- the dense path equals the chunked one and dense SDPA, forward and gradients;
- ``benchmarks/bias_paths.py`` turns measured times into rules, refuses a path that disagrees, and
  writes a table posenc reads (a dry run on the CPU).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tests.tolerances import tol

import posenc
from posenc.core.errors import PosencError
from posenc.kernels import _build, bias_paths
from posenc.kernels import bias_attention as module
from posenc.registry import ENCODINGS

BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]
BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def rule(cls="ALiBi", mode="fwd", dtype="float32", start=1, path="dense", at=None, **ms):
    return bias_paths.PathRule(cls, mode, dtype, start, path, at or start, ms or {path: 1.0})


def device_table(*rules):
    return bias_paths.BiasPathTable("test", {"Test GPU": bias_paths.DeviceTable("by hand", tuple(rules))})


def test_the_shipped_table_reads_and_an_unlisted_device_runs_the_chunked_path():
    shipped = bias_paths.table()
    assert isinstance(shipped.devices, dict)
    assert bias_paths.choose("No Such GPU", "ALiBi", "fwd", torch.float32, 1024) == "chunked"
    assert bias_paths.choose(None, "ALiBi", "fwd", torch.float32, 1024) == "chunked"
    assert bias_paths.device_name(torch.device("cpu")) is None


def test_a_rule_chooses_by_encoding_mode_dtype_and_length():
    table = device_table(
        rule(start=1, at=512, path="dense"), rule(start=4096, path="flex"),
        rule(cls="FIRE", mode="fwd+bwd", dtype="bfloat16", start=2048, path="flex"),
    )  # fmt: skip
    pick = lambda *a: bias_paths.choose("Test GPU", *a, paths=table)  # noqa: E731
    assert [pick("ALiBi", "fwd", torch.float32, n) for n in (1, 600, 4095, 4096, 10**6)] == [
        "dense", "dense", "dense", "flex", "flex"]  # fmt: skip
    assert pick("ALiBi", "fwd+bwd", torch.float32, 600) == "chunked"  # no rule for the backward pass
    assert pick("ALiBi", "fwd", torch.bfloat16, 600) == "chunked"  # nor for bfloat16
    assert pick("FIRE", "fwd+bwd", torch.bfloat16, 1024) == "chunked"  # before its first length
    assert pick("FIRE", "fwd+bwd", torch.bfloat16, 2048) == "flex"
    only_dense = device_table(rule(start=1, at=1024, path="dense"))
    assert bias_paths.choose("Test GPU", "ALiBi", "fwd", torch.float32, 1024, paths=only_dense) == "dense"
    assert bias_paths.choose("Test GPU", "ALiBi", "fwd", torch.float32, 1025, paths=only_dense) == "chunked"


@pytest.mark.parametrize(
    "key,value,message",
    [("mode", "bwd", "mode = 'bwd': must be one of"), ("path", "sparse", "path = 'sparse': must be one of"),
     ("dtype", "int8", "dtype = 'int8': must be one of"), ("from_length", 0, "from_length = 0: must be >= 1")],
)  # fmt: skip
def test_a_wrong_table_is_one_error_naming_the_key(key, value, message):
    entry = {"encoding": "ALiBi", "mode": "fwd", "dtype": "float32", "from_length": 1, "path": "dense",
             "measured_at": 1, "ms": {"dense": 0.1}}  # fmt: skip
    raw = {"about": "", "devices": {"GPU": {"measured": "", "rules": [{**entry, key: value}]}}}
    with pytest.raises(PosencError, match=message):
        bias_paths.parse(raw, "t.json")
    with pytest.raises(PosencError, match="t.json: .*pathh"):
        bias_paths.parse(
            {"about": "", "devices": {"GPU": {"measured": "", "rules": [{**entry, "pathh": 1}]}}}, "t.json"
        )


def test_rules_are_the_fastest_correct_path_per_length():
    times = {256: {"dense": 0.1, "chunked": 1.0, "flex": 0.5}, 1024: {"dense": 0.3, "chunked": 1.0},
             4096: {"chunked": 4.0, "flex": 3.0}, 8192: {"chunked": 8.0, "flex": 5.0}}  # fmt: skip
    found = bias_paths.rules_from_times("ALiBi", "fwd", "float32", times)
    assert [(r.from_length, r.path, r.measured_at) for r in found] == [
        (1, "dense", 256),
        (4096, "flex", 4096),
    ]
    assert found[0].ms == times[256]
    assert bias_paths.rules_from_times("ALiBi", "fwd", "float32", {1024: {"chunked": 1.0, "flex": 2.0}}) == []


@pytest.mark.parametrize("name", BIAS_NAMES)
@pytest.mark.parametrize("causal", [True, False])
def test_the_dense_path_equals_the_chunked_path_and_dense_sdpa(name, causal):
    torch.manual_seed(0)
    enc = posenc.build_for_model(name, d_model=12, num_heads=3).double()
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    allowed = torch.rand(2, 1, 5, 9, generator=g) > 0.3
    allowed[..., 0] = True  # every query may attend to some key (the first: before it under causal too)
    outs = [
        module.bias_attention(q, k, v, enc, causal=causal, allowed=allowed, path=p)
        for p in ("dense", "chunked")
    ]
    bias = enc.bias(5, 9).double().masked_fill(~allowed, float("-inf"))
    if causal:
        bias = bias.masked_fill(torch.ones(5, 9, dtype=torch.bool).triu(9 - 5 + 1), float("-inf"))
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    grads = [torch.autograd.grad(o.square().sum(), [q, k, v, *enc.parameters()]) for o in (*outs, reference)]
    for out, grad in zip(outs, grads):
        torch.testing.assert_close(out, reference, **tol(torch.float64))
        for a, b in zip(grad, grads[-1]):
            torch.testing.assert_close(a, b, **tol(torch.float64))


@pytest.fixture
def a_measured_device(monkeypatch):
    """CPU tensors look like a device the table lists (a GPU's name)."""
    monkeypatch.setattr(bias_paths, "device_name", lambda device: "Test GPU")


def test_auto_runs_the_path_the_table_chooses(a_measured_device, monkeypatch):
    calls = []
    real = {
        name: getattr(module, name)
        for name in ("dense_bias_attention", "_try_flex", "chunked_bias_attention")
    }
    for name, fn in real.items():
        monkeypatch.setattr(module, name, lambda *a, _n=name, _f=fn, **k: calls.append(_n) or _f(*a, **k))
    monkeypatch.setattr(bias_paths, "table", lambda: device_table(rule(start=1, at=64, path="dense"),
                                                                  rule(mode="fwd+bwd", start=1, at=64, path="flex")))  # fmt: skip
    enc = posenc.build_for_model("alibi", d_model=8, num_heads=2)
    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    with torch.no_grad():
        dense = module.bias_attention(q, k, v, enc, causal=True)
    assert calls == ["dense_bias_attention"]
    torch.testing.assert_close(
        dense, module.chunked_bias_attention(q, k, v, enc, causal=True), **tol(torch.float32)
    )
    calls.clear()
    with torch.no_grad():
        module.bias_attention(
            q.double(), k.double(), v.double(), enc.double(), causal=True
        )  # no float64 rule
    assert calls == ["chunked_bias_attention"]


def test_a_flex_choice_the_call_cannot_take_runs_chunked_without_a_word(
    a_measured_device, monkeypatch, caplog
):
    """Gradients on the CPU (no FlexAttention backward there), a mask, dropout: the table's flex
    choice quietly becomes the chunked path; asked for by name it says why, once."""
    monkeypatch.setattr(
        bias_paths, "table", lambda: device_table(rule(mode="fwd+bwd", start=1, at=64, path="flex"))
    )
    monkeypatch.setattr(_build, "_warned", set())
    enc = posenc.build_for_model("alibi", d_model=8, num_heads=2)
    q, k, v = (torch.randn(1, 2, 6, 4, requires_grad=True) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="posenc"):
        out = module.bias_attention(q, k, v, enc, causal=True)
    assert not [r for r in caplog.records if "FlexAttention" in r.getMessage()]
    torch.testing.assert_close(
        out, module.chunked_bias_attention(q, k, v, enc, causal=True), **tol(torch.float32)
    )
    with caplog.at_level(logging.WARNING, logger="posenc"):
        module.bias_attention(q, k, v, enc, causal=True, path="flex")
    assert [r for r in caplog.records if "FlexAttention path not used (gradients" in r.getMessage()]


def test_the_measuring_script_writes_a_table_posenc_reads(tmp_path, monkeypatch, capsys):
    """A dry run on the CPU (chunked and dense; FlexAttention compiles take minutes here)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bias_paths as script

    table, report = tmp_path / "table.json", tmp_path / "report.json"
    argv = ["--device", "cpu", "--encodings", "alibi,t5", "--lengths", "16,48", "--modes", "fwd,fwd+bwd",
            "--dtypes", "float32", "--paths", "chunked,dense", "--repeats", "1", "--out", str(report),
            "--write-table", str(table)]  # fmt: skip
    assert script.main(argv) == 0
    found = json.loads(report.read_text())
    assert len(found["cases"]) == 8 and all(set(c["ms"]) == {"chunked", "dense"} for c in found["cases"])
    written = bias_paths.parse(json.loads(table.read_text()))
    (entry,) = written.devices.values()
    assert [vars(r) for r in entry.rules] == found["rules"]
    assert "rules for cpu" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        script.main(["--paths", "dense"])  # every path is checked against the chunked one
    assert script.main([*argv[:-2], "--budget", "0"]) == 0  # no time: nothing measured, no rule
    skipped = json.loads(report.read_text())
    assert all("skipped" in c and "ms" not in c for c in skipped["cases"]) and skipped["rules"] == []


def test_the_measuring_script_refuses_a_path_that_disagrees(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bias_paths as script

    real = module.dense_bias_attention
    monkeypatch.setattr(module, "dense_bias_attention", lambda *a, **k: real(*a, **k) * 1.01)
    result = script.measure_case(
        "alibi", "fwd", torch.float32, 16, ["chunked", "dense"], torch.device("cpu"), 1
    )
    assert set(result["ms"]) == {"chunked"} and "vs float64" in result["wrong"]["dense"]


def test_the_measuring_script_never_times_a_fallback_as_flex(monkeypatch):
    """Found: FlexAttention with gradients on the CPU runs the chunked path, whose times the
    script had reported as flex's (and chose flex from them)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bias_paths as script

    result = script.measure_case(
        "t5", "fwd+bwd", torch.float32, 16, ["chunked", "flex"], torch.device("cpu"), 1
    )
    assert set(result["ms"]) == {"chunked"} and "cannot take this case" in result["wrong"]["flex"]
