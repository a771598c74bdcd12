"""An encoding name typed on the command line is looked up in the registry once in the driver (when
the profile is checked; the grid reads the class from there and hands it to every run spec) and
once in a worker process (the spec arrives pickled, without the class), counted with a spy."""

from __future__ import annotations

import collections
import dataclasses
import pickle
import traceback
import weakref

import pytest
from click.testing import CliRunner

import posenc.registry as registry
from posenc.cli import main
from posenc.compare import work
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.records.models import build_model
from posenc.records.spec import RunSpec

#: Where a frame's file says the process is: a run's work, or reading finished records back
#: (the tables, figures and report after the grid, which are not the walk to the model).
WORK = ("compare/work.py",)
READING = ("/report/", "/viz/", "/analysis/", "/results/")


@pytest.fixture
def lookups(monkeypatch):
    """Every registry lookup of a name, counted by name and by where it happened: ``worker`` (in a
    run's work), ``reading`` (records read back for the tables and report), ``driver`` (the rest)."""
    counts: collections.Counter = collections.Counter()
    real = registry.GROUP.get

    def spy(name):
        files = [frame.filename for frame in traceback.extract_stack()]
        where = (
            "worker"
            if any(f.endswith(WORK) for f in files)
            else "reading"
            if any(part in f for f in files for part in READING)
            else "driver"
        )
        counts[(where, name)] += 1
        return real(name)

    monkeypatch.setattr(registry.GROUP, "get", spy)
    return counts


def test_the_spy_sees_a_lookup(lookups):
    registry.get_encoding_class("alibi")
    assert lookups == {("driver", "alibi"): 1}


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_the_driver_looks_a_typed_name_up_once(lookups, tmp_path, name):
    """``posenc compare --encodings NAME`` from the command line to the last run: one lookup, with
    two seeds and the profile's learning-rate search (every spec, candidate and row of the grid).
    The runs execute in this process here, so they see the class the grid handed them: none."""
    args = ["compare", "--profile", "smoke", "--encodings", name, "--tasks", "copy", "--seeds", "0,1",
            "--out", str(tmp_path / "out"), "--workers", "1"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "out").rglob(f"{name}__seed*.json*"))) >= 2, result.output
    assert lookups[("driver", name)] == 1, dict(lookups)
    assert lookups[("worker", name)] == 0, dict(lookups)


@pytest.mark.parametrize("name", ["rope", "t5"])
def test_a_worker_looks_the_name_up_once(lookups, name):
    """A spawned or Ray worker receives the spec pickled (the class stays behind) and resolves the
    name once for everything it builds and records."""
    (spec,) = [
        s for s in build_grid(get_profile("smoke"), encodings=(name,), tasks=("copy",)).specs if s.seed == 0
    ]
    arrived = pickle.loads(pickle.dumps(spec))
    assert "encoding_class" not in arrived.__dict__ or arrived.__dict__["encoding_class"] is None
    lookups.clear()
    work.execute(arrived)
    assert lookups[("worker", name)] == 1, dict(lookups)
    _ = arrived.label, arrived.paper_setting()  # after the run: the class it resolved is kept
    assert lookups[("worker", name)] + lookups[("driver", name)] == 1


def test_a_spec_carries_its_class_through_replace_but_not_to_another_encoding():
    spec = build_grid(get_profile("smoke"), encodings=("rope",), tasks=("copy",)).specs[0]
    cls = spec.resolved_class()
    assert dataclasses.replace(spec, seed=7).__dict__["encoding_class"] == ("rope", cls)
    assert dataclasses.replace(spec, encoding="alibi").__dict__["encoding_class"] is None
    assert dataclasses.replace(spec, encoding="alibi").resolved_class() is registry.get_encoding_class(
        "alibi"
    )
    assert "encoding_class" not in spec.to_dict() and spec == RunSpec.from_dict(spec.to_dict())


@pytest.mark.parametrize("name", ["alibi", "rope"])
def test_hf_apply_looks_the_name_up_once_for_every_layer(lookups, name):
    transformers = pytest.importorskip("transformers")
    import posenc.hf

    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    lookups.clear()
    posenc.hf.apply(
        model, name, **({"scaling": {"rope_type": "linear", "factor": 2.0}} if name == "rope" else {})
    )
    # rope: the model's own RoPE, read from its config to compare against, is a second, separate use
    assert lookups[("driver", name)] == (2 if name == "rope" else 1), dict(lookups)


def test_a_schedule_layer_keeps_its_class_and_pickles_without_it():
    from posenc.schedules import LayerEncoding

    layer = LayerEncoding("alibi", {}, "global")
    assert layer.resolved_class() is registry.get_encoding_class("alibi")
    arrived = pickle.loads(pickle.dumps(layer))
    assert "encoding_class" not in arrived.__dict__ and arrived == layer
    assert arrived.resolved_class() is layer.resolved_class()
    assert dataclasses.replace(layer, role="local").__dict__["encoding_class"][1] is layer.resolved_class()
    assert dataclasses.replace(layer, encoding="t5").resolved_class() is registry.get_encoding_class("t5")


def test_a_record_or_a_schedule_dict_cannot_hand_over_a_class():
    """The class travels only in memory: a record's spec or a schedule read from JSON naming
    ``encoding_class`` is refused, naming the key."""
    from posenc.core.errors import PosencError
    from posenc.schedules import Schedule

    spec = build_grid(get_profile("smoke"), encodings=("rope",), tasks=("copy",)).specs[0]
    with pytest.raises(PosencError, match="encoding_class"):
        RunSpec.from_dict({**spec.to_dict(), "encoding_class": "os:system"})
    layer = {"encoding": "alibi", "config": {}, "role": "", "encoding_class": "os:system"}
    with pytest.raises(PosencError, match="encoding_class"):
        Schedule.from_dict({"name": "", "layers": [layer]})
    with pytest.raises(PosencError):
        RunSpec(task="copy", encoding="rope", seed=0, encoding_class="os:system")


def test_a_class_is_checked_once_from_the_grid_to_the_models(monkeypatch):
    """The grid hands every run spec the class the profile looked up, and each model's config takes
    it from its spec: the class is checked (a concrete encoding: kind, Config) once in all, not once
    per spec and again per model (counted where a class that passes is remembered)."""
    checked: collections.Counter = collections.Counter()

    class Counting(weakref.WeakSet):
        def add(self, item):
            checked[item.__name__] += 1
            super().add(item)

    monkeypatch.setattr(registry, "_CHECKED", Counting())
    specs = build_grid(get_profile("smoke"), encodings=("rope",), tasks=("copy",), seeds=(0, 1)).specs
    assert len(specs) >= 2
    models = [build_model(spec) for spec in specs]
    assert all(type(m.blocks[0].attn.encoding).__name__ == "RoPE" for m in models)
    assert checked["RoPE"] == 1, dict(checked)


def test_a_profiles_scalings_are_parsed_once_each(monkeypatch):
    """A profile's scaling strings are parsed once each, when it is checked: the grid reads them
    from the profile (``Profile.resolved``) for every rotary run, task and seed, not parsed again."""
    from posenc.compare.profile import load_profile
    from posenc.records import benchmark_scalings

    parses: collections.Counter = collections.Counter()
    real = benchmark_scalings.parse

    def spy(text):
        parses[text] += 1
        return real(text)

    monkeypatch.setattr(benchmark_scalings, "parse", spy)
    prof = load_profile("quick")
    assert len(prof.scalings) >= 3 and parses == {text: 1 for text in prof.scalings}, dict(parses)
    specs = build_grid(prof).specs
    rotary = [s for s in specs if s.scalings]
    assert len(rotary) >= 3 * len(prof.seeds), len(rotary)  # every task, every seed
    assert any(s.finetune for s in rotary if s.task == "lm")
    tuned = {t for t in prof.scalings if real(t).needs_finetune}
    assert all(not tuned & set(s.scalings) for s in rotary if s.task != "lm")
    assert parses == {text: 1 for text in prof.scalings}, dict(parses)
    # a profile changed after it was checked parses what it does not hold, once per use
    changed = dataclasses.replace(prof, scalings=("ntk:2",))
    build_grid(changed, encodings=("rope",), tasks=("copy",), seeds=(0,))
    assert parses["ntk:2"] >= 1
