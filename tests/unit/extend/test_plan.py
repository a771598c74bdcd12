"""posenc.extend.plan: the retrieval prompts as cells. One cell per (tables, task, length), the same
prompts in every scaling's cell, fed in the order that shares the most, and costed as fed."""

from __future__ import annotations

from tests.unit.extend.test_extend import SMOLLM2, _plan, _words

from posenc.extend import budget, haystacks, plan
from posenc.extend import protocol as protocols

CONTEXT = 8192


def _prompt_cells(grid: plan.Plan) -> list[plan.ExtendCell]:
    return [c for c in grid.cells if c.kind == "prompts"]


def test_a_prompts_cell_per_tables_task_and_length_each_with_the_same_prompts():
    """Plain RoPE, YaRN x2 and dynamic YaRN, the passkey at 4,096 (inside the context: dynamic YaRN
    is plain RoPE there) and 12,288 (past it: its own tables): 2 + 3 cells, each holding the same 20
    prompts (by index and tokens) in the order that shares the most."""
    prot = protocols.replace(
        protocols.load("smollm2"), passkey_lengths=(4096, 12288), prompts=20, lengths=(1024,)
    )
    grid = _plan(prot, CONTEXT)
    cells = _prompt_cells(grid)
    assert sorted(c.index for c in cells) == [4096, 4096, 12288, 12288, 12288]
    assert grid.prompt_cells[(cells[0].scaling, "passkey", 4096)] in {c.run_id for c in cells}
    assert "none = yarn-dynamic: passkey @4096, 20 prompts" in {c.label for c in cells}
    for length in (4096, 12288):
        same = [c for c in cells if c.index == length]
        assert len({c.run_id for c in same}) == len(same)  # other tables, another record
        assert len({tuple((q.index, q.ids) for q in c.questions) for c in same}) == 1  # the same prompts
        want = haystacks.prefill_order(
            haystacks.prompts("passkey", length, 20, seed=0, tokenize=_words, prefix=[1])
        )
        assert [(q.index, q.shared) for q in same[0].questions] == [(p.index, s) for p, s in want]
        assert all(len(q.ids) + q.budget <= length for q in same[0].questions)


def test_a_prompts_cell_costs_what_its_prompts_cost_fed_as_they_share():
    prot = protocols.replace(protocols.load("smollm2"), passkey_lengths=(8192,), prompts=20, lengths=(1024,),
                             scalings=("none",))  # fmt: skip
    (cell,) = _prompt_cells(_plan(prot, CONTEXT))
    shape, costs = plan.Shape(**SMOLLM2), budget.CPU_COSTS
    assert cell.seconds == sum(costs.prompt(shape, len(q.ids), q.budget, q.shared) for q in cell.questions)
    alone = sum(costs.prompt(shape, len(q.ids), q.budget) for q in cell.questions)
    assert cell.seconds < 0.85 * alone  # the passkey's prompts share their filler up to the first key
    assert cell.attention > 0 and cell.units > cell.attention
