"""Checkpoints the extend tests share (built once per session)."""

from __future__ import annotations

import pytest
from tests.extend_models import tiny_llama


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A tiny random Llama checkpoint; tests copy it before changing anything."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama-shared"))


@pytest.fixture(scope="session")
def other_tiny_llama_dir(tmp_path_factory):
    """The same architecture with other random weights: a weights file of exactly the same size."""
    pytest.importorskip("transformers")
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama-other"), seed=1)


@pytest.fixture(autouse=True)
def _own_hash_cache(tmp_path_factory, monkeypatch):
    """Checkpoint files hashed by these tests are remembered in a cache of the test session's own,
    never in the user's ``~/.cache/posenc`` (converted models there are still found)."""
    from posenc.extend import content

    path = tmp_path_factory.getbasetemp() / "file-hashes.json"
    monkeypatch.setattr(content, "cache_path", lambda: path)
