"""What a checkpoint is, by content: SHA-256 of its files, each hashed once per content.

A checkpoint's identity in ``posenc extend``'s records (part of every cell's id) is a hash of the
bytes the model computes from: ``config.json``, every weight file, the tokenizer's files
(:func:`checkpoint_files`). Names, sizes and modification times are not content: a
``model.safetensors`` replaced by another model's of the same size with its time kept (``cp -p``,
``rsync -t``, an unpacked archive, ``touch -r``) is another checkpoint, and its cells run again.

Hashing a large file on every run would cost seconds (a 7B checkpoint: ~13 GB), so each file's
hash is cached under ``$POSENC_CACHE_DIR/file-hashes.json`` (default ``~/.cache/posenc``), keyed as
git's index keys a file: its real path, device, inode, size, modification time and change time in
nanoseconds. The change time (``ctime``) cannot be set by a user: any write, ``cp -p``, ``touch -r``
or rename onto the path sets it to now, so a replaced file never matches its old entry. A file
changed within :data:`RACY_SECONDS` of being hashed is not cached (two writes within one tick of
the file system's clock could leave the same times; git calls such entries racy). The cache is
data: read as a regular file of bounded size and nesting, ignored when it does not parse.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from posenc.core import untrusted
from posenc.records.files import atomic_write_text

CACHE_NAME = "file-hashes.json"
CACHE_VERSION = 1
MAX_CACHE_ENTRIES = 4096  # least recently used dropped past this
MAX_CACHE_BYTES = 8 << 20
RACY_SECONDS = 2.0  # the coarsest file-system clock in use (FAT: 2 s); ext4 and tmpfs tick in ms

#: What a Hugging Face checkpoint directory's model computes from, besides its weight files.
CONFIG_FILES = ("config.json",)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
)
WEIGHT_SUFFIXES = (".safetensors", ".bin")
INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")


def cache_path() -> Path:
    base = os.environ.get("POSENC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "posenc")
    return Path(base) / CACHE_NAME


def _key(stat: os.stat_result) -> list[int]:
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


class HashCache:
    """``sha256(path)`` of regular files, remembered by (real path, device, inode, size, mtime,
    ctime) in one JSON file; :meth:`save` writes it back atomically (a lost race loses entries only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = cache_path() if path is None else path
        self.entries: dict[str, list[Any]] = self._read()
        self.changed = False
        self.hashed_bytes = 0  # read to hash (0 when every file came from the cache)

    def _read(self) -> dict[str, list[Any]]:
        try:
            with untrusted.open_regular(self.path) as handle:
                raw = handle.read(MAX_CACHE_BYTES + 1)
            data = untrusted.loads(raw.decode("utf-8"), max_depth=4) if len(raw) <= MAX_CACHE_BYTES else None
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        entries = data.get("entries")
        if not isinstance(entries, dict):
            return {}
        return {
            k: v
            for k, v in entries.items()
            if isinstance(v, list) and len(v) == 7 and all(isinstance(x, (int, float, str)) for x in v)
        }

    def sha256(self, path: Path) -> str:
        """The SHA-256 of the regular file ``path`` (OSError for anything else: a FIFO is never opened
        for reading, a device never read), from the cache when nothing about the file has changed."""
        real = os.path.realpath(path)
        with untrusted.open_regular(real) as handle:
            before = os.fstat(handle.fileno())
            entry = self.entries.get(real)
            if entry is not None and entry[:5] == _key(before) and isinstance(entry[5], str):
                entry[6] = time.time()
                self.changed = True
                return entry[5]
            hasher = hashlib.sha256()
            for block in iter(lambda: handle.read(1 << 22), b""):
                hasher.update(block)
            digest = hasher.hexdigest()
            after = os.fstat(handle.fileno())
        self.hashed_bytes += before.st_size
        changed_at = max(after.st_mtime, after.st_ctime)
        if _key(before) == _key(after) and time.time() - changed_at >= RACY_SECONDS:
            self.entries[real] = [*_key(after), digest, time.time()]
            self.changed = True
        return digest

    def save(self) -> None:
        """Write the cache back (the most recently used :data:`MAX_CACHE_ENTRIES`); a cache that
        cannot be written is no error (the next run hashes again)."""
        if not self.changed:
            return
        kept = sorted(self.entries.items(), key=lambda item: -float(item[1][6]))[:MAX_CACHE_ENTRIES]
        text = json.dumps({"version": CACHE_VERSION, "entries": dict(kept)}, separators=(",", ":"))
        try:
            atomic_write_text(self.path, text)
        except OSError:
            return
        self.changed = False


def checkpoint_files(directory: Path) -> list[Path]:
    """The files of a checkpoint directory its model computes from: ``config.json``, the weight
    files (``*.safetensors``, ``*.bin``) and their shard indexes, the tokenizer's files; by name."""
    wanted = []
    for file in sorted(directory.iterdir()):
        name = file.name
        if (
            name in CONFIG_FILES
            or name in TOKENIZER_FILES
            or name.endswith(WEIGHT_SUFFIXES)
            or name.endswith(INDEX_SUFFIXES)
        ):
            wanted.append(file)
    return wanted


def fingerprint(files: Iterable[Path], cache: HashCache | None = None) -> str:
    """``content:<hex>``: a SHA-256 over each file's name and the SHA-256 of its bytes."""
    cache = HashCache() if cache is None else cache
    digest = hashlib.sha256(b"posenc checkpoint content 1\0")
    try:
        for file in files:
            digest.update(f"{file.name}\0{cache.sha256(file)}\0".encode())
    finally:
        cache.save()
    return "content:" + digest.hexdigest()[:32]


__all__ = ["HashCache", "cache_path", "checkpoint_files", "fingerprint"]
