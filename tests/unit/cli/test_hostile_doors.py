"""Old doors, tried again as a hostile user: each is one line (exit 2) or a correct result, never a
traceback, a hang or a silent acceptance. Ctrl-C exits 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import posenc
from posenc.cli import main
from posenc.compare.device import check_device_text
from posenc.core.errors import PosencError


def _one_line(args: list[str], words: str) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("posenc: error:"), result.output
    assert words in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("text", ["cuda:²", "cuda:00", "cuda:01", "cuda:１", "cuda:-1", "cuda:", "cuda: 1"])
def test_a_device_number_is_ascii_digits_without_leading_zeros(text):
    """Found: ``--device cuda:²`` passed the check ("²".isdigit()) and was a bare ValueError from
    int(); ``cuda:00`` was accepted."""
    with pytest.raises(PosencError, match="device must be one of .*ASCII digits"):
        check_device_text(text)
    _one_line(
        ["compare", "--device", text, "--print-config"], "must be one of auto, cpu, cuda, cuda:N or mps"
    )


@pytest.mark.parametrize("text", ["cuda:0", "cuda:12", "CUDA:3", "cpu", "auto", "mps", "cuda"])
def test_device_forms_that_are_devices_still_pass(text):
    assert check_device_text(text) == text.lower()


def test_a_tensor_given_for_a_size_is_named_by_its_shape_not_printed_whole():
    """Found: ``alibi_2d.bias(tensor, n)`` printed the whole tensor (a 1000 x 1000 one: a screenful)."""
    encoding = posenc.build("alibi_2d", num_heads=2)
    with pytest.raises(PosencError) as caught:
        encoding.bias(torch.zeros(1000, 1000), 5)
    message = str(caught.value)
    assert message == "num_queries must be an integer, got Tensor of shape (1000, 1000) (torch.float32)"
    with pytest.raises(PosencError) as caught:
        encoding.bias(5, list(range(10_000)))
    assert len(str(caught.value)) < 200 and "characters" in str(caught.value)


def test_the_grid_tasks_size_error_names_the_benchmark_key(tmp_path):
    """Found: ``eval.lengths = [4, 100]`` for the grid task said only ``size[0] must be ...``."""
    _one_line(
        ["compare", "--profile", "smoke", "--tasks", "grid", "--encodings", "rope", "--seeds", "0", "--set",
         "eval.lengths=[4, 100]", "--out", str(tmp_path / "o"), "--no-report"],
        "task grid: n = 100 is the side of its square grid and must be an integer in [2, 64]",
    )  # fmt: skip
    line = _one_line(
        ["compare", "--profile", "smoke", "--tasks", "grid", "--encodings", "rope", "--seeds", "0", "--set",
         "eval.lengths=[4, 100]", "--out", str(tmp_path / "o"), "--no-report"], "eval.lengths",
    )  # fmt: skip
    assert "task_train.min_len / max_len" in line


EVIL_METACLASSES = """
from posenc.encoding import AdditiveEncoding


class Attribute(type(AdditiveEncoding)):
    def __getattr__(cls, name):
        raise RuntimeError("boom from __getattr__")


class ByAttribute(AdditiveEncoding, metaclass=Attribute):
    pass


class Everything(type(AdditiveEncoding)):
    def __getattribute__(cls, name):
        raise RuntimeError("boom from __getattribute__")


class ByEverything(AdditiveEncoding, metaclass=Everything):
    pass


class Shown(type):
    def __repr__(cls):
        raise RuntimeError("boom from __repr__")


class ByRepr(metaclass=Shown):
    pass
"""


@pytest.mark.parametrize("name", ["ByAttribute", "ByEverything", "ByRepr"])
def test_a_plugin_whose_metaclass_raises_is_one_line_in_posenc_check(tmp_path, monkeypatch, name):
    (tmp_path / "evil_meta.py").write_text(EVIL_METACLASSES)
    monkeypatch.syspath_prepend(str(tmp_path))
    line = _one_line(["check", f"evil_meta:{name}"], f"encoding spec 'evil_meta:{name}' cannot be checked")
    assert "RuntimeError: boom from" in line


def test_a_config_head_dim_past_any_model_is_one_line(tmp_path):
    """Found: ``posenc conform export --hf-config`` of ``head_dim: 1e12`` asked torch for 4 TB."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"head_dim": 10**12, "rope_theta": 10000, "max_position_embeddings": 100}))
    _one_line(["conform", "export", "--hf-config", str(config), str(tmp_path / "v")],
              "head_dim must be an integer in [2, 65536], got 1000000000000")  # fmt: skip
    config.write_text(
        json.dumps({"hidden_size": 10**12, "num_attention_heads": 1, "max_position_embeddings": 8})
    )
    _one_line(["rope", "inspect", "--hf-config", str(config)], "head_dim must be an integer in [2, 65536]")


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p.symlink_to("/dev/zero"), "a symbolic link to '/dev/zero', a character device"),
    (lambda p: os.mkfifo(p), "a FIFO (named pipe)"),
    (lambda p: p.symlink_to("nowhere.toml"), "a symbolic link to 'nowhere.toml', which does not exist"),
])  # fmt: skip
def test_an_extend_config_that_is_no_file_says_what_it_is(tmp_path, make, words):
    """Found: ``posenc extend --config`` linked to /dev/zero said "no such file"."""
    path = tmp_path / "protocol.toml"
    make(path)
    _one_line(["extend", "--config", str(path), "--print-config"], f"--config '{path}': {words}")


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p.symlink_to("/dev/zero"), "a symbolic link to '/dev/zero', a character device"),
    (lambda p: os.mkfifo(p), "a FIFO (named pipe)"),
    (lambda p: p.symlink_to("nowhere.toml"), "a symbolic link to 'nowhere.toml', which does not exist"),
])  # fmt: skip
def test_a_compare_config_that_is_no_file_says_what_it_is(tmp_path, make, words):
    """Found: ``posenc compare --config`` on a FIFO blocked in open() until killed."""
    path = tmp_path / "profile.toml"
    make(path)
    _one_line(["compare", "--config", str(path), "--print-config"], f"profile file {path}: {words}")


@pytest.mark.parametrize("factors", ["0", "-2", "nan", "2,0"])
def test_factors_must_be_positive(factors):
    """Found: ``--factors 0`` was accepted (printed in the protocol; refused later naming --scalings)."""
    _one_line(["extend", "--factors", factors, "--print-config"], "factors must be finite numbers > 0")


def _interruptible() -> None:
    """In the child: Ctrl-C's default disposition. A test session started in the background (``&``)
    ignores SIGINT, and its children would inherit that, as a shell's background job does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_with_one_line(tmp_path):
    """Found: Ctrl-C during a command exited 1 ("Aborted!"); shells report 128 + SIGINT."""
    script = (
        "import sys, time\n"
        "import posenc.cli as cli\n"
        "from posenc.cli import main\n"
        "import click\n"
        "@click.command('sleep')\n"
        "def sleep():\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "main.add_command(sleep)\n"
        "main(['sleep'])\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=tmp_path, preexec_fn=_interruptible)  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    os.kill(child.pid, signal.SIGINT)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == ["posenc: interrupted"]


def test_ctrl_c_during_a_benchmark_exits_130(tmp_path):
    """The real thing: ``posenc compare`` interrupted while it trains."""
    out = tmp_path / "o"
    posenc_command = str(Path(sys.executable).parent / "posenc")
    child = subprocess.Popen(
        [posenc_command, "compare", "--profile", "smoke", "--encodings", "rope", "--tasks", "copy", "--seeds", "0",
         "--out", str(out), "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible,
    )  # fmt: skip
    deadline = time.time() + 120
    while not list(out.glob("configs/*.toml")) and child.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert child.poll() is None, child.communicate()
    time.sleep(1.0)
    os.kill(child.pid, signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err[-2000:]
    assert "posenc: interrupted" in err and "Traceback" not in err
