"""FIRE: functional interpolation for relative positions (Li et al. 2024)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from posenc.core.checks import check_bool, check_float, check_int
from posenc.core.fields import EncodingConfig, length_field, model_field
from posenc.encoding.bias.family import Params, _BiasFamily


@dataclass(frozen=True)
class FIREConfig(EncodingConfig):
    num_heads: int = model_field("num_heads")  # attention heads; the MLP outputs one value per head
    bidirectional: bool = model_field(
        "bidirectional", default=False
    )  # True: normaliser psi(max(L,i,j)) and separate heads for j > i
    mlp_width: int = 32  # hidden units of f_theta (the paper's 32)
    init_c: float = 0.1  # initial c of psi(x) = log(c x + 1)
    init_threshold: float = length_field(
        "paper_length", default=512.0
    )  # initial L; L = |multiplier * init_threshold|, multiplier learned
    eps: float = 1e-6  # added to the normaliser, as the paper's code

    def validate(self) -> None:
        check_int("num_heads", self.num_heads, minimum=1)
        check_bool("bidirectional", self.bidirectional)
        check_int("mlp_width", self.mlp_width, minimum=1)
        check_float("init_c", self.init_c, minimum=0.0, exclusive_minimum=True, maximum=1e6)
        check_float("init_threshold", self.init_threshold, minimum=0.0, exclusive_minimum=True)
        check_float("eps", self.eps, minimum=0.0, exclusive_minimum=True)


class FIRE(_BiasFamily):
    r"""Functional Interpolation for Relative Positions (Li et al. 2023, https://arxiv.org/abs/2310.04418).

    .. math:: B_{h,i,j} = f_\theta\!\left(\frac{\psi(i - j)}{\psi(\max(L, i))}\right)_h,
              \qquad \psi(x) = \log(|c x| + 1)

    ``f_theta``: Linear(1, 32) -> ReLU -> Linear(32, H) (PyTorch's default init), ``c`` and
    ``L`` learnable (init 0.1 and 512, as the paper's code: ``L = |multiplier * 512|``).
    Note FIRE depends on the absolute query position ``i`` through the normaliser.

    Bidirectional (posenc's extension; the paper defines the causal form): the normaliser
    is ``psi(max(L, i, j))`` so the input stays in ``[0, 1]``, and the MLP has ``2H``
    outputs — heads ``0..H-1`` for ``j <= i``, ``H..2H-1`` for ``j > i`` — so the two
    directions are told apart, as T5's bidirectional buckets do.
    """

    Config = FIREConfig
    config: FIREConfig
    paper = (
        "Li et al. 2023, Functional Interpolation for Relative Positions Improves Long "
        "Context Transformers, https://arxiv.org/abs/2310.04418"
    )
    equation = "B[h,i,j] = MLP(psi(i - j) / psi(max(L, i)))_h, psi(x) = log(|c x| + 1)"

    def __init__(self, config: FIREConfig) -> None:
        super().__init__(config)
        outputs = config.num_heads * (2 if config.bidirectional else 1)
        self.mlp_in = nn.Linear(1, config.mlp_width)
        self.mlp_out = nn.Linear(config.mlp_width, outputs)
        self.c = nn.Parameter(torch.tensor(float(config.init_c)))  # an int init_c makes a float
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))

    def _prepare(self, device: torch.device) -> Params:
        def f64(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=torch.float64)

        # c and L as (1,) vectors indexed inside _compute: FlexAttention's eager backward
        # rejects 0-d captured tensors that require grad.
        return {
            "c": f64(self.c).reshape(1),
            "L": (f64(self.threshold_multiplier) * self.config.init_threshold).abs().reshape(1),
            "w1": f64(self.mlp_in.weight)[:, 0],  # (u,)
            "b1": f64(self.mlp_in.bias),  # (u,)
            "w2": f64(self.mlp_out.weight),  # (H_out, u)
            "b2": f64(self.mlp_out.bias),  # (H_out,)
        }

    def factored_mlp(
        self,
        q_start: int,
        k_start: int,
        num_queries: int,
        num_keys: int,
        *,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, ...] | None:
        """Causal FIRE is ``f(psi(i - j) / psi(max(L, i)))``: ``a = psi(delta)`` per distance and
        ``s = 1 / (psi(max(L, i)) + eps)`` per query (float64 maths, float32 out); the
        bidirectional normaliser also depends on ``j``, so it has no such form (None)."""
        if self.config.bidirectional:
            return None
        p = self._prepare(torch.device(device) if device is not None else self._default_device())
        device = p["c"].device
        delta = torch.arange(num_queries + num_keys - 1, device=device) + (q_start - k_start - (num_keys - 1))
        c, threshold = p["c"][0], p["L"][0]
        a = torch.log(torch.abs(c * delta.to(torch.float64)) + 1)  # psi(i - j) >= 0
        position = torch.arange(q_start, q_start + num_queries, device=device, dtype=torch.float64)
        s = 1 / (torch.log(torch.abs(c * torch.maximum(position, threshold)) + 1) + self.config.eps)
        terms = (a, s, p["w1"], p["b1"], p["w2"], p["b2"])
        return tuple(t.to(torch.float32) for t in terms)

    def _compute(self, q, k, h, p):
        qf, kf = q.to(torch.float64), k.to(torch.float64)
        d = qf - kf
        position = torch.maximum(qf, kf) if self.config.bidirectional else qf
        c, threshold = p["c"][0], p["L"][0]
        normaliser = torch.log(torch.abs(c * torch.maximum(position, threshold)) + 1) + self.config.eps
        x = torch.log(torch.abs(c * d) + 1) / normaliser  # in [0, 1] for j <= i
        if self.config.bidirectional:
            h = torch.where(d < 0, h + self.config.num_heads, h)  # keys after the query
        if x.ndim == 0:  # one score at a time (score_mod): one hidden unit at a time, scalars only
            out = p["b2"][h]
            for u in range(self.config.mlp_width):
                out = out + torch.relu(x * p["w1"][u] + p["b1"][u]) * p["w2"][h, u]
            return out
        hidden = torch.relu(x[..., None] * p["w1"] + p["b1"])  # (..., u)
        out = hidden @ p["w2"].T + p["b2"]  # (..., H_out): every head at once
        index = h.expand(torch.broadcast_shapes(x.shape, h.shape))[..., None]
        return torch.take_along_dim(out, index, dim=-1)[..., 0]  # pick each score's head
