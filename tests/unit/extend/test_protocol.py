"""posenc.extend.protocol: the shipped protocols say what they decide and hold what they promise
(plays, prompts per cell, the RULER-style tasks, a time on two cores); their keys are checked by
name; each runs end to end, scaled down, on a tiny random Llama."""

from __future__ import annotations

import json
import re

import pytest
from tests.unit.extend.test_extend import _plan

from posenc.core.errors import PosencError
from posenc.extend import haystacks, plan
from posenc.extend import protocol as protocols

CONTEXT = 8192  # SmolLM2-135M-Instruct's trained context


def test_thorough_reads_ten_plays_twenty_prompts_a_cell_and_the_ruler_tasks_in_two_and_a_half_hours():
    """At least 10 plays, at least 20 passkey prompts per scaling at every length it asks, every
    RULER-style task of the registry, lengths to 1.5x the context (2x does not fit) and said so, and
    an estimate inside the 150 minutes it promises."""
    thorough = protocols.load("thorough")
    assert thorough.text == "shakespeare" and thorough.documents >= 10
    assert set(thorough.tasks) == set(haystacks.TASKS)  # the passkey and every RULER-style task
    passkey = thorough.tasks["passkey"]
    assert passkey.prompts >= 20 and min(passkey.lengths) < CONTEXT < max(passkey.lengths)
    assert max(thorough.lengths) == max(passkey.lengths) == 1.5 * CONTEXT
    assert "1.5x its context: 2x does not fit" in thorough.description and "2.5 h" in thorough.description
    ruler = sum(thorough.tasks[t].prompts for t in haystacks.TASKS if t != "passkey")
    assert ruler >= 20
    minutes = plan.estimate_seconds(_plan(thorough, CONTEXT).cells, workers=thorough.workers) / 60
    assert 120 < minutes <= 150, minutes


def test_each_protocol_says_what_it_decides_and_the_default_points_to_thorough():
    for name in protocols.shipped_names():
        assert "decides" in protocols.load(name).description or name == "yarn-llama2", name
    default = protocols.load("smollm2").description
    assert "--protocol thorough" in default and "~14 min" in default


def test_a_task_its_prompts_and_the_margins_are_checked_by_name():
    for setting, words in [("tasks.passkee.lengths=[4096]", "tasks.passkee is not a task; did you mean 'passkey'?"),
                           ("tasks.passkey.lengths=[1]", "tasks.passkey.lengths must be integers in [2,"),
                           ("tasks.passkey.prompts=1001", "tasks.passkey.prompts must be in [1, 1000]"),
                           ("margin.rate=1.5", "margin.rate must be in [0, 1]"),
                           ("margin.perplexity=0.9", "margin.perplexity must be a ratio in [1, 100]"),
                           ("attention=fast", "attention must be one of")]:  # fmt: skip
        with pytest.raises(PosencError, match=re.escape(words)):
            protocols.load("thorough", [setting])


def test_the_command_line_sets_the_passkey_lengths_and_every_tasks_prompts():
    thorough = protocols.load("thorough")
    fewer = protocols.replace(thorough, prompts=3, passkey_lengths=(2048,))
    assert fewer.tasks["passkey"] == protocols.RetrievalCells(lengths=(2048,), prompts=3)
    assert all(task.prompts == 3 for task in fewer.tasks.values()) and fewer.tasks["multikey"].lengths == (
        4096,
    )
    assert "passkey" not in protocols.replace(thorough, passkey_lengths=()).tasks  # no passkey test
    added = protocols.replace(protocols.load("smollm2"), passkey_lengths=(4096,))
    assert added.tasks == {"passkey": protocols.RetrievalCells(lengths=(4096,), prompts=20)}
    assert added.cells() == [("passkey", 4096, 20)] and added.longest == 16384


def test_a_shipped_protocol_is_shipped_until_a_key_changes_and_every_one_reads_back_as_written(tmp_path):
    for name in protocols.shipped_names():
        shipped = protocols.load(name)
        assert protocols.is_shipped(shipped), name
        path = tmp_path / f"{name}.toml"
        path.write_text(protocols.dump(shipped))
        again = protocols.load(str(path))
        assert again == protocols.replace(shipped, name=name) and not protocols.is_shipped(
            protocols.replace(again, documents=again.documents + 1)
        )


def _tiny_args(model, out, protocol: str, *more: str) -> list[str]:
    return ["extend", "--protocol", protocol, "--model", str(model), "--device", "cpu", "--workers", "1",
            "--threads", "1", "--chunk", "64", "--documents", "3", "--out", str(out), "--format", "json", *more]  # fmt: skip


@pytest.mark.slow
def test_the_default_and_thorough_run_end_to_end_scaled_down(tiny_llama_dir, tmp_path):
    """``posenc extend`` and ``posenc extend --protocol thorough`` with their lengths and prompts
    scaled to a tiny Llama (trained context 64): the plays, every task of the protocol, the tests
    between scalings and the effective lengths come out, and what the summary says it decides is the
    protocol's own only when no key was changed (here: never)."""
    from click.testing import CliRunner

    from posenc.cli import main

    default = CliRunner().invoke(
        main, _tiny_args(tiny_llama_dir, tmp_path / "d", "smollm2", "--lengths", "32,64,128")
    )
    assert default.exit_code == 0, default.output
    summary = json.loads(default.output[default.output.index("{") :])["summary"]
    assert summary["model"]["text"]["source"] == "shakespeare" and len(summary["model"]["text"]["parts"]) == 3
    assert summary["tasks"] == [] and {t["measure"] for t in summary["tests"]} == {"perplexity"}
    assert "perplexity" in summary["effective"]["yarn x2"] and summary["decides"] == ""
    thorough = CliRunner().invoke(main, _tiny_args(
        tiny_llama_dir, tmp_path / "t", "thorough", "--lengths", "32,96", "--passkey-lengths", "256,320", "--prompts", "2",
        *(f"--set=tasks.{t}.lengths=[640]" for t in haystacks.TASKS if t != "passkey")))  # fmt: skip
    assert thorough.exit_code == 0, thorough.output
    summary = json.loads(thorough.output[thorough.output.index("{") :])["summary"]
    assert {c["task"] for c in summary["tasks"]} == set(haystacks.TASKS)
    for label in ("none", "ntk x2", "yarn x2", "yarn-dynamic"):
        cells = summary["retrieval"][label]
        assert {(t, n) for t in cells for n in cells[t]} == {
            (c["task"], str(c["length"])) for c in summary["tasks"]
        }
        assert all(cell["prompts"] == 2 for row in cells.values() for cell in row.values())
        assert set(summary["effective"][label]) == {"perplexity", *haystacks.TASKS}
    assert {t["measure"] for t in summary["tests"]} == {"perplexity", *haystacks.TASKS}
    assert (tmp_path / "t" / "figures" / "passkey.png").stat().st_size > 1000
