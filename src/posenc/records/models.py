"""The benchmark's model of a run: what a :class:`~posenc.records.spec.RunSpec` trains.

Both sides of the benchmark build it here: :mod:`posenc.compare` to train it and
:mod:`posenc.results` to load a finished run's kept weights into it.
"""

from __future__ import annotations

import torch

from posenc import schedules
from posenc.nn.transformer import Transformer, TransformerConfig
from posenc.records.provenance import register_imports
from posenc.records.spec import RunSpec
from posenc.tasks import task_registry


def build_model(spec: RunSpec) -> Transformer:
    """The benchmark model for ``spec``, initialised from ``spec.seed`` alone (names registered
    where the grid was made are registered here first: :func:`~posenc.records.provenance.register_imports`)."""
    register_imports(spec)
    vocab = task_registry.vocab_size(spec.task)
    torch.manual_seed(spec.seed)
    config = TransformerConfig(
        vocab_size=vocab,
        d_model=spec.model.d_model,
        num_heads=spec.model.num_heads,
        num_kv_heads=spec.model.num_kv_heads,
        num_layers=spec.model.num_layers,
        ffn_dim=spec.model.ffn_dim,
        combine=spec.model.combine,
        inject=spec.model.inject,
        scale_embeddings=spec.model.scale_embeddings,
        causal=True,
        encoding=schedules.parse(spec.schedule, spec.model.num_layers)
        if spec.schedule
        else spec.resolved_class(),
        encoding_config=dict(spec.encoding_config),
        tie_embeddings=True,
        dropout=0.0,
    )
    return Transformer(config)
