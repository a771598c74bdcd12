"""The machinery every bias encoding shares: validation, dtype policy, dense cache, FlexAttention score_mod."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from posenc.core.checks import check_int, is_integer_dtype
from posenc.core.errors import PosencError, PosencTypeError
from posenc.core.positions import Positions, resolve_positions
from posenc.encoding.base import BiasEncoding

Params = dict[str, torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _check_index_tensor(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise PosencTypeError(f"{name} must be an integer torch.Tensor, got {type(value).__name__}")
    if not is_integer_dtype(value.dtype):
        raise PosencTypeError(f"{name} must have an integer dtype (int32/int64), got {value.dtype}")
    return value.long()


class _BiasFamily(BiasEncoding):
    """Shared machinery: validation, dtype policy, dense cache, FlexAttention score_mod."""

    #: True for parameter-free encodings, whose dense bias for default positions is cached.
    cache_dense = False
    _dense_cache: tuple[tuple[int, int, torch.device | None], torch.Tensor] | None = None

    def _prepare(self, device: torch.device) -> Params:
        """Float64 copies of the parameters/constants ``_compute`` needs, on ``device``."""
        return {}

    def _compute(self, q: torch.Tensor, k: torch.Tensor, h: torch.Tensor, p: Params) -> torch.Tensor:
        """The definition: int64 broadcastable ``q, k, h`` -> float64 bias (broadcast shape)."""
        raise NotImplementedError

    def _out_dtype(self) -> torch.dtype:
        params = list(self.parameters())
        return torch.float64 if params and params[0].dtype == torch.float64 else torch.float32

    @property
    def bias_dtype(self) -> torch.dtype:
        return self._out_dtype()

    def evaluate(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        return self._compute(q_pos, k_pos, head, self._prepare(q_pos.device))

    def _default_device(self) -> torch.device:
        params = list(self.parameters())
        return params[0].device if params else torch.device("cpu")

    def bias_fn(self, q_pos: torch.Tensor, k_pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """Elementwise bias for broadcastable integer ``q_pos``, ``k_pos``, ``head``; float64.

        Raises:
            TypeError: non-integer tensors.
            ValueError: negative positions or a head outside ``[0, num_heads)``.
        """
        q = _check_index_tensor("q_pos", q_pos)
        k = _check_index_tensor("k_pos", k_pos)
        h = _check_index_tensor("head", head)
        for name, t in (("q_pos", q), ("k_pos", k)):
            if t.numel() and int(t.min()) < 0:
                raise PosencError(f"{name} must be >= 0, got minimum {int(t.min())}")
        if h.numel() and (int(h.min()) < 0 or int(h.max()) >= self.num_heads):
            raise PosencError(
                f"head must be in [0, {self.num_heads - 1}] (num_heads={self.num_heads}), "
                f"got values in [{int(h.min())}, {int(h.max())}]"
            )
        try:
            torch.broadcast_shapes(q.shape, k.shape, h.shape)
        except RuntimeError:
            raise PosencError(
                f"q_pos {tuple(q.shape)}, k_pos {tuple(k.shape)} and head {tuple(h.shape)} do not broadcast"
            ) from None
        return self.evaluate(q, k.to(q.device), h.to(q.device))

    def bias(
        self,
        num_queries: int,
        num_keys: int,
        *,
        q_positions: torch.Tensor | Positions | None = None,
        k_positions: torch.Tensor | Positions | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Dense bias ``(b|1, h, i, j)``: float32, or float64 when the parameters are float64.

        Parameter-free encodings return a cached tensor for default positions: treat it as
        read-only (no in-place ops on it).
        """
        num_queries = check_int("num_queries", num_queries, minimum=0)
        num_keys = check_int("num_keys", num_keys, minimum=0)
        if device is None and q_positions is None and k_positions is None:
            device = self._default_device()
        key = (num_queries, num_keys, torch.device(device) if device is not None else None)
        use_cache = self.cache_dense and q_positions is None and k_positions is None
        if use_cache and self._dense_cache is not None and self._dense_cache[0] == key:
            return self._dense_cache[1]
        out = (
            super()
            .bias(num_queries, num_keys, q_positions=q_positions, k_positions=k_positions, device=device)
            .to(self._out_dtype())
        )
        if use_cache:
            self._dense_cache = (key, out)  # one entry: the (h, i, j) table is not rebuilt per call
        return out

    def score_mod(
        self, q_positions: torch.Tensor | None = None, k_positions: torch.Tensor | None = None
    ) -> ScoreMod:
        """FlexAttention ``score_mod(score, b, h, q_idx, kv_idx) -> score + bias``.

        Args:
            q_positions: int ``(b|1, i)`` or ``(i,)``; None means ``q_idx`` itself.
            k_positions: int ``(b|1, j)`` or ``(j,)``; None means ``kv_idx`` itself.
        """
        qp = None if q_positions is None else self._flex_positions(q_positions, "q_positions")
        kp = None if k_positions is None else self._flex_positions(k_positions, "k_positions")
        if qp is not None and kp is not None and 1 not in (qp.shape[0], kp.shape[0]):
            if qp.shape[0] != kp.shape[0]:
                raise PosencError(
                    f"q_positions batch {qp.shape[0]} and k_positions batch {kp.shape[0]} differ"
                )
        device = qp.device if qp is not None else kp.device if kp is not None else self._default_device()
        params = self._prepare(device)
        compute = self._compute

        def pick(table: torch.Tensor | None, b: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            if table is None:
                return idx
            return table[0, idx] if table.shape[0] == 1 else table[b, idx]

        def fn(score, b, h, q_idx, kv_idx):
            value = compute(pick(qp, b, q_idx), pick(kp, b, kv_idx), h, params)
            return score + value.to(score.dtype)

        return fn

    @staticmethod
    def _flex_positions(positions: torch.Tensor, name: str) -> torch.Tensor:
        if not isinstance(positions, torch.Tensor):
            raise PosencTypeError(f"{name} must be an integer torch.Tensor of shape (batch, seq) or None")
        seq = positions.shape[-1] if positions.ndim else 0
        return resolve_positions(positions, seq, name=name)
