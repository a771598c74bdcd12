"""Which code ran (posenc.records.provenance): what differs between the code a record names and what runs now, said by name."""

from __future__ import annotations

from posenc.records.provenance import changes


def test_changes_name_what_differs():
    new = {"class": "mypkg:Enc", "distribution": "mypkg", "version": "0.2", "source_sha256": "b"}
    current = {"encodings": {"mine": new}, "task": None}
    same = {"encodings": {"mine": dict(new)}, "task": None}
    assert changes(same, current) == []
    assert changes({"encodings": {"mine": {**new, "version": "0.1"}}}, current) == [
        "encoding 'mine' (mypkg:Enc): mypkg was version 0.1, is now 0.2"
    ]
    assert (
        "its source file changed"
        in changes({"encodings": {"mine": {**new, "source_sha256": "a"}}}, current)[0]
    )
    assert (
        "was other:Enc, is now mypkg:Enc"
        in changes({"encodings": {"mine": {**new, "class": "other:Enc"}}}, current)[0]
    )
    moved = changes({"encodings": {"mine": {**new, "distribution": "other"}}}, current)
    assert moved == ["encoding 'mine' (mypkg:Enc) came from other, now from mypkg"]
    assert changes(None, current) == []  # a record from before records kept their code
    own = {
        "class": "posenc.encoding.bias:ALiBi",
        "distribution": "posenc",
        "version": "0.1.0",
        "source_sha256": "x",
    }
    assert (
        changes(
            {"encodings": {"alibi": {**own, "source_sha256": "y"}}},
            {"encodings": {"alibi": own}, "task": None},
        )
        == []
    )
