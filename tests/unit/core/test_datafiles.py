"""Tables kept as data files next to a typed loader: the benchmark's claims, the notes' claims
and the model presets. Each loads into its frozen dataclasses, and a bad entry is one error
naming the file, the entry and the key (posenc.core.datafiles)."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

import posenc
from posenc import presets
from posenc.analysis import notes
from posenc.core.datafiles import Where, data_fields, derived, read_json, typed
from posenc.core.errors import PosencError
from posenc.results import claims

# ---------------------------------------------------------------------------
# posenc.core.datafiles
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Inner:
    n: int
    x: float = 0.5


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    sizes: tuple[int, ...]
    pair: tuple[str, dict[str, Any]] | None = None
    inner: Inner = Inner(1)
    scores: dict[str, float] = dataclasses.field(default_factory=dict)


def test_typed_builds_nested_dataclasses_from_the_annotations():
    where = Where("t.json")
    raw = {
        "name": "a",
        "sizes": [1, 2],
        "pair": ["irope", {"k": 4}],
        "inner": {"n": 3, "x": 2},
        "scores": {"a": 1},
    }
    out = typed(Outer, raw, where)
    assert out == Outer("a", (1, 2), ("irope", {"k": 4}), Inner(3, 2.0), {"a": 1.0})
    assert isinstance(out.inner.x, float) and isinstance(out.scores["a"], float)  # ints read as floats
    assert typed(Outer, {"name": "b", "sizes": [], "pair": None}, where).pair is None


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"name": "a", "sizes": [1], "siezs": 1}, ["t.json: siezs", "unknown key", "did you mean 'sizes'"]),
        ({"sizes": [1]}, ["t.json: name", "missing"]),
        ({"name": 1, "sizes": [1]}, ["t.json: name = 1", "must be a string"]),
        ({"name": "a", "sizes": [1, True]}, ["sizes[1] = True", "must be an integer"]),
        ({"name": "a", "sizes": 3}, ["sizes = 3", "must be a list"]),
        ({"name": "a", "sizes": [], "pair": ["x"]}, ["pair", "must be a list of 2 values"]),
        ({"name": "a", "sizes": [], "inner": {"n": 1, "y": 2}}, ["inner.y", "unknown key"]),
        ({"name": "a", "sizes": [], "inner": {"x": 1.0}}, ["inner.n", "missing"]),
        ({"name": "a", "sizes": [], "scores": {"a": "high"}}, ["scores.a = 'high'", "must be a number"]),
        ([1, 2], ["t.json", "must be a table"]),
    ],
)
def test_typed_names_the_file_and_the_key_of_a_bad_value(raw, words):
    with pytest.raises(PosencError) as caught:
        typed(Outer, raw, Where("t.json"))
    assert all(word in str(caught.value) for word in words), str(caught.value)


# ---------------------------------------------------------------------------
# The benchmark's claims (posenc/results/claims.json)
# ---------------------------------------------------------------------------


def test_the_claims_file_loads_into_every_test_type_and_the_notes_measures():
    papers, notes_claims = claims.load_claims()
    assert [repr(c) for c in [*papers, *(c for _, c in notes_claims)]] == [repr(c) for c in claims.CLAIMS]
    used = {type(c.test) for c in claims.CLAIMS}
    assert used == set(claims.TESTS.values())  # every test type is exercised by the data
    assert all(c.source.startswith("The notes posenc was built from (") for _, c in notes_claims)


def _claims_data() -> dict:
    return copy.deepcopy(read_json("posenc.results", claims.CLAIMS_FILE))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            lambda d: d["papers"][0]["test"].update(type="treshold"),
            ["papers[0].test.type", "did you mean 'threshold'"],
        ),
        (lambda d: d["papers"][0]["test"].update(thresold=1.0), ["papers[0].test.thresold", "unknown key"]),
        (
            lambda d: d["papers"][0]["test"].update(threshold="1.1"),
            ["papers[0].test.threshold = '1.1'", "number"],
        ),
        (lambda d: d["papers"][0]["test"].update(side=">"), ["papers[0].test.side = '>'", "one of >=, <="]),
        (lambda d: d["papers"][0]["test"].update(column="ratio_3x"), ["papers[0].test.column", "ratio_2x"]),
        (lambda d: d["papers"][0]["test"].update(task="lmm"), ["papers[0].test.task = 'lmm'", "not a task"]),
        (lambda d: d["papers"][0].pop("paper"), ["papers[0].paper", "missing"]),
        (
            lambda d: d["notes"][0].update(measure="extrapolation:sinusoid"),
            ["notes[0].measure", "did you mean"],
        ),
        (lambda d: d.pop("notes"), ["claims.json", '"notes"']),
    ],
)
def test_a_bad_claim_entry_is_one_error_naming_it(edit, words):
    data = _claims_data()
    edit(data)
    with pytest.raises(PosencError) as caught:
        claims.load_claims(json.loads(json.dumps(data)))
    assert all(word in str(caught.value) for word in words), str(caught.value)


# ---------------------------------------------------------------------------
# The notes' claims (posenc/analysis/notes_claims.json)
# ---------------------------------------------------------------------------


def test_the_notes_table_loads_as_the_module_shows_it():
    table = notes.load_notes()
    assert table.claims == notes.CLAIMS and table.measures == notes.MEASURES
    assert {k: n.title for k, n in table.notes.items()} == notes.NOTES
    assert all(isinstance(c, notes.NoteClaim) for c in notes.CLAIMS) and len(notes.CLAIMS) >= 5 * 19


def _notes_data() -> dict:
    return copy.deepcopy(read_json("posenc.analysis", notes.CLAIMS_FILE))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            lambda d: d["claims"][0].update(note="lectures"),
            ["claims[0] (L1).note = 'lectures'", "did you mean 'lecture'"],
        ),
        (
            lambda d: d["claims"][0].update(verdict="hold"),
            ["claims[0] (L1).verdict = 'hold'", "did you mean 'holds'"],
        ),
        (
            lambda d: d["claims"][0].update(check="equivariant"),
            ["(L1).check = 'equivariant'", "equivariance"],
        ),
        (lambda d: d["claims"][1].update(id="L1"), ["claims[1] (L1).id", "used by an earlier claim"]),
        (
            lambda d: d["claims"][0].update(measure="open:warmup"),
            ["(L1).measure", "a pending claim names its measure"],
        ),
        (
            lambda d: d["claims"][0].update(sayz="x"),
            ["notes_claims.json: claims[0].sayz", "did you mean 'says'"],
        ),
        (lambda d: d["claims"][0].pop("truth"), ["claims[0].truth", "missing"]),
        (lambda d: d["notes"]["lecture"].pop("label"), ["notes.lecture.label", "missing"]),
    ],
)
def test_a_bad_notes_entry_is_one_error_naming_it(edit, words):
    data = _notes_data()
    edit(data)
    with pytest.raises(PosencError) as caught:
        notes.load_notes(data)
    assert all(word in str(caught.value) for word in words), str(caught.value)


# ---------------------------------------------------------------------------
# The model presets (posenc/presets.json)
# ---------------------------------------------------------------------------


def test_the_presets_file_loads_as_the_module_shows_it():
    assert presets.load_presets() == presets.PRESETS
    phi = presets.PRESETS["phi-3.5-mini"].config["scaling"]
    assert len(phi["short_factor"]) == len(phi["long_factor"]) == 48  # one per rotated pair, exact floats
    assert presets.PRESETS["llama-4-scout"].layers[0] in posenc.schedules.SCHEDULES


def _presets_data() -> dict:
    return copy.deepcopy(read_json("posenc", presets.PRESETS_FILE))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            lambda d: d["presets"]["gpt2"].update(encoding="lerned"),
            ["presets.gpt2.encoding", "did you mean 'learned'"],
        ),
        (lambda d: d["presets"]["gpt2"].update(d_model="768"), ["presets.gpt2.d_model = '768'", "integer"]),
        (
            lambda d: d["presets"]["gpt2"].update(num_head=12),
            ["presets.gpt2.num_head", "did you mean 'num_heads'"],
        ),
        (lambda d: d["presets"]["gpt2"].pop("source"), ["presets.gpt2.source", "missing"]),
        (
            lambda d: d["presets"]["gpt2"].update(layers=["irop", {}]),
            ["presets.gpt2.layers = 'irop'", "a builder"],
        ),
        (lambda d: d["presets"]["gpt2"].update(layers=["irope"]), ["presets.gpt2.layers", "2 values"]),
    ],
)
def test_a_bad_preset_is_one_error_naming_it(edit, words):
    data = _presets_data()
    edit(data)
    with pytest.raises(PosencError) as caught:
        presets.load_presets(data)
    assert all(word in str(caught.value) for word in words), str(caught.value)


@dataclasses.dataclass(frozen=True)
class WithDerived:
    n: int
    seen: dict = derived(dict)  # what a check resolved: not a key of a file


def test_a_derived_field_is_no_key_of_a_file():
    got = typed(WithDerived, {"n": 2}, Where("f.json"))
    assert got == WithDerived(2, {"any": 1}) and got.seen == {}
    assert [f.name for f in data_fields(WithDerived)] == ["n"]
    with pytest.raises(PosencError, match="f.json: seen: unknown key; valid keys: n"):
        typed(WithDerived, {"n": 2, "seen": {}}, Where("f.json"))
