"""Your own text for perplexity: documents of token ids, each at least the longest length.

posenc's own documents are Shakespeare's plays (:mod:`posenc.extend.books`, ``--text shakespeare``,
the default). Your text is a path:

- a directory: each ``.txt`` file (in name order) is one document, and each line of a
  ``.jsonl`` file with a ``"text"`` field (PG19's test books as ``.txt`` files, Proof-pile as
  JSON lines);
- one ``.txt`` file: cut into consecutive documents (one long text, a book, read in parts);
- one ``.jsonl`` file: one document per line.

Only regular files are read (a FIFO, a device or a link to one is refused by name, never opened
for reading), each up to 64 MiB, and a JSON line's nesting is bounded before it is parsed.

A document shorter than the longest evaluation length is skipped (the YaRN paper evaluates
documents of at least the longest length, truncated to each length).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from posenc.core import untrusted
from posenc.core.errors import PosencError

#: What the first releases read: the standard library's documentation topics joined (short texts one
#: after another, not long documents); refused by name, and kept as text the tests train tokenizers on
PYTHON_DOCS = "python-docs"
MAX_FILE_BYTES = 64 << 20  # a book is ~0.5 MB; a larger file is read up to this much
MAX_JSONL_DEPTH = 32  # a JSON line is {"text": ..., "meta": {...}}: a few levels
CHARS_PER_TOKEN = 8  # more characters than any tokenizer needs for one token of prose

Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True)
class Documents:
    """Token ids of the documents (each exactly ``length`` tokens) and where they came from."""

    source: str
    documents: tuple[tuple[int, ...], ...]
    sha256: str

    def describe(self) -> dict[str, object]:
        return {"source": self.source, "documents": len(self.documents), "sha256": self.sha256}


def python_docs_text() -> str:
    """The standard library's documentation topics (``pydoc_data.topics``), in the order of their
    names: English prose that ships with every Python (the tests train small tokenizers on it)."""
    from pydoc_data import topics  # the standard library's own data (no network)

    return "\n\n".join(topics.topics[name] for name in sorted(topics.topics))


def _streams(source: str) -> Iterator[tuple[str, bool]]:
    """(text, whether it is one stream to cut into documents) for ``source``."""
    path = Path(source)
    if source == PYTHON_DOCS and not path.exists():
        raise PosencError(
            f"--text {source!r}: the standard library's documentation topics are short texts, and joined they "
            "are no long document; use 'shakespeare' (the plays) or a path of your own"
        )
    if not path.exists():
        what = untrusted.what_is(path)
        what = "no such file or directory" if what == "no such file" else what
        raise PosencError(f"--text {source!r}: {what} (or use 'shakespeare')")
    files = sorted(p for p in path.iterdir() if p.suffix in (".txt", ".jsonl")) if path.is_dir() else [path]
    if path.is_dir() and not files:
        raise PosencError(f"--text {source!r}: the directory has no .txt or .jsonl files")
    for file in files:
        if file.suffix not in (".txt", ".jsonl"):
            raise PosencError(f"--text {source!r}: give a .txt or .jsonl file, or a directory of them")
        text = _read_text(file)
        if file.suffix == ".txt":
            yield text, not path.is_dir()
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield _jsonl_text(file, number, line), False


def _read_text(file: Path) -> str:
    """A text file's first :data:`MAX_FILE_BYTES`, read only when it is a regular file (a FIFO
    named ``a.txt`` would block the open, ``a.txt -> /dev/zero`` never ends): refused by name."""
    try:
        with untrusted.open_regular(file) as handle:
            raw = handle.read(MAX_FILE_BYTES)
    except OSError as exc:
        what = untrusted.what_is(file)
        reason = what if what != "a regular file" else f"unreadable ({exc.strerror or type(exc).__name__})"
        raise PosencError(
            f"--text {os.fspath(file)!r}: {reason}; give regular .txt or .jsonl files"
        ) from None
    return raw.decode("utf-8", errors="replace")


def _jsonl_text(file: Path, number: int, line: str) -> str:
    """The ``"text"`` of one JSON line, its nesting bounded before it is parsed."""
    where = f"--text {os.fspath(file)!r}: line {number}"
    try:
        item = untrusted.loads(line, max_depth=MAX_JSONL_DEPTH)
    except untrusted.TooDeep as exc:
        raise PosencError(f"{where} {exc}; not a document") from None
    except ValueError:  # not JSON, or a number of more digits than Python reads
        raise PosencError(f"{where} is not JSON") from None
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        raise PosencError(f'{where} has no "text" string')
    return item["text"]


def documents(source: str, tokenize: Tokenize, *, count: int, length: int, prefix: list[int]) -> Documents:
    """``count`` documents of exactly ``length`` token ids from ``source`` (``prefix``, the
    tokenizer's start-of-text ids, first in each)."""
    body = length - len(prefix)
    out: list[tuple[int, ...]] = []
    digest = hashlib.sha256()
    for text, cut in _streams(source):
        if cut:
            ids = tokenize(text)
            for start in range(0, len(ids) - body + 1, body):
                out.append(tuple(prefix + ids[start : start + body]))
                if len(out) == count:
                    break
        else:
            ids = tokenize(text[: body * CHARS_PER_TOKEN])
            if len(ids) >= body:
                out.append(tuple(prefix + ids[:body]))
        if len(out) == count:
            break
    if len(out) < count:
        raise PosencError(
            f"--documents {count}: the text {source!r} has {len(out)} document(s) of at least {length} tokens; "
            "ask for fewer documents or shorter lengths, or give a longer --text"
        )
    for doc in out:
        digest.update(json.dumps(doc, separators=(",", ":")).encode())
    return Documents(source, tuple(out), digest.hexdigest())


__all__ = ["PYTHON_DOCS", "Documents", "documents", "python_docs_text"]
