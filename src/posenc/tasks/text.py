"""Byte-level language modelling on the Python standard library's own ``.py`` files.

Axis legend: b batch, t tokens (bytes).

The corpus is present on every machine and needs no download. Files are listed
from ``sysconfig.get_paths()["stdlib"]`` (sorted relative paths), skipping
installed third-party code (``site-packages``) and the stdlib's own test suites
and IDE (``test``, ``tests``, ``idlelib``, ``lib2to3``: they are a third of the
bytes and mostly fixtures). A file goes to validation when the SHA-256 of its
relative path falls in the first ``valid_percent`` of the hash range, so the split
does not move when a file's content changes between Python versions.

Every run records :attr:`TextCorpus.sha256`, a hash of exactly the bytes read
(each file's path, size and content, in order), and the Python version.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import platform
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import torch

from posenc.checks import check_int
from posenc.errors import PosencError

VOCAB_SIZE = 256
SKIPPED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
)


@dataclass(frozen=True)
class TextCorpus:
    """Train and validation byte streams (uint8 ``(N,)``) plus provenance."""

    train: torch.Tensor
    valid: torch.Tensor
    sha256: str
    python_version: str
    root: str
    num_files: dict[str, int] = field(default_factory=dict)

    def describe(self) -> dict:
        return {
            "source": "python-stdlib-py",
            "root": self.root,
            "python_version": self.python_version,
            "sha256": self.sha256,
            "train_bytes": int(self.train.numel()),
            "valid_bytes": int(self.valid.numel()),
            "num_files": dict(self.num_files),
        }


def _is_valid_file(relpath: str, valid_percent: int) -> bool:
    digest = hashlib.sha256(relpath.encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < valid_percent


@functools.lru_cache(maxsize=4)
def stdlib_corpus(root: str | None = None, *, valid_percent: int = 10) -> TextCorpus:
    """Read (once per process) the stdlib ``.py`` files under ``root`` and split them."""
    check_int("valid_percent", valid_percent, minimum=1, maximum=99)
    base = Path(root or sysconfig.get_paths()["stdlib"])
    if not base.is_dir():
        raise FileNotFoundError(f"stdlib directory {str(base)!r} does not exist")
    files = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS]  # prune the walk
        for name in filenames:
            if name.endswith(".py"):
                path = Path(dirpath, name)
                files.append((path.relative_to(base).as_posix(), path))
    files.sort()
    digest = hashlib.sha256(f"valid_percent={valid_percent}\n".encode())
    parts: dict[str, list[bytes]] = {"train": [], "valid": []}
    for rel, path in files:
        data = path.read_bytes()
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
        parts["valid" if _is_valid_file(rel, valid_percent) else "train"].append(data)
    if not parts["train"] or not parts["valid"]:
        raise PosencError(f"stdlib directory {str(base)!r} has too few .py files to split")

    def stream(chunks: list[bytes]) -> torch.Tensor:
        return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8).clone()

    return TextCorpus(
        train=stream(parts["train"]),
        valid=stream(parts["valid"]),
        sha256=digest.hexdigest(),
        python_version=platform.python_version(),
        root=str(base),
        num_files={k: len(v) for k, v in parts.items()},
    )


def sample_windows(
    data: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random training windows: ``(inputs, targets)`` both ``(b, seq_len)`` int64."""
    check_int("seq_len", seq_len, minimum=1, maximum=data.numel() - 1)
    starts = torch.randint(0, data.numel() - seq_len, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(seq_len + 1)  # (b, t+1)
    rows = data[idx].long()
    return rows[:, :-1], rows[:, 1:]


def scored_bytes(lengths: list[int], minimum: int) -> int:
    """Smallest multiple of lcm(lengths) that is >= minimum.

    Non-overlapping evaluation then splits exactly the same bytes into whole
    windows at every length, so the lengths are compared on identical text.
    """
    step = math.lcm(*lengths)
    return step * max(1, -(-minimum // step))


def nonoverlapping_windows(data: torch.Tensor, length: int, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``data[: total + 1]`` into ``total / length`` windows: ``(inputs, targets)`` ``(w, length)``."""
    if total % length:
        raise PosencError(f"total ({total}) must be a multiple of length ({length})")
    if total + 1 > data.numel():
        raise PosencError(f"need {total + 1} validation bytes, the corpus has {data.numel()}")
    inputs = data[:total].long().view(-1, length)
    targets = data[1 : total + 1].long().view(-1, length)
    return inputs, targets


def lastk_windows(
    data: torch.Tensor, context: int, k: int, num_windows: int, max_context: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of ``context`` bytes whose last ``k`` predictions are the same bytes for every context.

    Window w ends at ``max_context + w * k``; only its last k targets are scored, so
    changing ``context`` changes what the model sees, never what it is scored on.
    """
    if k > context:
        raise PosencError(f"k ({k}) must be <= context ({context})")
    ends = max_context + k * torch.arange(num_windows)  # (w,)
    if int(ends[-1]) + 1 > data.numel():
        raise PosencError(
            f"last-k evaluation needs {int(ends[-1]) + 1} validation bytes, have {data.numel()}"
        )
    idx = ends[:, None] - context + torch.arange(context + 1)  # (w, context+1)
    rows = data[idx].long()
    return rows[:, :-1], rows[:, 1:]


def tail_windows(data: torch.Tensor, length: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` consecutive windows of ``length`` bytes ending at the end of ``data``:
    ``(inputs, targets)`` ``(count, length)`` (held out from anything read from the start)."""
    check_int("length", length, minimum=1)
    check_int("count", count, minimum=1)
    total = length * count
    if total + 1 > data.numel():
        raise PosencError(f"need {total + 1} bytes for {count} windows of {length}, have {data.numel()}")
    tail = data[-(total + 1) :]
    return tail[:-1].long().view(count, length), tail[1:].long().view(count, length)
