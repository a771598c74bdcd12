"""The model half: attention that dispatches on an encoding's kind, the KV cache, a small Transformer.

- :mod:`~posenc.nn.attention`: :class:`MultiHeadAttention` (SDPA / plain paths, grouped-query attention)
- :mod:`~posenc.nn.kv_cache`: :class:`KVCache` and the positions of each decoding step
- :mod:`~posenc.nn.transformer`: :class:`Transformer` and :class:`TransformerConfig` (pre-LN)
"""
