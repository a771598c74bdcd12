"""Byte-level language modelling on the Python standard library's own ``.py`` files.

Axis legend: b batch, t tokens (bytes).

The corpus is present on every machine and needs no download. Files are listed
from ``sysconfig.get_paths()["stdlib"]`` (sorted relative paths), skipping
installed third-party code (``site-packages``) and the stdlib's own test suites
and IDE (``test``, ``tests``, ``idlelib``, ``lib2to3``: they are a third of the
bytes and mostly fixtures). Each file goes to one of three splits by the SHA-256 of
its relative path (so the split does not move when a file's content changes between
Python versions): the first ``valid_percent`` of the hash range is **validation**
(what training checks convergence on and learning rates are tuned on), the next
``test_percent`` is **test** (what the benchmark scores; nothing else reads it), the
rest is **train**. With the defaults (5 and 5) the training files are the ones an
earlier 10% train/validation split had, and the validation text ends with the same file.

The benchmark scores the test split file by file (:func:`scored_spans`): a span of the
same length from each of a sample of test files, stratified by file size, so every
score has a value per file and intervals can be taken over files.

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

from posenc.core.checks import check_int
from posenc.core.errors import PosencError

VOCAB_SIZE = 256
SKIPPED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
)


@dataclass(frozen=True)
class TextCorpus:
    """Train, validation and test byte streams (uint8 ``(N,)``), the test files one by one, and
    provenance."""

    train: torch.Tensor
    valid: torch.Tensor
    sha256: str
    python_version: str
    root: str
    num_files: dict[str, int] = field(default_factory=dict)
    #: The test split file by file: ``(relative path, uint8 bytes)`` sorted by path.
    test_files: tuple[tuple[str, torch.Tensor], ...] = ()

    @property
    def test(self) -> torch.Tensor:
        """The test split as one stream (its files in path order)."""
        if not self.test_files:
            return torch.zeros(0, dtype=torch.uint8)
        return torch.cat([data for _, data in self.test_files])

    def describe(self) -> dict:
        return {
            "source": "python-stdlib-py",
            "root": self.root,
            "python_version": self.python_version,
            "sha256": self.sha256,
            "train_bytes": int(self.train.numel()),
            "valid_bytes": int(self.valid.numel()),
            "test_bytes": int(sum(data.numel() for _, data in self.test_files)),
            "num_files": dict(self.num_files),
        }


SPLITS = ("train", "valid", "test")


def file_split(relpath: str, valid_percent: int = 5, test_percent: int = 5) -> str:
    """``"valid"``, ``"test"`` or ``"train"``: where the file at ``relpath`` goes, from the SHA-256
    of the path alone (its first 4 bytes, mod 100: below ``valid_percent`` validation, then
    ``test_percent`` test, the rest train)."""
    digest = hashlib.sha256(relpath.encode()).digest()
    bucket = int.from_bytes(digest[:4], "big") % 100
    if bucket < valid_percent:
        return "valid"
    return "test" if bucket < valid_percent + test_percent else "train"


@functools.lru_cache(maxsize=4)
def stdlib_corpus(root: str | None = None, *, valid_percent: int = 5, test_percent: int = 5) -> TextCorpus:
    """Read (once per process) the stdlib ``.py`` files under ``root`` and split them three ways
    (:func:`file_split`)."""
    check_int("valid_percent", valid_percent, minimum=1, maximum=98)
    check_int("test_percent", test_percent, minimum=1, maximum=99 - valid_percent)
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
    digest = hashlib.sha256(f"valid_percent={valid_percent}\ntest_percent={test_percent}\n".encode())
    parts: dict[str, list[tuple[str, bytes]]] = {split: [] for split in SPLITS}
    for rel, path in files:
        data = path.read_bytes()
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
        parts[file_split(rel, valid_percent, test_percent)].append((rel, data))
    if not all(parts.values()):
        raise PosencError(
            f"stdlib directory {str(base)!r} has too few .py files to split into train, validation and test"
        )

    def tensor(data: bytes) -> torch.Tensor:
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()

    def stream(chunks: list[tuple[str, bytes]]) -> torch.Tensor:
        return tensor(b"".join(data for _, data in chunks))

    return TextCorpus(
        train=stream(parts["train"]),
        valid=stream(parts["valid"]),
        sha256=digest.hexdigest(),
        python_version=platform.python_version(),
        root=str(base),
        num_files={k: len(v) for k, v in parts.items()},
        test_files=tuple((rel, tensor(data)) for rel, data in parts["test"]),
    )


@dataclass(frozen=True)
class ScoredSpan:
    """What the benchmark scores of one test file: ``span`` bytes from ``offset`` on (``data``
    holds them and the byte after, the last target), the same ``span`` for every file."""

    path: str  # relative to the stdlib directory
    file_bytes: int  # the whole file's size
    offset: int
    data: torch.Tensor  # uint8 (span + 1,)

    @property
    def span(self) -> int:
        return int(self.data.numel()) - 1


def span_bytes(lengths: list[int], total: int, files: int) -> int:
    """Bytes scored per test file: the smallest multiple of lcm(lengths) that is >= total / files,
    so every length tiles each file's span with whole windows (and scores the same bytes)."""
    check_int("files", files, minimum=1)
    return scored_bytes(lengths, -(-total // files))


def scored_spans(corpus: TextCorpus, *, span: int, files: int, seed: int = 0) -> list[ScoredSpan]:
    """The test files the benchmark scores and the span of each (sorted by path).

    Only files with at least ``span + 1`` bytes can give a span. Of those, ``files`` are chosen,
    stratified by size: sorted by size, cut into ``files`` groups of (nearly) equal count, one
    file from each (the one whose hash with ``seed`` is smallest); every one when there are
    ``files`` or fewer. Each span is the middle ``span`` bytes of its file (a file's first bytes
    are mostly its docstring and imports).
    """
    check_int("span", span, minimum=1)
    check_int("files", files, minimum=1)
    eligible = sorted(
        ((rel, data) for rel, data in corpus.test_files if data.numel() >= span + 1),
        key=lambda item: (item[1].numel(), item[0]),
    )
    if not eligible:
        longest = max((data.numel() for _, data in corpus.test_files), default=0)
        raise PosencError(
            f"no test file has the {span + 1} bytes a span of {span} needs (the longest has {longest}): "
            "lower eval.lm_bytes per file (lm_bytes / lm_files) or the longest of eval.lm_lengths"
        )

    def rank(rel: str) -> bytes:
        return hashlib.sha256(f"{seed}\0{rel}".encode()).digest()

    groups = min(files, len(eligible))
    bounds = [len(eligible) * g // groups for g in range(groups + 1)]
    chosen = [min(eligible[lo:hi], key=lambda item: rank(item[0])) for lo, hi in zip(bounds, bounds[1:])]
    spans = []
    for rel, data in sorted(chosen, key=lambda item: item[0]):
        offset = (data.numel() - (span + 1)) // 2
        spans.append(ScoredSpan(rel, int(data.numel()), offset, data[offset : offset + span + 1].clone()))
    return spans


def spans_sha256(spans: list[ScoredSpan]) -> str:
    """A hash of exactly what is scored: each span's path, offset and bytes, in order."""
    digest = hashlib.sha256()
    for s in spans:
        digest.update(f"{s.path}\0{s.offset}\0{s.span}\0".encode())
        digest.update(s.data.numpy().tobytes())
    return digest.hexdigest()


def check_span_layout(
    span: int, *, lastk_context: int, lastk_k: int, lastk_windows: int, position_length: int
) -> None:
    """Raise unless a file's span holds what the evaluation reads from it: ``lastk_windows`` last-k
    windows (ending ``lastk_k`` apart, the first after ``lastk_context`` bytes) and a window of
    ``position_length`` bytes for the loss by position."""
    need = lastk_context + (lastk_windows - 1) * lastk_k
    if need > span:
        raise PosencError(
            f"eval.lastk_windows = {lastk_windows} windows per test file need {need} bytes after a context of "
            f"{lastk_context}, but each file's span is {span} bytes (eval.lm_bytes / eval.lm_files, rounded up "
            "to a multiple of every eval.lm_lengths): raise lm_bytes or lower lastk_windows, lastk_k or the "
            "longest lastk_contexts"
        )
    if position_length > span:
        raise PosencError(
            f"the loss by position reads windows of {position_length} bytes (eval.position_multiple x L_train), "
            f"longer than each test file's span of {span} bytes: raise eval.lm_bytes or lower position_multiple"
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
