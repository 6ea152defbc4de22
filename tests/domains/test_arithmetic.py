import random

import pytest

from domains.arithmetic import ArithmeticDomain, UnsafeExpression, evaluate, level_of
from domains.base import Problem, Rejected
from tests.domains.labels import labelled

domain = ArithmeticDomain()


@pytest.mark.parametrize(
    ("text", "reference", "level"),
    [("3+4", "7", 1), ("3-9", "-6", 1), ("7*8", "56", 2), ("37+5", "42", 2), ("6-91", "-85", 2),
     ("91-46", "45", 3), ("23*4", "92", 4), ("4*23", "92", 4), ("512-87", "425", 4),
     ("34*27", "918", 5), ("123*4", "492", 5), ("12+7*3", "33", 5), ("45-6-18", "21", 5)],
)
def test_parse_executes_and_levels(text, reference, level):
    assert domain.parse(text) == Problem(text=text, reference=reference, level=level)


@pytest.mark.parametrize(
    "text", ["", "12/3", "1+", "012+1", "1234+1", "2**8", "__import__('os')", "1+2+3+4", "a+b",
             "1 + 2"]
)
def test_parse_rejects_malformed(text):
    assert isinstance(domain.parse(text), Rejected)


def test_evaluator_refuses_anything_but_integer_arithmetic():
    with pytest.raises(UnsafeExpression):
        evaluate("__import__('os').getcwd()")
    with pytest.raises(UnsafeExpression):
        evaluate("2/3")
    assert evaluate("2-3*4") == -10


def test_generator_levels_match_level_of():
    rng = random.Random(0)
    for level in domain.levels:
        for _ in range(200):
            problem = domain.generate(rng, level)
            assert level_of(problem.text) == level == problem.level
            assert problem.reference == str(evaluate(problem.text))


@pytest.mark.parametrize(
    ("completion", "answer"), [("42", "42"), ("-6", "-6"), ("007", "7"), ("12abc", "12"),
                               ("x12", None), ("", None)]
)
def test_extract(completion, answer):
    assert domain.extract(completion) == answer


def test_score_is_one_zero_or_none():
    scores = domain.score(["42", "41", "", "5"], labelled(["42", "42", "42", None]))
    assert scores == [1.0, 0.0, 0.0, None]


def test_heldout_is_fixed_and_spans_levels():
    first, second = domain.heldout(10), domain.heldout(10)
    assert first == second
    assert len({p.text for p in first}) == 50
    assert sorted({p.level for p in first}) == [1, 2, 3, 4, 5]
