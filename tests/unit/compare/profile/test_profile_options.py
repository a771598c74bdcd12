"""``posenc compare``'s options are checked once, by the library: ``compare.profile.ProfileOptions``
through ``load_profile`` (the keys they set), ``compare.compare`` (the machine: device, precision,
threads, the executor). The command parses and prints; its errors are the library's, naming the
option, one line and exit 2."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from posenc.cli import main
from posenc.compare import compare
from posenc.compare.grid import variants_note
from posenc.compare.profile import Option, ProfileOptions, dump_profile, load_profile
from posenc.compare.ray_executor import INSTALL_HINT, RayNotInstalled
from posenc.core.errors import PosencError

ROOT = Path(__file__).resolve().parents[4]


def refused(options: ProfileOptions, settings: tuple[str, ...] = ()) -> str:
    with pytest.raises(PosencError) as caught:
        load_profile("smoke", settings, options)
    return str(caught.value)


def one_line(args: list[str], out: Path) -> str:
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", *args, "--out", str(out)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.output)
    assert lines[0].startswith("posenc: error:") and "Traceback" not in result.output
    assert not (out / "runs").exists()
    return lines[0]


def test_profile_options_become_options_naming_their_flags():
    given = ProfileOptions(seeds=(4, 5), variants=("combine=concat",), kv_heads=1, device="cpu")
    assert given.options() == [
        Option("--seeds", "seeds", [4, 5]),
        Option("--variants", "variants", ["combine=concat"], add=True),
        Option("--kv-heads", "model.num_kv_heads", 1),
        Option("--device", "device", "cpu"),
    ]
    assert given.flags() == {
        "seeds": "--seeds", "variants": "--variants", "model.num_kv_heads": "--kv-heads", "device": "--device",
    }  # fmt: skip
    prof = load_profile("smoke", ("seeds=[0]",), given)
    assert (prof.seeds, prof.model.num_kv_heads, prof.device) == ((4, 5), 1, "cpu")
    assert "combine=concat" in prof.variants


def test_the_loader_names_the_option_and_the_valid_range():
    assert refused(ProfileOptions(seeds=[-1])).startswith("--seeds: seeds = [-1]: every value must be >= 0")
    message = refused(ProfileOptions(kv_heads=3))  # the smoke profile's model has 2 heads
    assert message.startswith("--kv-heads: model.num_kv_heads = 3:") and "[1, 2], got 3" in message
    message = refused(ProfileOptions(kv_heads="llama-3.1"))
    assert (
        message.startswith("--kv-heads: model.num_kv_heads = 'llama-3.1':") and "4 query heads per" in message
    )
    message = refused(ProfileOptions(kv_heads="lama-3.1"))
    assert "a preset name" in message and "did you mean 'llama-3.1'" in message
    message = refused(ProfileOptions(kv_heads=3), ("model.num_heads=4",))
    assert message.startswith("--kv-heads:") and "num_kv_heads must divide num_heads=4" in message


def test_a_preset_names_the_key_value_heads_in_a_file_and_in_set(tmp_path):
    path = tmp_path / "gqa.toml"
    path.write_text('extends = "smoke"\n[model]\nnum_heads = 8\nd_model = 32\nnum_kv_heads = "llama-3.1"\n')
    prof = load_profile(path)
    assert prof.model.num_kv_heads == 2  # Llama 3.1: 4 query heads per key/value head
    assert "num_kv_heads = 2" in dump_profile(prof)  # the printed config holds the number
    assert load_profile("smoke", ("model.num_kv_heads=gemma-3-12b",)).model.num_kv_heads == 1
    with pytest.raises(PosencError, match=r"^--set: model.num_kv_heads = 'gemma-9': must be an integer"):
        load_profile("smoke", ("model.num_kv_heads=gemma-9",))


def test_a_stride_without_sliding_windows_is_refused(tmp_path):
    assert refused(ProfileOptions(sliding_stride=8)).startswith(
        "--sliding-stride needs --lm-protocol sliding"
    )
    ok = load_profile("smoke", ("eval.lm_protocol=sliding",), ProfileOptions(sliding_stride=8))
    assert (ok.eval.lm_protocol, ok.eval.sliding_stride) == ("sliding", 8)
    line = one_line(["--sliding-stride", "8"], tmp_path / "out")
    assert "--sliding-stride needs --lm-protocol sliding" in line


def test_compare_names_the_machine_settings_as_the_caller_does(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda = load_profile("smoke", (), ProfileOptions(device="cuda"))
    quiet = {"show_progress": False, "log": lambda _: None, "out": tmp_path / "out"}
    with pytest.raises(PosencError, match=r"^--device cuda: no CUDA device here"):
        compare(cuda, names={"device": "--device"}, **quiet)
    with pytest.raises(PosencError, match=r"^device cuda: no CUDA device here"):
        compare(cuda, **quiet)
    with pytest.raises(PosencError, match=r"^--threads must be an integer in \[1, "):
        compare("smoke", threads=0, names={"threads": "--threads"}, **quiet)
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_ray_not_installed_is_bad_input_from_the_library(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(RayNotInstalled) as caught:
        compare("smoke", executor="ray", out=tmp_path / "out", show_progress=False, log=lambda _: None)
    assert isinstance(caught.value, PosencError) and isinstance(caught.value, ImportError)
    assert str(caught.value) == INSTALL_HINT and not (tmp_path / "out").exists()


def test_kv_heads_that_is_no_number_and_no_preset_is_one_line(tmp_path):
    """Found: ``--kv-heads ²`` (a digit to str.isdigit, not to int) ended in a traceback."""
    line = one_line(["--kv-heads", "²"], tmp_path / "out")
    assert "--kv-heads: model.num_kv_heads = '²'" in line and "a preset name" in line


def test_the_variants_note_names_the_encodings_left_out():
    prof = load_profile("smoke", ('encodings=["sinusoidal", "nope"]', 'variants=["combine=concat"]'))
    note = variants_note(prof)
    assert note == "note: variants combine=concat apply to additive encodings only; not run for: nope"
    assert variants_note(load_profile("smoke")) is None


def test_the_command_leaves_the_checks_to_the_library():
    """cli/compare_command.py imports none of the checks the library makes (they ran twice before)."""
    tree = ast.parse((ROOT / "src" / "posenc" / "cli" / "compare_command.py").read_text(encoding="utf-8"))
    imported = {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    checks = {"check_int", "check_kv_heads", "resolve_device", "check_precision", "require_ray", "presets"}
    assert not imported & checks, imported & checks
