"""posenc.extend.checkpoint: the GGUF conversion runs in a process of its own whose tqdm starts
disabled (transformers' GGUF loader draws its own tqdm bar, past its progress switch), so nothing of
it tears through posenc's display; what it raises comes back."""

from __future__ import annotations

import json
import os

import pytest
from tests import extend_models

from posenc.extend import checkpoint as checkpoints


def test_the_conversion_runs_in_a_process_whose_tqdm_is_off_and_this_ones_environment_is_kept(
    tmp_path, capfd
):
    before = os.environ.get("TQDM_DISABLE")
    checkpoints._convert_quietly(tmp_path / "m.gguf", tmp_path, "digest", convert=extend_models.tqdm_state)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["pid"] != os.getpid() and state["env"] == "1" and state["disabled"] is True
    assert os.environ.get("TQDM_DISABLE") == before  # set only while the process started
    assert "Converting and de-quantizing" not in capfd.readouterr().err


def test_what_the_conversion_raises_comes_back_as_it_was(tmp_path):
    with pytest.raises(ValueError, match="architecture nonsense is not supported yet"):
        checkpoints._convert_quietly(
            tmp_path / "m.gguf", tmp_path, "d", convert=extend_models.failing_conversion
        )
