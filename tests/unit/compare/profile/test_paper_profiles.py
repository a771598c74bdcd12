"""The papers' protocols as shipped profiles: as published (GPU) and scaled to a CPU, the latter run
end to end here at smoke size."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from posenc import compare
from posenc.cli import main
from posenc.compare.grid import build_grid
from posenc.compare.profile import PROFILES
from posenc.records.store import ResultStore
from posenc.results import claims, tables

SMOKE = PROFILES["smoke"]
PAPERS = {"paper-nope": "Kazemnejad et al. 2023", "paper-alibi": "Press et al. 2022"}


def test_each_paper_protocol_is_shipped_as_published_and_scaled_and_listed_with_its_source():
    result = CliRunner().invoke(main, ["compare", "--list-profiles", "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    for name, source in PAPERS.items():
        for variant in (name, f"{name}-cpu"):
            assert source in listed[variant]["description"], variant
            assert listed[variant]["why"]
    nope, nope_cpu = PROFILES["paper-nope"], PROFILES["paper-nope-cpu"]
    # the paper's model, lengths, steps, seeds and grid (Kazemnejad et al. 2023 and its released configs)
    assert (nope.model.d_model, nope.model.num_layers, nope.model.num_heads, nope.model.ffn_dim) == (
        768,
        12,
        12,
        3072,
    )
    assert (nope.task_train.min_len, nope.task_train.max_len, max(nope.eval.lengths)) == (1, 20, 40)
    assert (nope.task_train.steps, nope.task_train.batch_size) == (40000, 64)
    assert nope.seeds == (256788, 234054, 146317) and nope.lr_grid == (1e-5, 3e-5, 5e-5)
    assert set(nope.encodings) == {"nope", "t5", "alibi", "rope", "sinusoidal"}
    # the CPU variant keeps the protocol and changes the scale only
    assert (nope_cpu.encodings, nope_cpu.seeds) == (nope.encodings, nope.seeds)
    assert set(nope_cpu.tasks) < set(nope.tasks)
    assert (nope_cpu.task_train.min_len, nope_cpu.task_train.max_len) == (1, 20)
    assert nope_cpu.model == PROFILES["quick"].model and max(nope_cpu.eval.lengths) == 40
    alibi, alibi_cpu = PROFILES["paper-alibi"], PROFILES["paper-alibi-cpu"]
    assert (alibi.model.d_model, alibi.model.num_layers, alibi.model.num_heads) == (1024, 16, 8)
    assert (alibi.lm_train.max_len, alibi.lm_train.steps, alibi.eval.lm_protocol) == (
        512,
        286000,
        "nonoverlapping",
    )
    assert alibi_cpu.tasks == alibi.tasks == ("lm",) and alibi_cpu.encodings == alibi.encodings
    assert (alibi_cpu.model, alibi_cpu.lm_train) == (PROFILES["quick"].model, PROFILES["quick"].lm_train)
    assert max(alibi_cpu.eval.lm_lengths) >= 16 * alibi_cpu.lm_train.max_len


def _smoke_sized(name: str):
    """A paper's CPU profile with smoke's model, step counts and sample sizes (lengths kept)."""
    prof = PROFILES[name]
    train = dataclasses.replace(
        SMOKE.task_train, min_len=prof.task_train.min_len, max_len=prof.task_train.max_len, steps=4
    )
    # L_train 32: t5@scaled sets max_distance to it, which T5's 32 buckets need above 16
    lm = dataclasses.replace(SMOKE.lm_train, max_len=32)
    ev = dataclasses.replace(  # 2 test files x 512 bytes: last-k at 8 x L_train (256) fits a file's span
        prof.eval,
        samples=4,
        lm_lengths=(8, 16, 32, 64),
        lm_bytes=1024,
        lm_files=2,
        lastk_windows=2,
        lastk_k=8,
    )
    return dataclasses.replace(
        prof, model=SMOKE.model, task_train=train, lm_train=lm, eval=ev, lr_grid=(1e-3,), workers=1
    )


@pytest.mark.parametrize("name", ["paper-nope-cpu", "paper-alibi-cpu"])
def test_a_papers_cpu_protocol_runs_end_to_end_at_smoke_size(name, tmp_path):
    prof = _smoke_sized(name)
    seeds = prof.seeds[:1]
    result = compare.compare(prof, seeds=seeds, out=tmp_path, show_progress=False, log=lambda _: None)
    assert not result.outcome.failed, result.outcome.failed
    records = ResultStore(tmp_path).records()
    assert {(r["spec"]["encoding"], r["spec"]["task"]) for r in records} == {
        (e, t) for e in prof.encodings for t in prof.tasks
    }
    assert len(records) == len(build_grid(prof, seeds=seeds).specs)
    summary = tables.summarize(records)
    labels = {spec.label for spec in build_grid(prof, seeds=seeds).specs}  # t5@scaled beside t5 where run
    assert set(summary["rows"]) == labels and summary["columns"]
    assert ("t5@scaled" in labels) == (name == "paper-alibi-cpu")
    rows = claims.claims(records)
    source = PAPERS[name.removesuffix("-cpu")].split(" et al.")[0]
    assert any(source in r["source"] for r in rows)  # the paper's claims are judged from these runs
