"""``posenc extend``: the grid's scalings, the passkey prompts, a run and its resume on a tiny random
Llama (a config saved to a temporary directory, a byte-level tokenizer trained here in a second),
and the one-line refusals of bad input (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.extend import passkey as pk
from posenc.extend import protocol as protocols
from posenc.extend import scalings as sc

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CONTEXT = 64  # the tiny model's trained context


def _tokenizer(root: Path) -> None:
    from posenc.extend.text import python_docs_text

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [python_docs_text()[:60_000]], vocab_size=300, min_frequency=2, show_progress=False
    )
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer).save_pretrained(root)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A random-weight Llama with a 64-token context and its tokenizer, saved as a checkpoint."""
    root = tmp_path_factory.mktemp("tiny-llama")
    _tokenizer(root)
    vocab = len(transformers.AutoTokenizer.from_pretrained(root))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=vocab, max_position_embeddings=CONTEXT, initializer_range=0.5,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(root)
    return root


def tiny_protocol(model: Path, **changes) -> protocols.Protocol:
    base = protocols.Protocol(
        name="tiny", model=str(model), documents=2, lengths=(32, 64, 128), chunk=40, workers=1,
        scalings=("none", "linear", "dynamic:1", "yarn", "dynamic-yarn"), factors=(2.0,), device="cpu",
        passkey=protocols.Passkey(lengths=(256, 320), depths=(0.2, 0.8), trials=1),
    )  # fmt: skip
    return protocols.replace(base, **changes)


# --- the scalings -------------------------------------------------------------------------------


def test_scaling_entries_parse_with_the_grid_factors_and_refuse_bad_names():
    assert sc.parse("yarn", (2.0, 4.0)) == [sc.Entry("yarn", 2.0), sc.Entry("yarn", 4.0)]
    assert sc.parse("YaRN:8", (2.0,)) == [sc.Entry("yarn", 8.0)]
    assert sc.parse("dynamic_yarn", (2.0,)) == [sc.Entry("dynamic-yarn")]
    for bad, words in [("yarm", "did you mean"), ("none:2", "takes no factor"), ("linear:0.5", "[1, 1024]"),
                       ("linear:x", "must be a number")]:  # fmt: skip
        with pytest.raises(PosencError, match=words.replace("[", r"\[")):
            sc.parse(bad, (2.0,))


def test_length_dependent_entries_are_posenc_own_formulas_at_each_length():
    """dynamic NTK at L is posenc's 'dynamic' at seq_len L, term for term (bit-equal frequencies);
    up to the context every dynamic entry is plain RoPE; at 2x dynamic:1 is NTK x2 and dynamic YaRN
    is YaRN x2 (so their passes are shared)."""
    dim, base = 64, 1e5
    for entry in (sc.Entry("dynamic", 1.0), sc.Entry("dynamic", 2.0)):
        for length in (CONTEXT // 2, CONTEXT, CONTEXT + 1, 3 * CONTEXT, 1000):
            sc.check_equivalent(entry, length, CONTEXT, dim=dim, base=base)
            own = rope_scaling.compute(entry.dynamic_dict(CONTEXT), dim=dim, base=base, seq_len=length)
            static = rope_scaling.compute(entry.at(length, CONTEXT), dim=dim, base=base, seq_len=length)
            assert torch.equal(own[0], static[0])
    assert sc.Entry("dynamic", 1.0).at(2 * CONTEXT, CONTEXT) == sc.Entry("ntk", 2.0).at(2 * CONTEXT, CONTEXT)
    assert sc.Entry("dynamic-yarn").at(2 * CONTEXT, CONTEXT) == sc.Entry("yarn", 2.0).at(2 * CONTEXT, CONTEXT)
    assert sc.Entry("dynamic", 2.0).at(2 * CONTEXT, CONTEXT) == {"rope_type": "ntk", "factor": 3.0}
    for entry in (sc.Entry("dynamic", 2.0), sc.Entry("dynamic-yarn")):
        assert entry.at(CONTEXT, CONTEXT) is None
    longrope = {"short_factor": [1.0] * 4, "long_factor": [2.0, 3.0, 4.0, 5.0], "factor": 4.0}
    for length in (CONTEXT, CONTEXT + 1):
        sc.check_equivalent(sc.Entry("longrope"), length, CONTEXT, dim=8, base=base, longrope=longrope)


# --- the passkey prompts ------------------------------------------------------------------------


def _words(text: str, special: bool) -> list[int]:
    return ([1] if special else []) + [hash(w) % 1000 + 2 for w in text.split()]


def test_passkey_prompts_have_their_length_and_depth_and_share_the_trunk():
    cells = [(200, 0.1), (200, 0.9), (400, 0.5)]
    tokens, forks = pk.trunk(_words, cells, seed=3, trial=0)
    assert [f.position for f in forks] == sorted(f.position for f in forks)
    block = len(_words(pk.FILLER, False))
    for fork in forks:
        assert fork.position + len(fork.suffix) == fork.length  # the prompt is exactly its length
        assert fork.position <= len(tokens)
        assert abs(fork.placed - fork.depth) <= block / (fork.length - 60)  # moved to a sentence boundary
        assert len(fork.answer) == pk.DIGITS and fork.answer[0] != "0"
        key = _words(pk.KEY.format(key=fork.answer), False)
        assert list(fork.suffix[: len(key)]) == key
        assert fork.suffix[-len(_words(pk.QUESTION, False)) :] == tuple(_words(pk.QUESTION, False))
    assert len({f.answer for f in forks}) == 3
    again = pk.trunk(_words, cells, seed=3, trial=0)
    assert again == (tokens, forks)  # a resumed run asks the same questions
    assert pk.trunk(_words, cells, seed=3, trial=1)[1][0].answer != forks[0].answer
    with pytest.raises(PosencError, match="too short"):
        pk.trunk(_words, [(40, 0.5)], seed=0, trial=0)


def test_passkey_is_scored_exactly_on_the_first_number():
    assert pk.score("48213", " 48213. Remember")
    assert not pk.score("48213", " 4821")
    assert not pk.score("48213", " 148213")
    assert not pk.score("48213", " the key is")


# --- the protocols -------------------------------------------------------------------------------


def test_shipped_protocols_load_and_the_default_reaches_twice_its_context():
    assert {"smollm2", "yarn-llama2"} <= set(protocols.shipped_names())
    smol = protocols.load("smollm2")
    assert smol.model == "" and max(smol.lengths) >= 2 * 8192 and min(smol.lengths) <= 8192 // 4
    assert max(smol.passkey.lengths) >= 2 * 8192
    yarn = protocols.load("yarn-llama2")
    assert yarn.needs and max(yarn.lengths) == 131072 and yarn.device == "cuda"
    text = protocols.dump(smol)
    assert protocols.load("smollm2") == smol and "[passkey]" in text


def test_protocol_keys_are_typed_and_range_checked():
    with pytest.raises(PosencError, match="unknown key"):
        protocols.load("smollm2", ["documentz=2"])
    with pytest.raises(PosencError, match="documents must be in"):
        protocols.load("smollm2", ["documents=0"])
    with pytest.raises(PosencError, match=r"passkey.depths must be in \[0, 1\]"):
        protocols.load("smollm2", ["passkey.depths=[1.5]"])
    with pytest.raises(PosencError, match="not a shipped protocol"):
        protocols.load("smolm2")
    assert protocols.load("smollm2", ["passkey.trials=3"]).passkey.trials == 3


# --- a run, its records and its resume ------------------------------------------------------------


@pytest.mark.slow
def test_a_run_writes_table_figures_and_records_and_a_rerun_resumes_without_computing(
    tiny, tmp_path, monkeypatch
):
    from posenc import extend

    out = tmp_path / "out"
    first = extend.run(tiny_protocol(tiny), out=out, show_progress=False, log=lambda m: None)
    assert not first.failed and first.resumed == 0
    # text: none, linear x2, NTK x2 (dynamic:1 at 128), YaRN x2 (= dynamic-yarn at 128): 4 passes per
    # document, dynamic:1 and dynamic-yarn add none; passkey (256 and 320 tokens, past the context): none,
    # linear x2, YaRN x2, and dynamic:1 / dynamic-yarn at each length (NTK x4, x5, YaRN x4, x5): 7 trunks
    records = sorted((out / "cells").glob("*.json"))
    assert first.done == len(records) == 4 * 2 + 7
    summary = first.summary
    assert [e["label"] for e in summary["entries"]] == [
        "none",
        "linear x2",
        "dynamic x1",
        "yarn x2",
        "dynamic-yarn",
    ]
    ppl = summary["perplexity"]
    for label in ppl:
        assert set(ppl[label]) == {"32", "64", "128"} and ppl[label]["128"]["documents"] == 2
        assert ppl[label]["32"]["low"] <= ppl[label]["32"]["value"] <= ppl[label]["32"]["high"]
    # inside the context dynamic scalings are plain RoPE exactly; static ones are not
    assert ppl["dynamic x1"]["64"] == ppl["none"]["64"] and ppl["dynamic-yarn"]["64"] == ppl["none"]["64"]
    assert ppl["linear x2"]["64"]["value"] != ppl["none"]["64"]["value"]
    assert ppl["dynamic-yarn"]["128"] == ppl["yarn x2"]["128"]
    assert summary["inside"]["none"]["value"] == pytest.approx(1.0)
    assert set(summary["passkey"]["none"]) == {"256", "320"}
    assert summary["passkey"]["none"]["320"]["prompts"] == 2
    for name in ("perplexity", "loss_by_position", "passkey"):
        assert Path(first.files[name]).stat().st_size > 1000
    table = (out / "summary.md").read_text()
    assert "| yarn x2 |" in table and "ppl @128" in table and "passkey @320" in table
    record = json.loads(records[0].read_text())
    assert record["schema"] == "posenc-extend/1" and record["checkpoint"]["context"] == CONTEXT

    def refuse(*args, **kwargs):
        raise AssertionError("a finished cell was computed again")

    monkeypatch.setattr(extend, "execute", refuse)
    second = extend.run(tiny_protocol(tiny), out=out, show_progress=False, log=lambda m: None)
    assert second.done == 0 and second.resumed == len(records)
    assert second.summary["perplexity"] == summary["perplexity"]
    assert second.summary["passkey"] == summary["passkey"]

    edited = json.loads(records[0].read_text())
    edited["result"]["edited"] = True  # a hand edit: the checksum no longer matches
    records[0].write_text(json.dumps(edited))
    monkeypatch.undo()
    logged: list[str] = []
    third = extend.run(tiny_protocol(tiny), out=out, show_progress=False, log=logged.append)
    assert third.done == 1 and third.resumed == len(records) - 1
    assert any("corrupt" in line for line in logged)
    assert (records[0].parent / (records[0].name + ".corrupt")).exists()


@pytest.mark.slow
def test_the_command_runs_a_tiny_grid_and_prints_the_table(tiny, tmp_path):
    from click.testing import CliRunner

    from posenc.cli import main

    args = ["extend", "--model", str(tiny), "--lengths", "32,96", "--documents", "1", "--scalings", "none,yarn:2",
            "--passkey-lengths", "256", "--passkey-depths", "0.5", "--chunk", "64", "--workers", "1",
            "--device", "cpu", "--no-figures", "--out", str(tmp_path / "o")]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert (
        "yarn x2" in result.output
        and "ppl @96" in result.output
        and "cells: 4 done, 0 resumed" in result.output
    )
    again = CliRunner().invoke(main, args)
    assert "cells: 0 done, 4 resumed" in again.output


# --- bad input: one line, exit 2 ------------------------------------------------------------------


def _refused(args: list[str], words: str) -> None:
    from click.testing import CliRunner

    from posenc.cli import main

    result = CliRunner().invoke(main, ["extend", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("posenc: error:"), result.output
    assert words in lines[0], lines[0]


def test_a_directory_that_is_not_a_checkpoint_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    _refused(["--model", str(tmp_path), "--out", str(tmp_path / "o")], "not a Hugging Face checkpoint")
    _refused(["--model", str(tmp_path / "notes.txt"), "--out", str(tmp_path / "o")], "not .gguf")
    _refused(
        ["--model", str(tmp_path / "missing"), "--out", str(tmp_path / "o")], "no such file or directory"
    )


def test_a_model_without_rope_is_refused(tmp_path):
    config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=32)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    _refused(
        ["--model", str(tmp_path / "gpt2"), "--out", str(tmp_path / "o")], "has no rotary position embedding"
    )


def test_a_scaling_the_family_refuses_is_refused(tmp_path):
    from posenc.hf.families import FAMILIES

    family = FAMILIES["deepseek_v3"]
    config = getattr(transformers, family.config_class)(**family.small_config())
    getattr(transformers, family.model_class)(config).save_pretrained(tmp_path / "dsv3")
    _refused(
        ["--model", str(tmp_path / "dsv3"), "--out", str(tmp_path / "o")],
        "refuses new scalings in DeepSeek-V3",
    )


def test_a_scaling_the_config_cannot_take_and_unknown_names_are_refused(tiny, tmp_path):
    out = ["--out", str(tmp_path / "o"), "--device", "cpu"]
    _refused(["--model", str(tiny), "--scalings", "longrope", *out], "no LongRoPE factors")
    _refused(["--model", str(tiny), "--scalings", "none,yarm", *out], "did you mean")
    _refused(["--model", str(tiny), "--set", "documentz=1", *out], "unknown key")


def test_a_length_the_memory_cannot_hold_is_refused_before_anything_runs(tiny, tmp_path):
    _refused(["--model", str(tiny), "--lengths", "64,2000000", "--chunk", "1000000", "--out", str(tmp_path / "o"),
              "--device", "cpu"], "GiB are free")  # fmt: skip
    assert not (tmp_path / "o" / "cells").exists() or not any((tmp_path / "o" / "cells").iterdir())


def test_a_checkpoint_that_names_its_own_code_runs_it_only_when_asked(tiny, tmp_path):
    import shutil

    copy = tmp_path / "remote"
    shutil.copytree(tiny, copy)
    config = json.loads((copy / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (copy / "config.json").write_text(json.dumps(config))
    _refused(["--model", str(copy), "--out", str(tmp_path / "o")], "--trust-remote-code")


def test_the_yarn_protocol_says_what_it_needs(tmp_path):
    _refused(["--protocol", "yarn-llama2", "--out", str(tmp_path / "o")], "needs --model")


@pytest.mark.slow
def test_the_ray_executor_writes_the_records_a_local_run_writes(tiny, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from posenc import extend

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a private Ray on loopback
    prot = tiny_protocol(tiny, documents=1, lengths=(32, 96), scalings=("none", "yarn"), passkey_lengths=(256,),
                         passkey_depths=(0.5,))  # fmt: skip
    local = extend.run(prot, out=tmp_path / "local", show_progress=False, log=lambda m: None)
    remote = extend.run(prot, out=tmp_path / "ray", executor="ray", show_progress=False, log=lambda m: None)
    assert not ray.is_initialized()  # the Ray it started is shut down again
    assert remote.done == local.done == 4 and not remote.failed

    def results(out: Path) -> dict[str, dict]:
        return {p.stem: json.loads(p.read_text())["result"] for p in (out / "cells").glob("*.json")}

    here, there = results(tmp_path / "local"), results(tmp_path / "ray")
    assert set(here) == set(there)
    for run_id, result in here.items():
        if "nll" in result:
            assert max(abs(a - b) for a, b in zip(result["nll"], there[run_id]["nll"])) <= 1e-4
        else:
            assert result["answers"] == there[run_id]["answers"]
