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


# Issue 30: a bare `\frac{1}{3}` was read by `last_number` as its denominator 3 (so it scored 0
# against itself), and a Unicode minus was dropped (`−5` scored 1 against 5). Each row is
# (completion, reference, math reward, exact reward) under the default extractors.
MINUS, EN_DASH, EM_DASH = "\u2212", "\u2013", "\u2014"


@pytest.mark.parametrize(
    ("completion", "reference", "math", "exact"),
    [
        ("\\frac{1}{3}", "\\frac{1}{3}", 1.0, 1.0),  # the reported bug: read as 3
        ("so it is \\frac{3}{4}", "3/4", 1.0, 1.0),
        ("so it is \\frac{3}{4}", "4", 0.0, 0.0),
        (f"{MINUS}5", "5", 0.0, 0.0),  # the reported bug: read as 5
        (f"{MINUS}5", "-5", 1.0, 1.0),
        (f"so x = {EN_DASH}5", "-5", 1.0, 1.0),
        (f"so x = {EM_DASH}5", "-5", 1.0, 1.0),
        ("so x = \uff0d5", "-5", 1.0, 1.0),
        ("so x = \ufe635", "-5", 1.0, 1.0),
        ("so x = \uff0b5", "5", 1.0, 1.0),
        ("so x = +5", "5", 1.0, 1.0),
        ("from 3\u20135 pages, 4", "4", 1.0, 1.0),  # a dash between numbers is no sign
        ("\\dfrac{1}{2}", "1/2", 1.0, 1.0),
        ("\\tfrac{1}{2}", "\\frac{1}{2}", 1.0, 1.0),
        ("\\frac12", "1/2", 1.0, 1.0),
        (f"{MINUS}\\frac{{3}}{{4}}", "-3/4", 1.0, 1.0),
        ("\\frac{-3}{4}", "-\\frac{3}{4}", 1.0, 1.0),
        ("1/2", "0.5", 1.0, 0.0),  # value, not notation: exact keeps them apart
        ("so 1 1/2 cups", "3/2", 1.0, 0.0),  # a mixed number
        ("so 1 1/2 cups", "1.5", 1.0, 0.0),
        ("so 1 1/2 cups", "1 1/2", 1.0, 1.0),
        ("2\\frac{1}{4}", "2 1/4", 1.0, 1.0),
        (f"{MINUS}1\\frac{{1}}{{2}}", "-1.5", 1.0, 0.0),
        ("#### 1,234", "1234", 1.0, 1.0),
        ("there are 1 234 of them", "1234", 1.0, 1.0),
        ("there are 1\u2009234\u2009567", "1234567", 1.0, 1.0),
        ("there are 1\\,234", "1234", 1.0, 1.0),
        ("there are 1{,}234", "1234", 1.0, 1.0),
        ("#### 1,234.5", "1234.5", 1.0, 1.0),
        ("#### 1,2", "12", 0.0, 0.0),  # no thousands group: never 12
        ("#### 12,34", "1234", 0.0, 0.0),
        ("#### 50%", "0.5", 1.0, 0.0),  # math-verify: a percentage equals p/100 ...
        ("#### 50%", "50", 1.0, 0.0),  # ... and p itself
        ("#### 50\\%", "50%", 1.0, 1.0),
        ("#### 50 %", "50%", 1.0, 1.0),
        ("#### 50%", "0.4", 0.0, 0.0),
        ("the answer is $-5$.", "-5", 1.0, 1.0),
        ("the answer is \\(-5\\).", "-5", 1.0, 1.0),
        ("the answer is \\boxed{\\text{5}}", "5", 1.0, 1.0),
        ("the answer is \\mathrm{5}", "5", 1.0, 1.0),
        ("the answer is \\left( -5 \\right)", "-5", 1.0, 1.0),
        ("the answer is $(1, 2)$", "\\left( 1, 2 \\right)", 1.0, 1.0),
        ("the answer is $(1, 2)$", "2", 0.0, 0.0),  # not its last number
        ("the answer is 18 dollars.", "18", 1.0, 0.0),
    ],
)
def test_answer_forms(completion, reference, math, exact):
    for compare, reward in (("math", math), ("exact", exact)):
        checker = AnswerChecker(extract=DEFAULT, compare=compare)
        assert checker.judge(completion, reference) == Judgement(reward), compare


@pytest.mark.parametrize(
    ("completion", "answer"),
    [("\\frac{1}{3}", "\\frac{1}{3}"), ("it is \\dfrac{3}{4}.", "\\dfrac{3}{4}"),
     (f"{MINUS}5", f"{MINUS}5"), (f"x = {EN_DASH}5", f"{EN_DASH}5"), ("so 1 1/2.", "1 1/2"),
     ("so 2\\frac{1}{4}", "2\\frac{1}{4}"),
     ("got 1 234 apples", "1 234"), ("so 1,234, then", "1,234"), ("10-3", "3"),
     ("rate 50%.", "50%"), ("1,2", "2")],
)
def test_last_number_reads_the_whole_number(completion, answer):
    assert extract_answer(completion, ("last_number",)).answer == answer


def test_undecidable_comparison_is_none_never_zero(monkeypatch):
    import domains.equivalence

    def broken(text, timeout):
        raise RecursionError(text)

    math_equal.cache_clear()
    monkeypatch.setattr(domains.equivalence, "_parse", broken)
    checker = AnswerChecker(extract=("whole",), compare="math")
    assert checker.judge("\\sqrt{2}", "1.41") == Judgement(None, "verifier_error")
    math_equal.cache_clear()
