"""Property test of answer checking: random numbers, written every way a model or dataset does.

A seeded generator (hypothesis is not in the venv) draws numbers of each kind (integers, large
integers with thousands separators, negatives, fractions, decimals, mixed numbers), writes each
in its equivalent forms (signs incl. Unicode minus and dashes, separators, `\\frac`, `\\dfrac`,
`\\tfrac`, `a/b`, wrappers `$`, `\\(\\)`, `\\boxed{}`, `\\text{}`, `\\mathrm{}`, `\\left( \\right)`,
percentages, unreduced and decimal forms) and places each form in the completion shape of an
extract mode. Then, for every form:

    math   an equivalent form scores 1.0, the form of a different number 0.0, and both agree
           with math-verify's own `verify(parse(gold), parse(answer))` on canonical LaTeX
    exact  a form that differs only in notation scores 1.0; one that differs in value
           notation (`0.5` for `1/2`, `6/4`, `50%`, `1.50`) or in value scores 0.0

No generated verdict may be None: every pair here is decidable. `sample record`: a form is
("−1,234", exact_equal=True) of the value -1234 with the reference "-1234".
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

import pytest

from domains.checking import AnswerChecker

SEED = 20260530
VALUES_PER_KIND = 30
KINDS = ("integer", "large", "fraction", "decimal", "mixed")
MINUSES = ("-", "\u2212", "\u2013", "\u2014", "\uff0d", "\ufe63")
PLUSES = ("", "", "+", "\uff0b", "\ufe62")
SEPARATORS = (",", " ", "\\,", "{,}", "\u2009", "\u00a0")
PERCENT_SIGNS = ("%", "\\%", " %")
REGEX = r"Final answer: ([^\n]+)"


@dataclass(frozen=True)
class Form:
    text: str
    exact_equal: bool  # equal to the reference under `exact` (notation only)
    percent: bool = False


@dataclass(frozen=True)
class Number:
    value: Fraction
    kind: str
    digits: int = 0  # decimal places of a decimal

    @property
    def reference(self) -> str:
        """The dataset's spelling: `-1234`, `-3/4`, `1.25`, `-1 1/2`."""
        sign = "-" if self.value < 0 else ""
        magnitude = abs(self.value)
        if self.kind == "decimal":
            return f"{sign}{float(magnitude):.{self.digits}f}"
        if self.kind == "mixed":
            whole = magnitude.numerator // magnitude.denominator
            rest = magnitude - whole
            return f"{sign}{whole} {rest.numerator}/{rest.denominator}"
        if magnitude.denominator == 1:
            return f"{sign}{magnitude.numerator}"
        return f"{sign}{magnitude.numerator}/{magnitude.denominator}"


def latex(value: Fraction) -> str:
    """The canonical LaTeX math-verify reads natively: `$-\\frac{3}{4}$`, `$12$`."""
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if magnitude.denominator == 1:
        return f"${sign}{magnitude.numerator}$"
    return f"${sign}\\frac{{{magnitude.numerator}}}{{{magnitude.denominator}}}$"


def draw(kind: str, rng: random.Random) -> Number:
    sign = rng.choice((1, -1))
    if kind == "integer":
        return Number(Fraction(sign * rng.randint(0, 999)), kind)
    if kind == "large":
        return Number(Fraction(sign * rng.randint(1000, 99_999_999)), kind)
    if kind == "fraction":
        denominator = rng.randint(2, 12)
        numerator = rng.choice([n for n in range(1, 4 * denominator)
                                if Fraction(n, denominator).denominator == denominator])
        return Number(Fraction(sign * numerator, denominator), kind)
    if kind == "decimal":
        digits = rng.randint(1, 3)
        scale = 10**digits
        numerator = rng.choice([n for n in range(1, 50 * scale) if n % 10])
        return Number(Fraction(sign * numerator, scale), kind, digits)
    whole, denominator = rng.randint(1, 20), rng.randint(2, 9)
    numerator = rng.choice([n for n in range(1, denominator)
                            if Fraction(n, denominator).denominator == denominator])
    return Number(sign * (whole + Fraction(numerator, denominator)), "mixed")


def _sign(number: Number, rng: random.Random) -> str:
    return rng.choice(MINUSES) if number.value < 0 else rng.choice(PLUSES)


def _terminating(value: Fraction) -> str | None:
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator != 1:
        return None
    text = f"{float(abs(value)):.6f}".rstrip("0").rstrip(".")
    return ("-" if value < 0 else "") + text


def forms(number: Number, rng: random.Random) -> list[Form]:
    """The equivalent spellings of `number`; `exact_equal` where only notation differs."""
    value, magnitude = number.value, abs(number.value)
    sign = _sign(number, rng)
    found: list[Form] = []
    if number.kind in ("integer", "large"):
        digits = str(magnitude.numerator)
        found.append(Form(f"{sign}{digits}", True))
        if magnitude >= 1000:
            for separator in rng.sample(SEPARATORS, 3):
                grouped = f"{magnitude.numerator:,}".replace(",", separator)
                found.append(Form(f"{_sign(number, rng)}{grouped}", True))
        found.append(Form(f"{sign}{digits}.0", False))
        found.append(Form(f"{sign}\\frac{{{2 * magnitude.numerator}}}{{2}}", False))
    elif number.kind == "fraction":
        p, q = magnitude.numerator, magnitude.denominator
        found += [Form(f"{sign}{p}/{q}", True),
                  Form(f"{_sign(number, rng)}\\frac{{{p}}}{{{q}}}", True),
                  Form(f"{_sign(number, rng)}\\{rng.choice(('d', 't'))}frac{{{p}}}{{{q}}}", True),
                  Form(f"\\frac{{{_sign(number, rng)}{p}}}{{{q}}}", True),
                  Form(f"{sign}{2 * p}/{2 * q}", False),
                  Form(f"{sign}\\frac{{{3 * p}}}{{{3 * q}}}", False)]
        if p < 10 and q < 10:
            found.append(Form(f"{_sign(number, rng)}\\frac{p}{q}", True))
    elif number.kind == "decimal":
        text = number.reference.lstrip("-")
        found += [Form(f"{sign}{text}", True), Form(f"{sign}{text}0", False),
                  Form(f"{sign}\\frac{{{magnitude.numerator}}}{{{magnitude.denominator}}}", False),
                  Form(f"{sign}{magnitude.numerator}/{magnitude.denominator}", False)]
        if text.startswith("0."):
            found.append(Form(f"{sign}{text[1:]}", False))
    else:
        whole = magnitude.numerator // magnitude.denominator
        rest = magnitude - whole
        b, c = rest.numerator, rest.denominator
        found += [Form(f"{sign}{whole} {b}/{c}", True),
                  Form(f"{_sign(number, rng)}{whole}\\frac{{{b}}}{{{c}}}", True),
                  Form(f"{_sign(number, rng)}{whole} \\dfrac{{{b}}}{{{c}}}", True),
                  Form(f"{sign}{magnitude.numerator}/{magnitude.denominator}", False),
                  Form(f"{sign}\\frac{{{magnitude.numerator}}}{{{magnitude.denominator}}}", False)]
    decimal = _terminating(value)
    if decimal is not None and number.kind in ("fraction", "mixed"):
        found.append(Form(decimal.replace("-", sign) if sign else decimal, False))
    # Non-negative only: math-verify itself finds `$-1091.6\\%$` unequal to `$-\\frac{2729}{250}$`.
    percent = _terminating(value * 100)
    if percent is not None and number.kind != "large" and value >= 0:
        found.append(Form(percent + rng.choice(PERCENT_SIGNS), False, percent=True))
    return [wrap(form, rng) for form in found]


def wrap(form: Form, rng: random.Random) -> Form:
    """The form inside a random LaTeX wrapper (or none)."""
    wrappers = ["{}", "{}", "${}$", "\\({}\\)", "\\boxed{{{}}}"]
    if "\\" not in form.text:
        wrappers += ["\\text{{{}}}", "\\mathrm{{{}}}"]
    if " " not in form.text and "\\" not in form.text and "%" not in form.text:
        wrappers.append("\\left( {} \\right)")
    return Form(rng.choice(wrappers).format(form.text), form.exact_equal, form.percent)


# (extract modes, completion of an answer); every extract mode that applies to a lone number.
CONTEXTS = (
    (("whole",), "  {}  "),
    (("boxed",), "Adding 12 and 7 and the rest gives \\boxed{{{}}}."),
    (("hashes",), "Natalia sold 48 clips in April.\n#### {}"),
    (("answer_is",), "We combine 12 and 7 pears. So the answer is {}."),
    (("regex",), "Work: 3 + 4 = 7.\nFinal answer: {}\nDone."),
    (("last_line",), "Step 1: add 3 and 4.\n{}\n"),
    (("last_number",), "We had 12 apples and 7 pears, so the total is {}."),
    (("boxed", "hashes", "answer_is", "last_number"), "Adding 3 and 4, we get {}"),
)


def completion_of(form: Form, rng: random.Random) -> tuple[tuple[str, ...], str]:
    methods, template = rng.choice(CONTEXTS)
    text = form.text
    if methods == ("boxed",) and text.startswith("\\boxed"):
        text = text[len("\\boxed{"):-1]
    return methods, template.format(text)


_VERIFIED: dict[tuple[str, str], bool] = {}


def math_verify_says(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    if (gold, answer) not in _VERIFIED:
        _VERIFIED[gold, answer] = bool(verify(parse(gold), parse(answer)))
    return _VERIFIED[gold, answer]


def different(number: Number, rng: random.Random) -> Number:
    """A number unequal to `number`: its negation, a neighbour, its denominator (the `\\frac`
    bug), its numerator, ten times it."""
    value = number.value
    candidates = [value + 1, value - Fraction(1, 2), value * 10, Fraction(value.denominator),
                  Fraction(value.numerator)]
    if value != 0:
        candidates.append(-value)
    candidates = [c for c in candidates if c != value and c * 100 != value and value * 100 != c]
    other = rng.choice(candidates)
    kind = ("integer" if other.denominator == 1 else
            "mixed" if abs(other) > 1 and number.kind == "mixed" else "fraction")
    return Number(other, kind)


def judge(methods, completion, reference, compare):
    pattern = REGEX if "regex" in methods else None
    return AnswerChecker(extract=methods, compare=compare, pattern=pattern).judge(completion,
                                                                                 reference)


@pytest.mark.parametrize("kind", KINDS)
def test_equivalent_and_unequal_forms_of_random_numbers(kind):
    rng = random.Random(f"{SEED}-{kind}")
    failures, cases = [], 0
    for _ in range(VALUES_PER_KIND):
        number = draw(kind, rng)
        gold = latex(number.value)
        references = (number.reference, wrap(Form(number.reference, True), rng).text)
        pairs = [(form, True) for form in forms(number, rng)]
        for _ in range(3):
            other = different(number, rng)
            pairs += [(form, False) for form in rng.sample(forms(other, rng), 2)]
            canonical_other = latex(other.value)
            assert not math_verify_says(gold, canonical_other), (number, other)
        for form, equivalent in pairs:
            methods, completion = completion_of(form, rng)
            reference = rng.choice(references)
            answer_value = form_value(form, number if equivalent else None)
            if answer_value is not None:  # the canonical forms agree with the generator
                assert math_verify_says(gold, answer_value) is equivalent, (gold, answer_value)
            expected = {"math": float(equivalent),
                        "exact": float(equivalent and form.exact_equal)}
            for compare, reward in expected.items():
                cases += 1
                verdict = judge(methods, completion, reference, compare)
                if verdict.reward != reward:
                    failures.append((compare, methods, completion, reference, verdict, reward))
    assert not failures, f"{len(failures)} of {cases} verdicts wrong, e.g. {failures[:10]}"
    assert cases > 200


def form_value(form: Form, number: Number | None) -> str | None:
    """The canonical LaTeX of an equivalent form's value (percentages as `$50\\%$`); None for a
    form of another number (checked against its own canonical form in the loop)."""
    if number is None:
        return None
    if form.percent:
        return "$" + (_terminating(number.value * 100) or "") + "\\%$"
    return latex(number.value)
