"""posenc.extend.cell_store.result_problem on retrieval cells: a record whose checksum checks but whose
answers are not the scored answers of the cell's prompts is named, so it is set aside and run again."""

from __future__ import annotations

import pytest

from posenc.extend import plan
from posenc.extend.cell_store import result_problem


def _cell() -> plan.ExtendCell:
    questions = tuple(
        plan.RetrievalPrompt(i, (1, 2, 3 + i), 1 if i else 0, 8, ("12345",), (0.5,)) for i in (4, 9)
    )
    return plan.ExtendCell("r", "prompts", "null", 4096, (), questions, "m", False, "fp32", 64, "cpu", 1, "c", 1,
                           task="passkey")  # fmt: skip


def _answer(index: int, score: float = 1.0, correct: bool = True) -> dict:
    return {"index": index, "generated": " 12345.", "score": score, "correct": correct}


@pytest.mark.parametrize(
    ("answers", "words"),
    [
        ([_answer(4)], "not a list of 2 answers"),
        ([_answer(4), {"index": 9, "score": 1.0}], "without correct: true/false"),
        ([_answer(4), _answer(9, score=1.5)], "without a score in [0, 1]"),
        ([_answer(4), _answer(9, score=float("nan"))], "without a score in [0, 1]"),
        ([_answer(4), _answer(9, score=0.5, correct=True)], "whose correct is not its score of 1"),
        ([_answer(9), _answer(4)], "does not answer the cell's prompts"),
    ],
)
def test_answers_that_are_not_the_cells_scored_answers_are_named(answers, words):
    assert words in (result_problem({"answers": answers}, _cell()) or "")


def test_the_scored_answers_of_the_cells_prompts_are_a_result():
    assert result_problem({"answers": [_answer(4), _answer(9, score=0.25, correct=False)]}, _cell()) is None
