"""Where and in what precision a run computes: ``--device`` and ``--precision``.

``--device auto|cpu|cuda|cuda:N|mps`` (``auto``: the first CUDA device, else Apple's GPU, else
the CPU), resolved and checked once, before any run starts; an absent device is one error naming
the option and what this machine has. ``--precision fp32|bf16``: ``bf16`` runs every forward
pass (training, the held-out checks, evaluation) under :func:`torch.autocast` with bfloat16,
the parameters and the optimiser staying in float32 (mixed precision), on devices whose autocast
supports bfloat16 (the CPU; CUDA devices that compute in bfloat16, Ampere and later; Apple GPUs
from macOS 14); elsewhere it is refused before anything runs.

On the CPU the encodings take posenc's C kernels (float32 and float64; a bfloat16 tensor takes
the plain PyTorch path, logged once); on every other device they take the plain PyTorch path.
Data are always drawn on the CPU from CPU generators and then moved, so a seed gives the same
examples on every device. The device is an execution detail (like the number of threads), not
part of a run's identity; the precision is.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import torch

from posenc.core.errors import PosencError
from posenc.tasks.synthetic import TaskBatch

#: ``--precision`` values -> the autocast dtype (None: no autocast, float32 throughout).
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
#: How ``--device`` may be written.
DEVICE_FORMS = "auto, cpu, cuda, cuda:N or mps"
_CUDA_INDEX = re.compile(r"cuda:(0|[1-9][0-9]{0,5})", re.ASCII)  # "cuda:²" or "cuda:00" is no device number


def mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def check_device_text(text: Any, name: str = "device") -> str:
    """``text`` if it is written as a device (not whether this machine has it)."""
    if not isinstance(text, str):
        raise PosencError(f"{name} must be one of {DEVICE_FORMS}, got {text!r}")
    value = text.strip().lower()
    if value not in ("auto", "cpu", "cuda", "mps") and not _CUDA_INDEX.fullmatch(value):
        raise PosencError(
            f"{name} must be one of {DEVICE_FORMS} (N: a device number 0, 1, ... in ASCII digits, "
            f"no leading zeros), got {text!r}"
        )
    return value


def resolve_device(text: str, name: str = "--device") -> str:
    """The device a run uses for ``text`` on this machine (``auto`` resolved); an absent device
    raises PosencError naming ``name``, the value and what there is."""
    value = check_device_text(text, name)
    if value == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if mps_available() else "cpu"
    if value == "cpu":
        return value
    if value == "mps":
        if not mps_available():
            raise PosencError(
                f"{name} mps: no Apple GPU here (torch.backends.mps.is_available() is False); "
                "use --device cpu or auto"
            )
        return value
    if not torch.cuda.is_available():
        raise PosencError(
            f"{name} {value}: no CUDA device here (torch.cuda.is_available() is False: no NVIDIA GPU, or a "
            "CPU build of PyTorch); use --device cpu or auto"
        )
    index = int(value.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise PosencError(
            f"{name} {value}: this machine has {count} CUDA device(s), cuda:0 .. cuda:{count - 1}"
        )
    return value


def bf16_supported(device: str) -> bool:
    """Whether autocast to bfloat16 computes on ``device`` (a resolved device)."""
    kind = torch.device(device).type
    if not torch.amp.is_autocast_available(kind):
        return False
    if kind == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if kind == "mps":
        return bool(torch.backends.mps.is_macos_or_newer(14, 0))
    return kind == "cpu"


def check_precision(precision: Any, device: str, name: str = "--precision") -> str:
    """``precision`` if the device (resolved) computes in it, else PosencError naming both."""
    if precision not in PRECISIONS:
        raise PosencError(f"{name} must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if PRECISIONS[precision] is not None and not bf16_supported(device):
        raise PosencError(
            f"{name} {precision}: device {device} does not compute in bfloat16 under autocast (CUDA needs "
            "an Ampere or later GPU, Apple GPUs macOS 14); use --precision fp32"
        )
    return precision


def autocast(device: str, precision: str) -> contextlib.AbstractContextManager:
    """The context a run's forward passes go through: autocast for ``bf16``, nothing for ``fp32``."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def to_device(batch: TaskBatch, device: str) -> TaskBatch:
    """A task batch (drawn on the CPU) on ``device`` (its lengths stay on the CPU)."""
    if device == "cpu":
        return batch
    return batch.to(device)


def describe(device: str) -> str:
    """What the device is, for a record: ``cpu``, ``cuda:0 (NVIDIA A100-SXM4-40GB)``, ``mps``."""
    if torch.device(device).type == "cuda":
        index = torch.device(device).index or 0
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return device
