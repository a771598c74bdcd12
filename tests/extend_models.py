"""Tiny random-weight checkpoints for ``posenc extend`` tests: a Llama with a 64-token context and
a byte-level BPE tokenizer trained here in a second, saved as a Hugging Face checkpoint directory."""

from __future__ import annotations

from pathlib import Path

CONTEXT = 64


def tiny_llama(root: Path, *, seed: int = 0, **config) -> Path:
    """Save a random Llama (weights from ``seed``; ``config`` overrides) and its tokenizer to ``root``."""
    import tokenizers
    import torch
    import transformers

    from posenc.extend.documents import python_docs_text

    root.mkdir(parents=True, exist_ok=True)
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [python_docs_text()[:60_000]], vocab_size=300, min_frequency=2, show_progress=False
    )
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer).save_pretrained(root)
    vocab = len(transformers.AutoTokenizer.from_pretrained(root))
    torch.manual_seed(seed)
    settings = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=CONTEXT, initializer_range=0.5)  # fmt: skip
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**settings, **config})).save_pretrained(root)
    return root


def tqdm_state(gguf: Path, work: Path, digest: str) -> None:
    """A stand-in for the GGUF conversion, run where it runs: writes ``work/state.json`` with this
    process's id, its TQDM_DISABLE and whether a tqdm bar made here is disabled."""
    import json
    import os

    import tqdm.auto

    bar = tqdm.auto.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...")
    state = {"pid": os.getpid(), "env": os.environ.get("TQDM_DISABLE"), "disabled": bool(bar.disable)}
    bar.close()
    (work / "state.json").write_text(json.dumps(state))


def failing_conversion(gguf: Path, work: Path, digest: str) -> None:
    """A stand-in for a conversion transformers' GGUF loader refuses."""
    raise ValueError(f"GGUF model with architecture nonsense is not supported yet ({gguf.name})")
