"""The open registry with an out-of-tree encoding (tests/outoftree/posenc_demo, installed nowhere):
registered by name, named by import spec, and declared as an entry point of a distribution whose
dist-info directory is put on sys.path. Each way builds it, passes posenc.testing, and trains a
Transformer in a spawned process."""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

import pytest
import torch

import posenc
import posenc.testing
from posenc import registry
from posenc.nn.transformer import Transformer, TransformerConfig

OUT_OF_TREE = Path(__file__).parents[1] / "outoftree"
SPEC = "posenc_demo:LogDecayBias"


def dist_info(root: Path, name: str, entry_points: dict[str, str]) -> Path:
    """A minimal installed distribution: ``root/name-0.1.dist-info`` with METADATA and entry_points.txt."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = [f"{key} = {value}" for key, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[posenc.encodings]\n" + "\n".join(lines) + "\n")
    return root


@pytest.fixture
def out_of_tree(monkeypatch):
    """The demo package importable, nothing registered; clean registry state afterwards."""
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    registry.refresh()
    yield
    for name in list(registry._registered):
        posenc.unregister_encoding(name)
    sys.modules.pop("posenc_demo", None)
    registry.refresh()


@pytest.fixture
def entry_point(out_of_tree, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(dist_info(tmp_path / "site", "posenc-demo", {"logdecay": SPEC})))
    registry.refresh()
    return "logdecay"


def demo_class():
    import posenc_demo

    return posenc_demo.LogDecayBias


# -- the three ways in ---------------------------------------------------------------------


def test_register_by_name(out_of_tree):
    cls = demo_class()
    assert posenc.register("logdecay_mine", cls) is cls
    assert posenc.get_encoding_class("logdecay_mine") is cls
    assert "logdecay_mine" in posenc.ENCODINGS and posenc.ENCODINGS["logdecay_mine"] is cls
    assert list(posenc.ENCODINGS)[: len(registry.BUILTINS)] == list(registry.BUILTINS)
    assert [r["name"] for r in posenc.list_encodings()][-1] == "logdecay_mine"
    enc = posenc.build_for_model("logdecay_mine", d_model=16, num_heads=4)
    assert isinstance(enc, cls) and enc.config.num_heads == 4
    # a spawned worker cannot see the registration: it is handed the import spec
    assert posenc.encoding_spec("logdecay_mine") == SPEC
    # as a decorator, and registering the same class again is a no-op
    assert posenc.register("logdecay_again")(cls) is cls
    posenc.register("logdecay_again", cls)


def test_import_spec_wherever_a_name_is_taken(out_of_tree):
    cls = demo_class()
    assert posenc.get_encoding_class(SPEC) is cls
    assert isinstance(posenc.build(SPEC, num_heads=2), cls)
    assert posenc.encoding_spec(SPEC) == SPEC and posenc.encoding_spec(cls) == SPEC
    config = TransformerConfig(vocab_size=7, d_model=16, num_heads=2, num_layers=2, encoding=SPEC)
    model = Transformer(config)
    assert all(isinstance(block.attn.encoding, cls) for block in model.blocks)
    schedule = posenc.schedules.Schedule(
        (posenc.schedules.LayerEncoding(SPEC), posenc.schedules.LayerEncoding("rope"))
    )
    layers = schedule.build(d_model=16, num_heads=2)
    assert isinstance(layers[0], cls) and type(layers[1]) is posenc.ENCODINGS["rope"]
    assert SPEC not in posenc.ENCODINGS  # the mapping holds names; specs go through get_encoding_class


def test_entry_point_found_lazily(entry_point):
    cls = demo_class()
    assert entry_point not in registry._loaded
    assert posenc.get_encoding_class(entry_point) is cls
    assert posenc.ENCODINGS[entry_point] is cls and entry_point in list(posenc.ENCODINGS)
    assert posenc.encoding_spec(entry_point) == entry_point  # every process on this sys.path finds it
    assert isinstance(posenc.build_for_model(entry_point, d_model=8, num_heads=2), cls)


def test_builtins_are_looked_up_without_reading_entry_points(monkeypatch):
    registry.refresh()
    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda **_: pytest.fail("read"))
    assert posenc.get_encoding_class("rope") is registry.BUILTINS["rope"]
    registry.refresh()


# -- clear errors ----------------------------------------------------------------------------


def test_register_refuses_builtin_names_clashes_and_non_encodings(out_of_tree):
    cls = demo_class()
    with pytest.raises(posenc.PosencError, match="'rope' is a built-in encoding"):
        posenc.register("rope", cls)
    with pytest.raises(posenc.PosencTypeError, match="not an encoding class"):
        posenc.register("mine", torch.nn.Linear)
    with pytest.raises(posenc.PosencTypeError, match="kind"):
        posenc.register("mine", posenc.PositionalEncoding)
    with pytest.raises(posenc.PosencError, match="without ':'"):
        posenc.register("a:b", cls)
    posenc.register("mine", cls)

    class Other(cls):
        pass

    with pytest.raises(posenc.PosencError, match="already registered .* replace=True"):
        posenc.register("mine", Other)
    posenc.register("mine", Other, replace=True)
    assert posenc.get_encoding_class("mine") is Other
    with pytest.raises(posenc.PosencError, match="cannot be imported by another process"):
        posenc.encoding_spec("mine")  # defined inside a function
    with pytest.raises(posenc.PosencError, match="was not registered"):
        posenc.unregister_encoding("rope")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:Enc", "cannot import module 'no_such_module_xyz'"),
        ("posenc.encoding.rotary.rope:NoSuchClass", "has no attribute 'NoSuchClass'"),
        ("posenc.encoding.rotary.rope:apply_rotary", "not an encoding class"),
        ("posenc.encoding.base:RotaryEncoding", "needs a Config"),
        (":RoPE", "must look like 'package.module:Class'"),
    ],
)
def test_bad_import_specs_say_what_is_wrong(spec, message):
    with pytest.raises(posenc.PosencError, match=message):
        posenc.build(spec)


def test_broken_entry_point_is_named(out_of_tree, tmp_path, monkeypatch):
    site = dist_info(tmp_path / "site", "posenc-broken", {"broken": "posenc_demo:NoSuchClass"})
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()
    assert posenc.get_encoding_class("rope")  # built-ins never touch it
    with pytest.raises(
        posenc.PosencError, match=r"entry point 'broken' = 'posenc_demo:NoSuchClass'.*posenc-broken"
    ):
        posenc.get_encoding_class("broken")
    with pytest.raises(posenc.PosencError, match="entry point 'broken'"):
        list(posenc.ENCODINGS)  # listing loads every entry point


def test_entry_point_may_not_shadow_a_builtin(out_of_tree, tmp_path, monkeypatch):
    site = dist_info(tmp_path / "site", "posenc-shadow", {"rope": SPEC, "logdecay": SPEC})
    monkeypatch.syspath_prepend(str(site))
    registry.refresh()
    assert posenc.get_encoding_class("rope") is registry.BUILTINS["rope"]
    with pytest.warns(UserWarning, match="'rope' .*posenc-shadow.* name of a built-in encoding"):
        listed = posenc.encodings()
    # refused alone: the name means the built-in, the distribution's other entry point is listed
    assert listed["rope"] is registry.BUILTINS["rope"] and listed["logdecay"] is demo_class()


def test_encodings_view_is_read_only():
    with pytest.raises(TypeError):
        posenc.ENCODINGS["x"] = registry.BUILTINS["rope"]  # type: ignore[index]
    assert dict(posenc.ENCODINGS) == posenc.encodings() == registry.BUILTINS
    assert posenc.encodings(builtin_only=True) == registry.BUILTINS


# -- an instance as TransformerConfig.encoding -------------------------------------------------


def test_transformer_config_takes_an_instance():
    rope = posenc.build_for_model("rope", d_model=16, num_heads=2, base=500.0)
    model = Transformer(TransformerConfig(vocab_size=7, d_model=16, num_heads=2, num_layers=3, encoding=rope))
    assert all(block.attn.encoding is rope for block in model.blocks)  # RoPE shares across layers
    data = model.config.to_dict()
    assert data["encoding"] == "rope" and data["encoding_config"]["base"] == 500.0
    again = TransformerConfig.from_dict(data)
    assert again.encoding == "rope" and Transformer(again).blocks[0].attn.encoding.config == rope.config
    shaw = posenc.build_for_model("shaw", d_model=16, num_heads=2)  # learned per layer: copies
    layers = [
        b.attn.encoding
        for b in Transformer(TransformerConfig(vocab_size=7, d_model=16, num_heads=2, encoding=shaw)).blocks
    ]
    assert layers[0] is shaw and layers[1] is not shaw and type(layers[1]) is type(shaw)
    torch.testing.assert_close(layers[1].state_dict(), shaw.state_dict(), rtol=0, atol=0)
    with pytest.raises(posenc.PosencError, match="head_dim=8 but the model needs head_dim=4"):
        TransformerConfig(vocab_size=7, d_model=16, num_heads=4, encoding=rope)
    with pytest.raises(posenc.PosencError, match="encoding_config goes with an encoding name"):
        TransformerConfig(vocab_size=7, d_model=16, num_heads=2, encoding=rope, encoding_config={"base": 3.0})


# -- the contract and training in a spawned process --------------------------------------------


def test_each_way_passes_the_contract(entry_point):
    cls = demo_class()
    posenc.register("logdecay_mine", cls)
    for given in ("logdecay_mine", SPEC, entry_point, cls, posenc.build(SPEC, num_heads=2)):
        report = posenc.testing.assert_encoding(given)
        assert report.kind == "bias"
        not_for_a_bias = {"layout", "capabilities"}  # a rotary's layout; declares nothing more
        passed = [name for name in posenc.testing.PROPERTIES if name not in not_for_a_bias]
        assert [r.name for r in report.results if r.passed] == passed, str(report)


def test_each_way_trains_in_a_spawned_process(entry_point):
    posenc.register("logdecay_mine", demo_class())
    specs = [posenc.encoding_spec("logdecay_mine"), SPEC, posenc.encoding_spec(entry_point)]
    assert specs == [SPEC, SPEC, entry_point]
    import demo_worker

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        results = pool.map(demo_worker.train, specs)
    for result in results:
        assert result["class"] == SPEC and result["model"] == [SPEC]
        losses = result["losses"]
        assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] - 0.1
