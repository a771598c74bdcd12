"""Per-dtype tolerances, kept in one place. Used with torch.testing.assert_close."""

import torch

TOL = {
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}


def tol(dtype: torch.dtype) -> dict:
    return TOL[dtype]
