"""Your own hardware: --device and --precision, tested on the CPU (device selection, bfloat16
autocast, the fallbacks), and a CUDA smoke test that runs only where there is a CUDA device."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from click.testing import CliRunner

from posenc.cli import main
from posenc.compare import device
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.work import execute
from posenc.core.errors import PosencError
from posenc.records.models import build_model
from posenc.tasks import task_registry

SMOKE = get_profile("smoke")


def _spec(**changes):
    (spec,) = build_grid(SMOKE, encodings=("rope",), tasks=("copy",), seeds=(0,)).specs
    return dataclasses.replace(spec, **changes)


# ---------------------------------------------------------------------------
# Selection.
# ---------------------------------------------------------------------------


def test_auto_picks_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert device.resolve_device("auto") == "cpu" and device.resolve_device(" CPU ") == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert device.resolve_device("auto") == "mps" and device.resolve_device("mps") == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device.resolve_device("auto") == "cuda"
    assert device.resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(
        PosencError, match=r"--device cuda:2: this machine has 2 CUDA device\(s\), cuda:0 .. cuda:1"
    ):
        device.resolve_device("cuda:2")


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "cuda:-1", "", "tpu:0"])
def test_a_device_not_written_as_one_is_refused(text):
    with pytest.raises(PosencError, match="auto, cpu, cuda, cuda:N or mps"):
        device.resolve_device(text)


def test_an_absent_device_names_the_option_and_what_there_is(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(PosencError, match="--device cuda: no CUDA device here"):
        device.resolve_device("cuda")
    with pytest.raises(PosencError, match="device mps: no Apple GPU here"):
        device.resolve_device("mps", "device")


def test_bf16_is_checked_against_the_device(monkeypatch):
    assert device.check_precision("fp32", "cpu") == "fp32"
    assert device.check_precision("bf16", "cpu") == "bf16"  # the CPU's autocast computes in bfloat16
    with pytest.raises(PosencError, match="must be one of fp32, bf16"):
        device.check_precision("fp16", "cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)  # e.g. a V100
    assert not device.bf16_supported("cuda")
    with pytest.raises(PosencError, match="device cuda does not compute in bfloat16"):
        device.check_precision("bf16", "cuda")


def test_batches_move_to_the_device_and_lengths_stay():
    batch = task_registry.eval_batch("copy", 4, 3)
    assert device.to_device(batch, "cpu") is batch  # nothing to move
    moved = device.to_device(batch, "meta")  # a device every build of torch has
    assert {t.device.type for t in (moved.inputs, moved.targets, moved.loss_mask)} == {"meta"}
    assert moved.lengths.device.type == "cpu" and moved.inputs.shape == batch.inputs.shape


# ---------------------------------------------------------------------------
# Precision: bfloat16 autocast on the CPU, end to end.
# ---------------------------------------------------------------------------


def test_bf16_is_part_of_the_identity_and_the_device_is_not():
    fp32 = _spec()
    bf16 = dataclasses.replace(fp32, precision="bf16")
    assert bf16.run_id != fp32.run_id and bf16.label == "rope[bf16]" and fp32.label == "rope"
    assert dataclasses.replace(fp32, device="cuda:1").run_id == fp32.run_id
    assert "precision" not in fp32.identity() and "device" not in fp32.identity()  # old run ids kept


def test_a_bf16_run_computes_in_bfloat16_and_differs_from_fp32(monkeypatch):
    seen = []
    original = torch.nn.functional.linear

    def spy(x, *args, **kwargs):
        out = original(x, *args, **kwargs)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    bf16 = execute(_spec(precision="bf16"))
    assert torch.bfloat16 in seen  # autocast ran the projections in bfloat16
    seen.clear()
    fp32 = execute(_spec())
    assert torch.bfloat16 not in seen
    assert all(math.isfinite(x) for x in bf16["train"]["loss"])
    assert bf16["train"]["loss"] != fp32["train"]["loss"]
    assert bf16["timing"]["device"] == "cpu"


def test_the_cli_runs_bf16_on_the_cpu(tmp_path):
    out = tmp_path / "r"
    args = ["compare", "--profile", "smoke", "--encodings", "rope", "--tasks", "copy", "--seeds", "0"]
    result = CliRunner().invoke(main, [*args, "--precision", "bf16", "--device", "cpu", "--out", str(out),
                                       "--no-report", "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outcome"]["done"] == 1 and "rope[bf16]" in data["summary"]["rows"]
    info = json.loads((out / "run.json").read_text())
    assert (info["device"], info["precision"]) == ("cpu", "bf16")


def test_the_model_starts_identical_on_any_device():
    """Weights are initialised on the CPU from the seed and then moved: the same start everywhere."""
    spec = _spec()
    a, b = build_model(spec), build_model(dataclasses.replace(spec, device="meta"))
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


# ---------------------------------------------------------------------------
# On a CUDA device (skipped here: this machine has none).
# ---------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_smoke(tmp_path):
    out = tmp_path / "r"
    args = ["compare", "--profile", "smoke", "--encodings", "rope,alibi", "--seeds", "0", "--device", "cuda"]
    result = CliRunner().invoke(main, [*args, "--out", str(out), "--no-report", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outcome"]["done"] == 4 and not data["outcome"]["failed"]
    for path in (out / "runs").glob("*/*.json"):
        record = json.loads(path.read_text())
        assert record["result"]["timing"]["device"].startswith("cuda:0")
        assert all(math.isfinite(x) for x in record["result"]["train"]["loss"])
    cpu = execute(_spec())
    gpu = execute(_spec(device="cuda"))
    torch.testing.assert_close(
        torch.tensor(gpu["train"]["loss"]), torch.tensor(cpu["train"]["loss"]), rtol=1e-3, atol=1e-3
    )  # the same data and initialisation; only the arithmetic differs
    if device.bf16_supported("cuda"):
        assert all(math.isfinite(x) for x in execute(_spec(device="cuda", precision="bf16"))["train"]["loss"])
