"""``posenc extend``: the grid's scalings, the protocols, a run and its resume on a tiny random
Llama (a config saved to a temporary directory, a byte-level tokenizer trained here in a second),
and the one-line refusals of bad input (exit 2)."""

from __future__ import annotations

import json
import math
import re
import zlib
from pathlib import Path

import pytest
import torch

from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.extend import plan
from posenc.extend import protocol as protocols
from posenc.extend import scalings as sc
from posenc.extend.budget import CPU_COSTS
from posenc.extend.summary import BINS
from posenc.extend.summary_text import caption, markdown

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CONTEXT = 64  # the tiny model's trained context


def _tokenizer(root: Path) -> None:
    from posenc.extend.documents import python_docs_text

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


@pytest.fixture(scope="module")
def tiny_phi3(tmp_path_factory) -> Path:
    """A random-weight Phi-3 whose config carries LongRoPE as Phi-3's 128k checkpoints do: short and
    long factors, no factor of its own, and original_max_position_embeddings (CONTEXT) a quarter of
    max_position_embeddings (the window LongRoPE extends it to)."""
    root = tmp_path_factory.mktemp("tiny-phi3")
    _tokenizer(root)
    vocab = len(transformers.AutoTokenizer.from_pretrained(root))
    torch.manual_seed(0)
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.3, 1.5],
            "long_factor": [1.0, 2.0, 3.0, 4.0], "original_max_position_embeddings": CONTEXT}  # fmt: skip
    config = transformers.Phi3Config(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=vocab, max_position_embeddings=4 * CONTEXT, original_max_position_embeddings=CONTEXT,
        initializer_range=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2, rope_parameters=rope,
    )  # fmt: skip
    transformers.Phi3ForCausalLM(config).save_pretrained(root)
    return root


def tiny_protocol(model: Path, **changes) -> protocols.Protocol:
    base = protocols.Protocol(
        name="tiny", model=str(model), documents=2, lengths=(32, 64, 128), chunk=40, workers=1,
        scalings=("none", "linear", "dynamic:1", "yarn", "dynamic-yarn"), factors=(2.0,), device="cpu",
        tasks={"passkey": protocols.RetrievalCells(lengths=(256, 320), prompts=2)},
    )  # fmt: skip
    return protocols.replace(base, **changes)


# --- the scalings -------------------------------------------------------------------------------


def test_scaling_entries_parse_with_the_grid_factors_and_refuse_bad_names():
    assert sc.parse("yarn", (2.0, 4.0)) == [sc.Entry("yarn", 2.0), sc.Entry("yarn", 4.0)]
    assert sc.parse("YaRN:8", (2.0,)) == [sc.Entry("yarn", 8.0)]
    assert sc.parse("dynamic_yarn", (2.0,)) == [sc.Entry("yarn-dynamic")]
    # dynamic YaRN has one spelling, compare's; the one this command first had is read as the same
    assert sc.parse("dynamic-yarn", (2.0,)) == sc.parse("yarn-dynamic", (2.0,)) == [sc.Entry("yarn-dynamic")]
    assert sc.parse("dynamic-yarn", (2.0,))[0].key == "yarn-dynamic"
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
    assert sc.Entry("yarn-dynamic").at(2 * CONTEXT, CONTEXT) == sc.Entry("yarn", 2.0).at(2 * CONTEXT, CONTEXT)
    assert sc.Entry("dynamic", 2.0).at(2 * CONTEXT, CONTEXT) == {"rope_type": "ntk", "factor": 3.0}
    for entry in (sc.Entry("dynamic", 2.0), sc.Entry("yarn-dynamic")):
        assert entry.at(CONTEXT, CONTEXT) is None
    longrope = {"short_factor": [1.0] * 4, "long_factor": [2.0, 3.0, 4.0, 5.0], "factor": 4.0}
    for length in (CONTEXT, CONTEXT + 1):
        sc.check_equivalent(sc.Entry("longrope"), length, CONTEXT, dim=8, base=base, longrope=longrope)


# --- the protocols -------------------------------------------------------------------------------


def test_shipped_protocols_load_and_the_default_reaches_twice_its_context():
    assert {"smollm2", "smollm2-long", "thorough", "yarn-llama2"} <= set(protocols.shipped_names())
    smol = protocols.load("smollm2")
    assert smol.model == "" and max(smol.lengths) >= 2 * 8192 and min(smol.lengths) <= 8192 // 4
    assert (
        smol.text == "shakespeare" and smol.documents >= 3 and not smol.tasks
    )  # perplexity: what 15 min decide
    yarn = protocols.load("yarn-llama2")
    assert yarn.needs and max(yarn.lengths) == 131072 and yarn.device == "cuda"
    assert yarn.precision == "bf16" and yarn.attention == "sdpa" and yarn.tasks["passkey"].prompts >= 20
    text = protocols.dump(yarn)
    assert protocols.load("yarn-llama2") == yarn and "[tasks.passkey]" in text and "[margin]" in text


def test_protocol_keys_are_typed_and_range_checked():
    with pytest.raises(PosencError, match="unknown key"):
        protocols.load("smollm2", ["documentz=2"])
    with pytest.raises(PosencError, match="documents must be in"):
        protocols.load("smollm2", ["documents=0"])
    with pytest.raises(PosencError, match=r"tasks.passkey.prompts must be in \[1, 1000\]"):
        protocols.load("thorough", ["tasks.passkey.prompts=0"])
    with pytest.raises(PosencError, match="not a shipped protocol"):
        protocols.load("smolm2")
    three = protocols.load("thorough", ["tasks.passkey.prompts=3"])  # a key of a task, its other keys kept
    assert three.tasks["passkey"].prompts == 3 and three.tasks["passkey"].lengths == (4096, 12288)


# --- the default grid, its estimate, and the intervals over documents --------------------------------

#: SmolLM2-135M-Instruct's shape as its config gives it (test_extend_real checks it on the real one)
SMOLLM2 = dict(layers=30, heads=9, kv_heads=3, head_dim=64, hidden=576, intermediate=1536, vocab=49152,
               parameters=134515008)  # fmt: skip


def _words(text: str) -> list[int]:
    """A stand-in tokenizer for plans: a token per word and per punctuation mark, as English prose
    has about (the same word, the same id, so prompts share their beginnings as real ones do)."""
    return [zlib.crc32(w.encode()) % 30000 + 2 for w in re.findall(r"\w+|[^\w\s]", text)]


def _plan(prot: protocols.Protocol, context: int, shape: plan.Shape | None = None) -> plan.Plan:
    from posenc.extend import retrieval_prompts

    entries = sc.parse_all(prot.scalings, prot.factors)
    documents = tuple(tuple(range(i, i + max(prot.lengths))) for i in range(prot.documents))
    return plan.build(
        entries=entries, lengths=prot.lengths, context=context, documents=documents,
        prompts=retrieval_prompts(prot, _words, [1]), longrope=None,
        shape=shape or plan.Shape(**SMOLLM2), model="m", fingerprint="f", trust_remote_code=False,
        precision="fp32", chunk=prot.chunk, device="cpu", threads=1,
    )  # fmt: skip


def test_the_default_has_intervals_over_documents_and_is_estimated_under_a_quarter_hour():
    """Three plays (a t interval with 2 degrees of freedom), plain RoPE and YaRN to twice the
    context; dynamic YaRN adds no pass of its own; on two workers the estimate from the cost model
    leaves a margin to 15 minutes, and what the protocol file says a fourth play or a length between
    the context and 2x costs is what the estimate says."""
    smol = protocols.load("smollm2")
    assert smol.documents >= 3 and smol.workers == 2
    assert {"none", "yarn", "yarn-dynamic"} <= set(smol.scalings) and max(smol.lengths) == 2 * 8192
    grid = _plan(smol, 8192)
    text = [c for c in grid.cells if c.kind == "text"]
    tables = {c.scaling for c in text}
    assert len(tables) == 2 and len(text) == 2 * smol.documents == len(grid.cells)  # dynamic YaRN shares
    assert all(len(c.tokens) == 16384 for c in text)
    seconds = plan.estimate_seconds(grid.cells, workers=smol.workers)
    assert 12 * 60 < seconds <= 14 * 60, seconds / 60
    assert "13.5 minutes" in (Path(protocols.__file__).parent / "protocols" / "smollm2.toml").read_text()
    for change in (dict(documents=4), dict(lengths=(*smol.lengths, 12288))):  # "several minutes more" each
        more = plan.estimate_seconds(_plan(protocols.replace(smol, **change), 8192).cells, workers=2)
        assert 2 * 60 < more - seconds < 6 * 60 and more > 15 * 60, change


def test_a_grid_written_with_the_old_spelling_has_the_same_cells():
    """A cell is named by its tables: a grid written ``dynamic-yarn`` (this command's first spelling of
    dynamic YaRN) plans the very cells, run ids included, that ``yarn-dynamic`` does, so the records
    of a run made with it are found again."""
    smol = protocols.load("smollm2")
    old = _plan(protocols.replace(smol, scalings=("none", "yarn", "dynamic-yarn")), 8192)
    new = _plan(protocols.replace(smol, scalings=("none", "yarn", "yarn-dynamic")), 8192)
    assert [c.run_id for c in old.cells] == [c.run_id for c in new.cells] and len(new.cells) >= 4
    assert old.text_tables == new.text_tables and ("yarn-dynamic", 16384) in new.text_tables


def test_the_long_protocol_takes_every_llama_scaling_and_the_passkey_inside_the_context():
    """smollm2-long: every scaling SmolLM2 takes (PI, NTK, dynamic NTK, Llama 3 besides the
    default's) on three plays to 2x, and twenty passkey prompts per scaling inside the context,
    with the time its description states."""
    long = protocols.load("smollm2-long")
    assert {"none", "linear", "ntk", "dynamic:1", "yarn", "yarn-dynamic", "llama3"} <= set(long.scalings)
    assert max(long.lengths) == 2 * 8192 and long.tasks["passkey"].lengths == (4096,)
    assert long.documents == 3 and long.tasks["passkey"].prompts == 20
    minutes = plan.estimate_seconds(_plan(long, 8192).cells, workers=long.workers) / 60
    assert 40 < minutes < 60 and "~1 h" in long.description, minutes


def test_a_pass_splits_into_dense_and_attention_flops_and_a_prompt_needs_no_logits_but_the_last():
    shape = plan.Shape(**SMOLLM2)
    dense, attention = shape.split(0, 16384)
    assert dense == 2 * 134515008 * 16384
    assert attention == 4 * 30 * 9 * 64 * 16384 * 16385 / 2  # every causal (query, key) pair
    assert attention / (dense + attention) > 0.6  # at 16k attention is most of a pass
    later = shape.split(8192, 16384)
    assert later[1] == attention - shape.split(0, 8192)[1]  # cached keys are not recomputed
    no_logits = shape.split(0, 1024, logits=False)
    assert (
        shape.split(0, 1024)[0] - no_logits[0] == 2 * 576 * 49152 * 1023
        and no_logits[1] == shape.split(0, 1024)[1]
    )


def _cells(seconds: list[float], threads: int = 1) -> list[plan.ExtendCell]:
    return [plan.ExtendCell(f"c{i}", "text", "null", 0, (), (), "m", False, "fp32", 64, "cpu", threads, f"c{i}", 1,
                            seconds=s) for i, s in enumerate(seconds)]  # fmt: skip


def test_the_estimate_schedules_the_longest_first_on_the_worker_that_frees_first():
    start = plan.STARTUP_SECONDS
    # longest first on 2 workers: 9 | 9, then 6 -> 15 | 9, 6 -> 15 | 15, 6 -> 21 | 15
    assert plan.estimate_seconds(_cells([6, 9, 6, 9, 6]), workers=2) == pytest.approx(21 + start)
    assert plan.estimate_seconds(_cells([6, 9, 6, 9, 6]), workers=1) == pytest.approx(36 + start)
    assert plan.estimate_seconds(_cells([12]), workers=8) == pytest.approx(12 + start)
    assert plan.estimate_seconds(_cells([12], threads=2), workers=1) == pytest.approx(6 + start)
    assert plan.estimate_seconds([], workers=2) == 0.0


def test_the_estimate_is_said_to_be_one_and_only_made_for_a_cpu():
    from posenc.extend import estimate

    seconds, line = estimate(_cells([30_000, 30_000]), device="cpu", workers=2, threads=1)
    assert seconds == pytest.approx(plan.estimate_seconds(_cells([30_000, 30_000]), workers=2))
    assert f"about {seconds / 60:.1f} minutes" in line and "an estimate, not a measurement" in line
    assert f"attention {CPU_COSTS.attention:.0f} GFLOP/s" in line and "a decoding step" in line
    seconds, line = estimate(_cells([30_000]), device="cuda:0", workers=1, threads=1)
    assert seconds is None and line.startswith("no time estimate on cuda:0")


def _summary(nll_by_doc: list[list[float]], scalings=("none", "yarn")) -> dict:
    """The summary of a grid of 2 scalings over these documents' losses (yarn: 0.1 nats more)."""
    from posenc.extend import summary as summaries

    context, lengths = 64, (32, 64, 128)
    prot = protocols.Protocol(name="t", documents=len(nll_by_doc), lengths=lengths, scalings=scalings)
    shape = plan.Shape(
        layers=1, heads=1, kv_heads=1, head_dim=4, hidden=4, intermediate=4, vocab=8, parameters=10
    )
    grid = _plan(prot, context, shape)
    results = {}
    for cell in grid.cells:
        shift = 0.0 if cell.scaling == "null" else 0.1
        results[cell.run_id] = {"nll": [x + shift for x in nll_by_doc[cell.index]]}
    entries = sc.parse_all(scalings, (2.0,))
    out = summaries.summarize(grid, results, entries=entries, lengths=lengths, documents=len(nll_by_doc),
                              context=context, longrope=None)  # fmt: skip
    out["caption"] = caption(out)
    return out


def test_perplexity_and_loss_by_position_carry_a_t_interval_over_documents():
    from scipy import stats

    rng = __import__("numpy").random.default_rng(0)
    docs = [list(1.5 + 0.3 * i + rng.normal(0, 0.5, 127)) for i in range(3)]
    out = _summary(docs)
    means = [sum(d[:63]) / 63 for d in docs]  # perplexity @64: tokens 1 .. 63 of each document
    m, se = sum(means) / 3, stats.sem(means)
    low, high = stats.t.interval(0.95, 2, loc=m, scale=se)
    cell = out["perplexity"]["none"]["64"]
    assert cell["documents"] == 3
    assert (cell["value"], cell["low"], cell["high"]) == pytest.approx(
        (math.exp(m), math.exp(low), math.exp(high))
    )
    # paired by document: yarn is 0.1 nats worse on every document, so its cost has no spread
    inside = out["inside"]["yarn x2"]
    assert inside["length"] == 64 and (inside["value"], inside["low"], inside["high"]) == pytest.approx(
        (math.exp(0.1),) * 3
    )
    curve = out["loss_by_position"]["none"]
    assert len(curve) == BINS and all(len(row) == 5 for row in curve)  # 128 positions: every bin has some
    first, last, mean, lo, hi = curve[0]
    per_doc = [sum(d[first - 1 : last - 1]) / (last - first) for d in docs]
    want = stats.t.interval(0.95, 2, loc=sum(per_doc) / 3, scale=stats.sem(per_doc))
    assert (mean, lo, hi) == pytest.approx((sum(per_doc) / 3, *want))
    assert "95% Student t interval over the 3 documents (2 degrees of freedom)" in out["caption"]
    assert "bootstrap" not in out["caption"] and "wide" in out["caption"]
    table = markdown(out)
    assert f"[{math.exp(low):.3g}, {math.exp(high):.3g}]" in table


def test_one_document_shows_no_interval_and_says_so():
    out = _summary([[2.0] * 127])
    assert "one document: no interval" in out["caption"]
    assert "[" not in markdown(out).split("\n", 2)[2]  # no bracket in any row
    assert math.isnan(out["perplexity"]["none"]["64"]["low"])


def test_the_interval_over_documents_covers_at_its_stated_level():
    """Simulated documents whose mean losses vary normally around the text's: the interval of
    exp(mean loss) covers the true perplexity in 95% of draws with 2 and with 3 documents (a
    normal-quantile interval would cover ~70% and ~81%)."""
    import numpy as np

    from posenc.extend.summary import _interval

    rng = np.random.default_rng(1)
    truth = 2.3
    for n in (2, 3):
        draws = 2000
        covered = 0
        for _ in range(draws):
            cell = _interval(list(truth + rng.normal(0, 0.2, n)))
            covered += cell["low"] <= math.exp(truth) <= cell["high"]
        assert 0.93 <= covered / draws <= 0.97, (n, covered / draws)


def test_the_figures_draw_the_interval_bands_and_name_the_method(tmp_path, monkeypatch):
    """Perplexity: an error bar per scaling (no band over the others); loss by position: a panel per
    scaling, each with its own band; both name the interval's method."""
    from matplotlib.container import ErrorbarContainer
    from matplotlib.figure import Figure

    from posenc.extend import summary_figures as figures

    saved: dict[str, Figure] = {}
    real = Figure.savefig

    def keep(self, name, *args, **kwargs):
        saved[Path(name).stem] = self
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    out = _summary([[1.0 + 0.01 * i + 0.2 * d for i in range(127)] for d in range(3)])
    figures.figures(out, tmp_path)
    ax = saved["perplexity"].axes[0]
    assert "95% Student t interval over the 3 documents" in ax.get_title()
    assert len([c for c in ax.containers if isinstance(c, ErrorbarContainer)]) == 2  # one per scaling
    panels = [a for a in saved["loss_by_position"].axes if a.get_visible()]
    assert [a.get_title() for a in panels] == ["none", "yarn x2"]
    assert "95% Student t interval over the 3 documents" in saved["loss_by_position"]._suptitle.get_text()
    for panel in panels:
        bands = [c for c in panel.collections
                 if c.__class__.__name__ in ("PolyCollection", "FillBetweenPolyCollection")]  # fmt: skip
        assert len(bands) == 1 and bands[0].get_alpha() <= 0.25, panel.get_title()  # its own, light


def test_the_page_says_how_long_the_run_took_next_to_its_estimate_and_whether_the_machine_was_idle():
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "scripts" / "update_extend_page.py"
    spec = importlib.util.spec_from_file_location("update_extend_page", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    summary = {"protocol": "smollm2", "model": {"label": "SmolLM2", "text": {"source": "python-docs", "documents": 2,
               "sha256": "ab" * 32}}}  # fmt: skip
    run = {"command": "posenc extend", "protocol": "smollm2", "device": "cpu", "finished": "today", "tflop": 61.3,
           "cells_done": 6, "cells_resumed": 0, "wall_seconds": 701.0, "estimated_seconds": 738, "workers": 2,
           "threads": 1, "cores": 2}  # fmt: skip
    idle = script.provenance(summary, run, idle=True)
    assert "wall-clock 11.7 min on an otherwise idle machine (2 worker(s) x 1 thread(s) of 2 cores)" in idle
    assert "estimated before the run: 12.3 min" in idle and "2 document(s)" in idle
    shared = script.provenance(summary, run, idle=False)
    assert "not a timing result" in shared and "idle" not in shared


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
    # document, dynamic:1 and dynamic-yarn add none; passkey (256 and 320 tokens, past the context): a
    # prompts cell per length for none, linear x2, YaRN x2, dynamic:1 (NTK x4, x5), dynamic-yarn (YaRN x4, x5)
    records = sorted((out / "cells").glob("*.json"))
    assert first.done == len(records) == 4 * 2 + 5 * 2
    summary = first.summary
    assert [e["label"] for e in summary["entries"]] == [
        "none",
        "linear x2",
        "dynamic x1",
        "yarn x2",
        "yarn-dynamic",  # written dynamic-yarn in the protocol: one entry, its canonical name
    ]
    ppl = summary["perplexity"]
    for label in ppl:
        assert set(ppl[label]) == {"32", "64", "128"} and ppl[label]["128"]["documents"] == 2
        assert ppl[label]["32"]["low"] <= ppl[label]["32"]["value"] <= ppl[label]["32"]["high"]
    # inside the context dynamic scalings are plain RoPE exactly; static ones are not
    assert ppl["dynamic x1"]["64"] == ppl["none"]["64"] and ppl["yarn-dynamic"]["64"] == ppl["none"]["64"]
    assert ppl["linear x2"]["64"]["value"] != ppl["none"]["64"]["value"]
    assert ppl["yarn-dynamic"]["128"] == ppl["yarn x2"]["128"]
    assert summary["inside"]["none"]["value"] == pytest.approx(1.0)
    assert set(summary["retrieval"]["none"]["passkey"]) == {"256", "320"}
    assert summary["retrieval"]["none"]["passkey"]["320"]["prompts"] == 2
    for name in ("perplexity", "loss_by_position", "passkey"):
        assert Path(first.files[name]).stat().st_size > 1000
    table = (out / "summary.md").read_text()
    assert "| yarn x2 |" in table and "ppl @128" in table and "passkey @320" in table
    assert "What these records decide" in table and summary["tests"] and "effective" in summary
    record = json.loads(records[0].read_text())
    assert record["schema"] == "posenc-extend/1" and record["checkpoint"]["context"] == CONTEXT

    def refuse(*args, **kwargs):
        raise AssertionError("a finished cell was computed again")

    monkeypatch.setattr(extend, "execute", refuse)
    second = extend.run(tiny_protocol(tiny), out=out, show_progress=False, log=lambda m: None)
    assert second.done == 0 and second.resumed == len(records)
    measured = json.loads((out / "run.json").read_text())  # still the run that computed the cells
    assert measured["cells_done"] == len(records) and measured["cells_resumed"] == 0
    assert second.summary["perplexity"] == summary["perplexity"]
    assert second.summary["retrieval"] == summary["retrieval"]

    edited = json.loads(records[0].read_text())
    edited["result"]["edited"] = True  # a hand edit: the checksum no longer matches
    records[0].write_text(json.dumps(edited))
    monkeypatch.undo()
    logged: list[str] = []
    third = extend.run(tiny_protocol(tiny), out=out, show_progress=True, log=logged.append)
    assert third.done == 1 and third.resumed == len(records) - 1
    # output captured (not a terminal): the live bar cannot draw, a line per finished cell says it
    assert [line for line in logged if line.startswith("cell 1/1 (0:") and line.endswith(" done")], logged
    assert json.loads((out / "run.json").read_text())["cells_done"] == 1  # a run that computed writes it
    assert any("corrupt" in line for line in logged)
    assert (records[0].parent / (records[0].name + ".corrupt")).exists()


@pytest.mark.slow
def test_the_command_runs_a_tiny_grid_and_prints_the_table(tiny, tmp_path):
    from click.testing import CliRunner

    from posenc.cli import main

    args = ["extend", "--model", str(tiny), "--lengths", "32,96", "--documents", "1", "--scalings", "none,yarn:2",
            "--passkey-lengths", "256", "--prompts", "2", "--chunk", "64", "--workers", "1",
            "--device", "cpu", "--no-figures", "--out", str(tmp_path / "o")]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert (
        "yarn x2" in result.output
        and "ppl @96" in result.output
        and "cells: 4 done, 0 resumed" in result.output
    )
    assert (
        "each length, [low, high]: one document: no interval" in result.output
    )  # printed as text, not markup
    again = CliRunner().invoke(main, args)
    assert "cells: 0 done, 4 resumed" in again.output


def test_a_prompt_pass_computes_the_last_logits_only_and_they_are_the_full_passes(tiny):
    """Retrieval prompts ask transformers for the last position's logits only (logits_to_keep, as its
    generate does on a prompt): the same logits as the full pass's last row (on SmolLM2 the output
    layer is a fifth of the dense layers' FLOPs at every other position)."""
    from posenc.extend import cell_work as work

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    shape = plan.Shape.of(model.config, sum(p.numel() for p in model.parameters()))
    counted: list[int] = []
    runner = work.Runner(model, shape, 40, lambda units, status=None: counted.append(units))
    assert runner.last_only
    ids = list(range(3, 103))
    rows: list[torch.Tensor] = []
    full = runner.forward(work.new_cache(model), ids, lambda start, logits: rows.append(logits))
    assert sum(r.shape[0] for r in rows) == len(ids)
    calls: list[int] = []
    original = model.forward

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out.logits.shape[1])
        return out

    model.forward = spy
    last = runner.forward(work.new_cache(model), ids)
    assert calls == [1, 1, 1]  # three chunks of 40, 40, 20 tokens: one row of logits each
    assert torch.allclose(last, full, atol=1e-5)


def test_the_plan_prints_an_estimate_said_to_be_one(tiny, tmp_path):
    from click.testing import CliRunner

    from posenc.cli import main

    args = ["extend", "--model", str(tiny), "--lengths", "32,128", "--documents", "2", "--scalings", "none,yarn:2",
            "--passkey-lengths", "256", "--device", "cpu", "--plan", "--out", str(tmp_path / "o")]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("estimate: about")]
    assert len(lines) == 1 and "an estimate, not a measurement" in lines[0] and "on 2 worker(s)" in lines[0]
    assert "6 cell(s)" in lines[0]  # 2 scalings x 2 documents + a passkey cell per scaling
    assert not list((tmp_path / "o" / "cells").glob("*.json"))  # nothing ran


def test_a_longrope_checkpoint_reads_from_its_original_context_and_longrope_is_the_stock_model(
    tiny_phi3, tmp_path
):
    """On a LongRoPE checkpoint (Phi-3 128k) the trained context is the config's
    original_max_position_embeddings, not max_position_embeddings (LongRoPE's extended window): the
    run says so, every scaling starts from it, and the longrope cell's per-document losses are the
    stock transformers model's on the same tokens (one forward pass each, no cache) within 1e-4
    nats, inside the original context (short factors) and past it (long factors)."""
    from posenc import extend
    from posenc.extend.cell_store import Store

    out = tmp_path / "out"
    prot = tiny_protocol(tiny_phi3, lengths=(48, 128), scalings=("none", "longrope", "yarn:2"), tasks={})
    logged: list[str] = []
    result = extend.run(prot, out=out, show_progress=False, log=logged.append, figures=False)
    assert not result.failed
    said = [line for line in logged if "trained context" in line]
    assert (
        said
        and (
            f"trained context {CONTEXT} tokens (the config's original_max_position_embeddings; its "
            f"max_position_embeddings {4 * CONTEXT} is the window its longrope scaling (Ding et al. 2024) extends it to)"
        )
        in said[0]
    ), said
    assert result.summary["context"] == CONTEXT and result.summary["model"]["context"] == CONTEXT
    assert (
        f"trained context {CONTEXT} tokens (the config's original_max_position_embeddings"
        in (out / "summary.md").read_text()
    )
    # YaRN scales from the same original context; `none` is plain RoPE (no factors of the config's)
    plan_ = extend._setup(prot, out, 1, False, lambda m: None).plan
    assert json.loads(plan_.text_tables[("yarn:2", 128)])[rope_scaling.ORIGINAL] == CONTEXT
    assert json.loads(plan_.text_tables[("none", 128)]) is None

    stock = transformers.AutoModelForCausalLM.from_pretrained(tiny_phi3, dtype=torch.float32).eval()
    store = Store(out)
    cells = {cell.run_id: cell for cell in plan_.cells}
    for length, factors in ((48, "short_factor"), (128, "long_factor")):
        key = plan_.text_tables[("longrope", length)]
        assert (
            json.loads(key)["short_factor"]
            == json.loads((tiny_phi3 / "config.json").read_text())["rope_parameters"][factors]
        )
        for index in range(prot.documents):
            run_id = plan_.text_cells[(key, index)]
            record, _ = store.load(run_id)
            assert record is not None
            ids = torch.tensor([cells[run_id].tokens[:length]])
            with torch.inference_mode():
                logits = stock(input_ids=ids, use_cache=False).logits[0].float()
            want = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="none").double()
            got = torch.tensor(record["result"]["nll"][: length - 1], dtype=torch.float64)
            assert torch.allclose(got, want, atol=1e-4, rtol=0), (length, index, (got - want).abs().max())


def test_the_protocol_is_checked_and_its_scalings_parsed_once(tiny, tmp_path, monkeypatch):
    """``posenc extend`` with a protocol, ``--set`` and options: the protocol is checked once (the
    options are applied before its one check) and its scalings parsed once (the checked protocol
    holds them), counted with a spy over a whole ``--plan``."""
    from click.testing import CliRunner

    from posenc.cli import main

    calls = {"check": 0, "parse_all": 0}
    for name in calls:
        real = getattr(protocols, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(protocols, name, counted)
    args = ["extend", "--model", str(tiny), "--set", "documents=1", "--scalings", "none,yarn,dynamic-yarn",
            "--lengths", "32,128", "--passkey-lengths", "", "--device", "cpu", "--plan", "--out", str(tmp_path / "o")]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert calls == {"check": 1, "parse_all": 1}, calls
    assert "yarn-dynamic" in result.output


def test_a_context_other_than_longropes_original_is_refused_for_longrope(tiny_phi3, tmp_path):
    out = ["--out", str(tmp_path / "o"), "--device", "cpu", "--passkey-lengths", "", "--plan"]
    _refused(["--model", str(tiny_phi3), "--scalings", "none,longrope", "--context", "100", *out],
             f"--context 100: this checkpoint's longrope keys were made for its "
             f"original_max_position_embeddings, {CONTEXT} tokens (LongRoPE's factors switch from short to long "
             "past it)")  # fmt: skip


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
    _refused(["--model", str(tiny), "--scalings", "longrope", *out], "no longrope scaling")
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
                         prompts=2)  # fmt: skip
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


@pytest.mark.slow
def test_bf16_runs_the_grid_in_bfloat16_and_keeps_its_own_records(tiny, tmp_path):
    """--precision bf16 (what a GPU run uses; on CPU too): the weights in bfloat16, records of their
    own (a cell's name hashes the precision), perplexity within bfloat16's rounding of float32's."""
    from posenc import extend

    small = dict(
        documents=1,
        lengths=(32, 64),
        scalings=("none", "yarn"),
        tasks={"passkey": protocols.RetrievalCells(lengths=(256,), prompts=2)},
    )
    out = tmp_path / "out"
    fp32 = extend.run(tiny_protocol(tiny, **small), out=out, show_progress=False, log=lambda m: None)
    bf16 = extend.run(
        tiny_protocol(tiny, precision="bf16", **small), out=out, show_progress=False, log=lambda m: None
    )
    assert not fp32.failed and not bf16.failed
    assert bf16.resumed == 0 and bf16.done == fp32.done  # nothing of the float32 run is reused
    records = [json.loads(p.read_text()) for p in (out / "cells").glob("*.json")]
    assert sorted(r["cell"]["precision"] for r in records) == ["bf16"] * bf16.done + ["fp32"] * fp32.done
    for label in ("none", "yarn x2"):
        a, b = (
            fp32.summary["perplexity"][label]["64"]["value"],
            bf16.summary["perplexity"][label]["64"]["value"],
        )
        assert a != b and b == pytest.approx(a, rel=0.05)


def test_how_to_run_is_checked_by_the_library_before_anything_loads(tmp_path, monkeypatch):
    """The command line parses; posenc.extend.run checks threads, executor and address itself, in
    one line each, before a checkpoint is read (the command shows the same lines)."""
    from posenc import extend

    def never(*args, **kwargs):
        raise AssertionError("the checkpoint was read before the options were checked")

    monkeypatch.setattr(extend, "_setup", never)
    prot = protocols.load("smollm2")
    for kwargs, words in (
        ({"threads": 0}, "threads (--threads) must be an integer in [1,"),
        ({"executor": "slurm"}, "executor must be 'local' or 'ray'"),
        ({"address": "head:6379"}, "address needs executor 'ray'"),
    ):
        with pytest.raises(PosencError, match=re.escape(words)):
            extend.run(prot, out=tmp_path / "o", show_progress=False, log=lambda m: None, **kwargs)
    monkeypatch.undo()
    _refused(["--threads", "0", "--out", str(tmp_path / "o")], "threads (--threads)")
    _refused(["--device", "cudaa", "--out", str(tmp_path / "o")], "device must be one of")


@pytest.mark.parametrize(("value", "words"), [(0, "must be an integer >= 1"), (-5, "must be an integer >= 1"),
                                              ("abc", "cannot read its config"), (64.7, "cannot read its config"),
                                              ([1], "cannot read its config")])  # fmt: skip
def test_a_hostile_original_context_in_a_config_is_one_line(tiny_phi3, tmp_path, value, words):
    """A config is data: original_max_position_embeddings of 0, negative, a string, a float or a list
    is refused in one line (it was a ZeroDivisionError, or transformers' validation traceback)."""
    import shutil

    model = tmp_path / "m"
    shutil.copytree(tiny_phi3, model)
    config = json.loads((model / "config.json").read_text())
    config["original_max_position_embeddings"] = value
    config["rope_parameters"]["original_max_position_embeddings"] = value
    (model / "config.json").write_text(json.dumps(config))
    _refused(["--model", str(model), "--plan", "--scalings", "none,longrope", "--lengths", "32,128",
              "--passkey-lengths", "256", "--out", str(tmp_path / "o")], words)  # fmt: skip
