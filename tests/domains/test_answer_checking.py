"""Answer checking of the free-form domains: extraction, math-verify equivalence, reasons."""

from __future__ import annotations

import pytest

from domains.answers import extract_answer, last_boxed
from domains.checking import AnswerChecker, Judgement
from domains.equivalence import exact_equal, math_equal

DEFAULT = ("boxed", "hashes", "answer_is", "last_number")


@pytest.mark.parametrize(
    ("completion", "methods", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}} is it", DEFAULT, "\\frac{1}{2}"),
        ("first \\boxed{1} then \\boxed{{2}+1}", DEFAULT, "{2}+1"),  # the last, braces balanced
        ("Natalia sold 48 clips.\n#### 1,234", DEFAULT, "1,234"),
        ("so the answer is 42.", DEFAULT, "42"),
        ("The final answer is: $x^2$", DEFAULT, "x^2"),
        ("the answer is \\boxed{7}.", ("answer_is",), "7"),
        ("I got 3 apples and then 17.5 more", DEFAULT, "17.5"),
        ("ratio -3/4 overall", ("last_number",), "-3/4"),
        ("step one\nstep two\n  nus  \n", ("last_line",), "nus"),
        ("  ssehc ", ("whole",), "ssehc"),
        ("Result => 99 <=", ("regex",), "99"),
    ],
)
def test_extraction(completion, methods, expected):
    pattern = r"=> (\d+) <=" if "regex" in methods else None
    assert extract_answer(completion, methods, pattern).answer == expected


@pytest.mark.parametrize("completion", ["", "   ", "no digits at all", "\\boxed{unclosed"])
def test_no_answer_is_none_with_its_reason(completion):
    extraction = extract_answer(completion, DEFAULT)
    assert (extraction.answer, extraction.reason) == (None, "no_answer")


def test_unclosed_box_is_not_an_answer():
    assert last_boxed("\\boxed{1 + {2}") is None


@pytest.mark.parametrize(
    ("completion", "reference", "reward"),
    [
        ("\\boxed{1/2}", "0.5", 1.0),
        ("#### 1,234", "1234", 1.0),
        ("so the answer is 42.", "42", 1.0),
        ("\\boxed{x^2}", "x**2", 1.0),
        ("\\boxed{\\frac{1}{2}}", "1/2", 1.0),
        ("\\boxed{2x+1}", "2*x+1", 1.0),
        ("\\boxed{x^2}", "x**3", 0.0),  # two unequal forms
        ("\\boxed{0.5}", "1/3", 0.0),
        ("the answer is Paris.", "paris", 1.0),  # not math: compared as normalised text
        ("the answer is Rome.", "Paris", 0.0),
    ],
)
def test_math_equivalence(completion, reference, reward):
    checker = AnswerChecker(extract=DEFAULT, compare="math")
    assert checker.judge(completion, reference) == Judgement(reward)


def test_unparseable_answer_scores_none_with_its_reason():
    checker = AnswerChecker(extract=DEFAULT, compare="math")
    assert checker.judge("I cannot solve this one", "0.5") == Judgement(None, "no_answer")
    assert checker.judge("\\boxed{3}", None) == Judgement(None, "none")


@pytest.mark.parametrize(("answer", "reference", "equal"),
                         [("1,234", "1234", True), (" Paris. ", "paris", True),
                          ("12,34", "1234", False), ("a  b", "a b", True)])
def test_exact_normalisation(answer, reference, equal):
    assert exact_equal(answer, reference) is equal
    checker = AnswerChecker(extract=("whole",), compare="exact")
    assert checker.judge(answer, reference).reward == float(equal)


def test_math_verify_repeats_are_cached():
    math_equal.cache_clear()
    assert math_equal("\\frac{3}{4}", "0.75", 5) == (True, None)
    assert math_equal("\\frac{3}{4}", "0.75", 5) == (True, None)
    info = math_equal.cache_info()
    assert (info.hits, info.misses) == (1, 1)


def test_task_scorer_partial_credit_passes_through_unchanged():
    checker = AnswerChecker(extract=("whole",), compare="task")
    assert checker.judge("ssehd", "ssehc", lambda answer, ref: 0.8).reward == 0.8
    with pytest.raises(ValueError, match="needs a domain with its own scorer"):
        checker.judge("ssehd", "ssehc")


def test_unknown_compare_is_refused():
    with pytest.raises(ValueError, match="verify.compare = 'fuzzy'"):
        AnswerChecker(extract=DEFAULT, compare="fuzzy")
