"""Plug-ins are equal to built-ins: in tables, in errors, in the changed-code guard, at the command
line's start, and before training (posenc compare checks them against the contract first).

Out-of-tree packages (tests/outoftree, installed nowhere) come in by import spec, by run-time
registration, or as entry points of a distribution whose dist-info directory is put on sys.path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import posenc
from posenc import registry, viz
from posenc.cli import main
from posenc.compare.contract import check_plugins
from posenc.compare.grid import build_grid, check_installation
from posenc.compare.profile import PROFILES
from posenc.compare.runner import check_code
from posenc.core.code_hash import code_sha256
from posenc.records.provenance import changes, code_of
from posenc.records.store import ResultStore
from posenc.tasks import task_registry

OUT_OF_TREE = Path(__file__).parents[1] / "outoftree"
SMOKE = PROFILES["smoke"]
DEMO = "posenc_demo:LogDecayBias"
PLAIN = "posenc_plain:DistanceBias"
ECHO = "posenc_plain:Echo"


def dist_info(root: Path, name: str, groups: dict[str, dict[str, str]]) -> Path:
    """A minimal installed distribution: ``root/name-0.1.dist-info`` with its entry points."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    text = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
        for group, points in groups.items()
    )
    (info / "entry_points.txt").write_text(text)
    return root


@pytest.fixture
def outoftree(monkeypatch):
    """The out-of-tree packages importable; registries and modules as they were afterwards."""
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    registry.refresh()
    task_registry.GROUP.refresh()
    yield
    for name in list(registry.GROUP.registered):
        posenc.unregister_encoding(name)
    for name in list(task_registry.GROUP.registered):
        task_registry.unregister_task(name)
    for module in [m for m in sys.modules if m.startswith(("posenc_demo", "posenc_plain", "posenc_broken"))]:
        del sys.modules[module]
    registry.refresh()
    task_registry.GROUP.refresh()


@pytest.fixture
def installed(outoftree, tmp_path, monkeypatch):
    """Installs entry points: ``installed({group: {name: spec}})``."""

    def install(groups: dict[str, dict[str, str]], name: str = "posenc-plugin") -> None:
        monkeypatch.syspath_prepend(str(dist_info(tmp_path / f"site-{name}", name, groups)))
        registry.refresh()
        task_registry.GROUP.refresh()

    return install


def one_line(result) -> str:
    """The one error line of a command that must exit 2 without a traceback."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output and lines[-1].startswith("posenc: error:"), result.output
    return lines[-1]


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


# -- the terminal table prints import-spec tasks -----------------------------------------------


@pytest.mark.slow
def test_the_table_prints_a_task_named_by_import_spec(outoftree, tmp_path):
    result = invoke(
        "compare", "--profile", "smoke", "--encodings", "nope", "--tasks", ECHO, "--seeds", "0",
        "--set", "task_train.converge_at=0", "--no-report", "--out", tmp_path / "out",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    table = result.output[result.output.index(f"smoke: {ECHO}") :]
    rows = [line for line in table.splitlines() if line.startswith("│ nope")]
    assert rows and "%" in rows[0], table  # a row with its numbers, not an empty table
    assert f"contract: task {ECHO} passes" in result.output


# -- a plug-in Config's ValueError / TypeError: one line, exit 2, everywhere ----------------------


def test_a_plain_value_error_of_a_plugin_config_is_a_posenc_error(outoftree):
    from posenc_plain import DistanceBiasConfig

    with pytest.raises(posenc.PosencError, match=r"DistanceBiasConfig: scale must be > 0, got -1.0"):
        DistanceBiasConfig(num_heads=2, scale=-1.0)
    with pytest.raises(posenc.PosencTypeError, match=r"DistanceBiasConfig: scale must be a float") as info:
        posenc.build(PLAIN, num_heads=2, scale="big")
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize(
    ("value", "words"), [("-1.0", "scale must be > 0"), ('"big"', "scale must be a float")]
)
def test_posenc_check_says_a_plugin_config_error_in_one_line(outoftree, value, words):
    line = one_line(invoke("check", PLAIN, "--config", f"scale={value}"))
    assert "DistanceBiasConfig" in line and words in line


def test_posenc_compare_says_a_plugin_config_error_in_one_line(outoftree, tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text(
        f'extends = "smoke"\nencodings = ["{PLAIN}"]\n[encoding_config."{PLAIN}"]\nscale = -1.0\n'
    )
    line = one_line(invoke("compare", "--config", config, "--out", tmp_path / "a"))
    assert "scale must be > 0" in line and "exp.toml" in line
    from posenc_plain import DistanceBias

    posenc.register("plainbias", DistanceBias)
    line = one_line(
        invoke(
            "compare", "--profile", "smoke", "--encodings", "plainbias", "--set",
            "encoding_config.plainbias.scale=-1.0", "--out", tmp_path / "b",
        )
    )  # fmt: skip
    assert "scale must be > 0" in line and "--set" in line
    assert not list(tmp_path.rglob("*.json"))  # nothing ran


# -- the changed-code guard hashes what the class depends on --------------------------------------

PACKAGE = {
    "__init__.py": "",
    "helpers.py": "def scale():\n    return 2.0\n",
    "other.py": "def unused():\n    return 1\n",
    "late.py": "def value():\n    return 1\n",
    "base.py": "class Mixin:\n    def extra(self):\n        return 1\n",
    "encs.py": textwrap.dedent(
        """\
        from codepkg import helpers, other
        from codepkg.base import Mixin

        LIMIT = 3


        def _distance(q, k):
            return abs(q - k)


        class First(Mixin):
            def bias(self, q, k):
                return -helpers.scale() * min(_distance(q, k), LIMIT)


        class Second:
            def bias(self, q, k):
                return other.unused()

            def later(self):
                from codepkg import late

                return late.value()
        """
    ),
}


@pytest.fixture
def codepkg(tmp_path, monkeypatch):
    root = tmp_path / "src"
    (root / "codepkg").mkdir(parents=True)
    for name, text in PACKAGE.items():
        (root / "codepkg" / name).write_text(text)
    monkeypatch.syspath_prepend(str(root))
    import codepkg.encs  # noqa: F401  (imported as a user would, before any edit)

    yield root / "codepkg"
    for module in [m for m in sys.modules if m.startswith("codepkg")]:
        del sys.modules[module]


@pytest.mark.parametrize(
    ("path", "old", "new", "cls", "changed"),
    [
        ("encs.py", "return other.unused()", "return other.unused() + 1", "First", False),  # another class
        (
            "encs.py",
            "class Second:",
            "# a comment\n\n\nclass Second:",
            "First",
            False,
        ),  # elsewhere in the file
        ("other.py", "return 1", "return 2", "First", False),  # a helper module only the other class uses
        ("encs.py", "min(_distance", "max(_distance", "First", True),  # the class
        ("encs.py", "LIMIT = 3", "LIMIT = 4", "First", True),  # a constant it uses
        ("encs.py", "return abs(q - k)", "return abs(k - q) + 0", "First", True),  # a function it uses
        ("helpers.py", "return 2.0", "return 3.0", "First", True),  # a module of its package it imports
        ("base.py", "return 1", "return 2", "First", True),  # its base outside posenc
        ("late.py", "return 1", "return 2", "Second", True),  # a module a method imports when it runs
        ("late.py", "return 1", "return 2", "First", False),
    ],
)
def test_the_code_hash_follows_what_the_class_uses(codepkg, path, old, new, cls, changed):
    import codepkg.encs as encs

    before = code_sha256(getattr(encs, cls))
    assert before is not None and len(before) == 64
    source = codepkg / path
    source.write_text(source.read_text().replace(old, new))
    assert (code_sha256(getattr(encs, cls)) != before) is changed
    assert code_sha256(posenc.ENCODINGS["rope"]) is None  # posenc's own: the benchmark version's


def test_records_compare_the_code_hash_when_both_have_one():
    new = {
        "class": "mypkg:Enc",
        "distribution": "mypkg",
        "version": "0.2",
        "source_sha256": "b",
        "code_sha256": "c",
    }
    current = {"encodings": {"mine": new}, "task": None}
    # the file changed elsewhere (another class), the class did not
    assert changes({"encodings": {"mine": {**new, "source_sha256": "a"}}}, current) == []
    found = changes({"encodings": {"mine": {**new, "code_sha256": "d"}}}, current)
    assert len(found) == 1 and found[0].startswith("encoding 'mine' (mypkg:Enc): its code changed")
    old_record = {k: v for k, v in new.items() if k != "code_sha256"}  # written before code_sha256
    assert changes({"encodings": {"mine": {**old_record, "source_sha256": "a"}}}, current)


def _forge(store: ResultStore, specs, encodings: set[str]) -> None:
    """Records of ``specs`` whose code says the classes of ``encodings`` were other code."""
    for spec in specs:
        code = json.loads(json.dumps(code_of(spec)))
        for name in encodings & set(code["encodings"]):
            code["encodings"][name]["code_sha256"] = "0" * 64
        path = store.path_for(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"result": {"code": code}}))


def test_the_guard_names_every_changed_encoding_once_with_its_runs(outoftree, tmp_path):
    specs = build_grid(SMOKE, encodings=(DEMO, PLAIN), tasks=("copy",), seeds=(0, 1)).specs
    store = ResultStore(tmp_path)
    _forge(store, specs, {DEMO, PLAIN})
    with pytest.raises(posenc.PosencError) as info:
        check_code(specs, store, log=lambda _: None)
    message = str(info.value)
    assert message.startswith(f"4 finished run(s) in {tmp_path}")
    for name in (DEMO, PLAIN):
        assert message.count(f"encoding {name!r}") == 1 and f"encoding {name!r} (" in message
    assert message.count("(2 run(s), e.g.") == 2 and "--allow-changed" in message
    said: set[str] = set()
    logged: list[str] = []
    for _ in range(3):  # the checks of one invocation: said once
        assert check_code(specs, store, allow_changed=True, log=logged.append, said=said) == 4
    assert len(logged) == 1 and logged[0].startswith("keeping 4 run(s)")


@pytest.mark.slow
def test_allow_changed_is_said_once_per_compare(outoftree, tmp_path, monkeypatch):
    from posenc.compare import compare

    module = tmp_path / "src" / "posenc_edited.py"
    module.parent.mkdir()
    module.write_text(
        'from posenc_demo import LogDecayBias\n\n\nclass Edited(LogDecayBias):\n    """As made."""\n'
    )
    monkeypatch.syspath_prepend(str(module.parent))
    spec, out = "posenc_edited:Edited", tmp_path / "out"

    def run(log, **kwargs):
        return compare(SMOKE, encodings=(spec,), tasks=("copy",), seeds=(0,), out=out, show_progress=False,
                       log=log, workers=1, **kwargs)  # fmt: skip

    assert len(run(lambda _: None).outcome.done) == 1
    module.write_text(module.read_text().replace("As made.", "Edited since."))  # the class changed
    with pytest.raises(posenc.PosencError, match=f"encoding '{spec}' .*its code changed"):
        run(lambda _: None)
    logged: list[str] = []
    assert len(run(logged.append, allow_changed=True).outcome.skipped) == 1
    assert len([line for line in logged if "--allow-changed" in line]) == 1, logged
    sys.modules.pop("posenc_edited", None)


# -- entry points: a clash is refused alone; a broken one breaks nothing that does not ask for it --


def test_a_clashing_entry_point_is_refused_alone(installed):
    installed({"posenc.encodings": {"rope": DEMO, "logdecay": DEMO}}, "posenc-clash")
    result = invoke("list", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["logdecay"]["kind"] == "bias" and rows["rope"]["kind"] == "rotary"  # the built-in
    assert "entry point 'rope'" in result.stderr and "posenc-clash" in result.stderr
    notes: list[str] = []
    check_installation(["nope", "logdecay"], ["copy"], log=notes.append)  # does not ask for it
    assert len(notes) == 1 and "name of a built-in encoding" in notes[0]
    with pytest.raises(posenc.PosencError, match="entry point 'rope'.*posenc-clash"):
        check_installation(["rope"], ["copy"])


SCRIPT = """
import json, sys
sys.path[:0] = [{site!r}]
from click.testing import CliRunner
from posenc.cli import main
for args in {commands!r}:
    result = CliRunner().invoke(main, args)
    print(json.dumps([args, result.exit_code, result.stderr + result.stdout[-400:]]))
"""


@pytest.mark.slow
def test_a_broken_entry_point_breaks_no_command_that_does_not_ask_for_it(tmp_path):
    """In a fresh process (the command line's start is what broke): every command but the ones
    asking for the broken entry points works; those say which entry point, in one line."""
    site = dist_info(
        tmp_path / "site", "posenc-bad",
        {"posenc.tasks": {"badtask": "no_such_module_xyz:Task"},
         "posenc.encodings": {"badenc": "no_such_module_xyz:Enc"}},
    )  # fmt: skip
    out = str(tmp_path / "out")
    commands = [
        ["--help"], ["--version"], ["show", "sinusoidal", "--positions", "4", "--dim", "8"],
        ["check", "rope", "--property", "offsets"], ["list"], ["list", "--tasks"], ["compare", "--list-profiles"],
        ["compare", "--encodings", "nope", "--tasks", "copy", "--print-config"],
        ["compare", "--encodings", "badenc", "--tasks", "copy", "--out", out],
        ["compare", "--encodings", "nope", "--tasks", "badtask", "--out", out],
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(site=str(site), commands=commands)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = {
        tuple(args): (code, output) for args, code, output in map(json.loads, done.stdout.splitlines())
    }
    for args in commands[:-2]:
        code, output = results[tuple(args)]
        assert code == 0, (args, output)
    assert "entry point 'badenc'" in results[("list",)][1]  # said, the others listed
    assert "entry point 'badtask'" in results[("list", "--tasks")][1]
    for args, name in ((commands[-2], "badenc"), (commands[-1], "badtask")):
        code, output = results[tuple(args)]
        assert code == 2 and f"entry point {name!r}" in output and "Traceback" not in output, output


# -- a plug-in that exits on import is an error, never exit 0 -------------------------------------


def test_a_module_that_exits_on_import_is_an_error(installed, tmp_path, monkeypatch):
    line = one_line(invoke("check", "posenc_exits:Enc"))
    assert "SystemExit" in line and "posenc_exits" in line
    (tmp_path / "posenc_interrupts.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "KeyboardInterrupt" in one_line(invoke("check", "posenc_interrupts:Enc"))
    line = one_line(
        invoke("compare", "--profile", "smoke", "--encodings", "posenc_exits:Enc", "--out", tmp_path / "a")
    )
    assert "SystemExit" in line
    installed(
        {"posenc.encodings": {"exiter": "posenc_exits:Enc"}, "posenc.tasks": {"exitask": "posenc_exits:T"}}
    )
    assert "entry point 'exiter'" in one_line(invoke("check", "exiter"))
    line = one_line(invoke("compare", "--profile", "smoke", "--encodings", "exiter", "--out", tmp_path / "b"))
    assert "SystemExit" in line
    line = one_line(invoke("compare", "--profile", "smoke", "--tasks", "exitask", "--out", tmp_path / "c"))
    assert "entry point 'exitask'" in line and "SystemExit" in line
    assert not list(tmp_path.rglob("*.json"))


# -- posenc compare checks outside encodings and tasks against the contract first -----------------


def test_compare_refuses_a_broken_encoding_before_training_it(outoftree, tmp_path):
    result = invoke(
        "compare", "--profile", "smoke", "--encodings", "posenc_broken:DroppedPair,nope", "--tasks", "copy",
        "--seeds", "0", "--out", tmp_path,
    )  # fmt: skip
    line = one_line(result)
    assert "encoding posenc_broken:DroppedPair with " in line and "(shapes_and_dtypes" in line
    assert "fail(s) posenc's contract" in line and "--no-check" in line
    assert "FAIL  shapes_and_dtypes" in result.output  # the report, above the error
    assert not list(tmp_path.rglob("*.json"))  # nothing trained


def test_compare_refuses_a_broken_task_before_training(outoftree, tmp_path):
    line = one_line(invoke("compare", "--profile", "smoke", "--encodings", "nope", "--tasks",
                           "posenc_broken:MarkerTask", "--out", tmp_path))  # fmt: skip
    assert "task posenc_broken:MarkerTask (examples" in line


def test_no_check_trains_it_anyway(outoftree, tmp_path, monkeypatch):
    import posenc.compare

    def reached(*args, **kwargs):
        raise posenc.PosencError("reached the runs")

    monkeypatch.setattr(posenc.compare, "run_grid", reached)
    args = ["compare", "--profile", "smoke", "--encodings", "posenc_broken:DroppedPair", "--tasks", "copy",
            "--seeds", "0", "--out", tmp_path]  # fmt: skip
    assert "reached the runs" in one_line(invoke(*args, "--no-check"))
    assert "reached the runs" not in one_line(invoke(*args))


def test_only_outside_encodings_and_tasks_are_checked(outoftree, monkeypatch):
    import posenc.compare.contract as contract

    checked: list[str] = []
    original = contract.check_encoding

    def spy(name, **kwargs):
        checked.append(name)
        return original(name, **kwargs)

    monkeypatch.setattr(contract, "check_encoding", spy)
    assert check_plugins(build_grid(SMOKE, seeds=(0,)).specs, log=lambda _: None) == []  # built-ins
    specs = build_grid(SMOKE, encodings=("nope", PLAIN), tasks=("copy", ECHO), seeds=(0, 1)).specs
    logged: list[str] = []
    reports = check_plugins(specs, log=logged.append)
    assert checked == [PLAIN]  # once, however many runs use it
    assert [r.encoding for r in reports] == [PLAIN, ECHO] and all(r.passed for r in reports)
    assert all(line.startswith("contract: ") and "passes" in line for line in logged)


# -- figures -------------------------------------------------------------------------------------


def test_grid_refusal_for_a_bias_encoding_reads_naturally():
    line = one_line(invoke("plot", "alibi", "--kind", "grid", "-o", "unused.png"))
    assert "needs kind additive or rotary or bias" not in line
    assert "'grid' needs an additive or rotary encoding, or a bias encoding whose positions have axes" in line


def test_spectrum_is_for_rotaries_that_take_ropes_scalings(outoftree):
    assert "spectrum" in viz.applicable("rope")
    assert "spectrum" not in viz.applicable("xpos")  # a base, but none of RoPE's scalings
    line = one_line(invoke("plot", "posenc_broken:PlainTurn", "--kind", "spectrum", "-o", "unused.png"))
    assert "supports_scaling" in line
    enc = posenc.build("posenc_broken:PlainTurn", head_dim=8)
    with pytest.raises(posenc.PosencError, match="takes none"):
        viz.figures.spectrum(enc)


# -- a rotary encoding in transformers' models ---------------------------------------------------


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        intermediate_size=64, vocab_size=50,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.peers
def test_hf_apply_says_what_a_custom_rotary_must_add(outoftree):
    model = _tiny_llama()
    enc = posenc.build("posenc_broken:PlainTurn", head_dim=8)
    with pytest.raises(posenc.PosencError, match=r"add cos_sin\(positions, dtype\) -> \(cos, sin\)") as info:
        posenc.hf.apply(model, enc)
    assert "docs/your-encoding.md" in str(info.value)


@pytest.mark.peers
def test_the_docs_rotary_example_runs_inside_a_transformers_model():
    model = _tiny_llama()
    text = (Path(__file__).parents[2] / "docs" / "your-encoding.md").read_text()
    block = next(b for b in text.split("```python\n") if "class EvenTurn(" in b).split("```")[0]
    namespace: dict = {"__name__": "docs_even_turn"}
    sys.modules["docs_even_turn"] = type(sys)("docs_even_turn")
    try:
        exec(compile(block, "your-encoding.md", "exec"), sys.modules["docs_even_turn"].__dict__)
        namespace = sys.modules["docs_even_turn"].__dict__
        enc = namespace["EvenTurn"](namespace["EvenTurnConfig"](head_dim=8, slowest=0.01))
        ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(1))
        posenc.hf.apply(model, enc)
        with torch.no_grad():
            logits = model(ids).logits
            shifted = model(ids, position_ids=torch.arange(9).expand(2, 9) + 5).logits
        torch.testing.assert_close(shifted, logits, rtol=1e-5, atol=1e-5)  # relative, as declared
        report = posenc.testing.check_encoding(enc, properties=["capabilities", "layout"])
        assert report.passed and "cos_sin()" in report["capabilities"].detail
    finally:
        del sys.modules["docs_even_turn"]
