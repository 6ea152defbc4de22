"""Is an extracted answer equal to its reference? Exact (normalised text) or math-verify.

    exact  normalised text equality (`exact_form`, domains/answer_forms.py): signs as ASCII
           (`−5` = `-5`, never `5`), wrappers dropped (`$`, `\\boxed{}`, `\\text{}`, ...),
           thousands separators removed (`1,234` = `1 234` = `1234`; `1,2` stays `1,2`),
           `\\frac{3}{4}` = `\\dfrac{3}{4}` = `3/4`, whitespace collapsed, case folded, a
           trailing `.` dropped ("Paris." = "paris"); notation only: `1/2` != `0.5`
    math   HF's math-verify (LaTeX and plain forms compared with sympy) on `math_form` of both
           sides (the same notation, and a mixed number `1 1/2` written as `3/2`): `1/2` = `0.5`
           = `\\frac{1}{2}`, `x^2` = `x**2`; texts equal under `exact` are equal without a call.
           A percentage follows math-verify: `50%` equals both `0.5` and `50`

`math_equal` is cached by (answer, reference, timeout), so repeated pairs (k samples of one
problem often agree) cost one comparison. math-verify can loop on some inputs (R-Zero's FAQ):
in the main thread each call runs under math-verify's own SIGALRM limit (`timeout` seconds); a
call from another thread (where signals cannot be used) runs without one. A timed-out or failed
comparison returns None (reason `verifier_timeout` / `verifier_error`), never False.
"""

from __future__ import annotations

import threading
from functools import lru_cache

from domains.answer_forms import exact_form, math_form

CACHE_SIZE = 1 << 18


def exact_equal(answer: str, reference: str) -> bool:
    return exact_form(answer) == exact_form(reference)


def _digits(text: str) -> int:
    return sum(character.isdigit() for character in text)


def _parse(text: str, timeout: int | None):
    """math-verify's reading of `math_form` text: as LaTeX first where it has LaTeX commands
    (math-verify reads bare `\\frac{1}{2}` only between `$`), else plain first (`x**2`,
    `50%`), then the other way. A plain reading of only part of the numbers (math-verify
    reads `(1, 2)` as its last number, 2) gives way to a LaTeX one (the interval)."""
    from math_verify import parse

    latex = "$" + text.replace("**", "^").replace("%", "\\%") + "$"
    if "\\" in text:
        return parse(latex, parsing_timeout=timeout, raise_on_error=True) or parse(
            text, parsing_timeout=timeout, raise_on_error=True)
    plain = parse(text, parsing_timeout=timeout, raise_on_error=True)
    if plain and _digits(str(plain[-1])) >= _digits(text):
        return plain
    return parse(latex, parsing_timeout=timeout, raise_on_error=True) or plain


@lru_cache(maxsize=CACHE_SIZE)
def math_equal(answer: str, reference: str, timeout: int = 5) -> tuple[bool | None, str | None]:
    """(equal, reason) of an answer and its reference under math-verify.

    Parameters
    ----------
    answer
        The extracted answer.
    reference
        The reference (or majority-vote label).
    timeout
        Seconds per parse and per comparison (main thread only; see the module docstring).

    Returns
    -------
    (True | False, None), or (None, "verifier_timeout" | "verifier_error") when math-verify
    could not decide. A side math-verify cannot read at all is compared by `exact_equal`.
    """
    if exact_equal(answer, reference):
        return True, None
    from math_verify import verify
    from math_verify.utils import TimeoutException

    limit = timeout if threading.current_thread() is threading.main_thread() else None
    try:
        gold, target = _parse(math_form(reference), limit), _parse(math_form(answer), limit)
        if not gold or not target:
            return False, None
        return bool(verify(gold, target, timeout_seconds=limit, raise_on_error=True)), None
    except TimeoutException:
        return None, "verifier_timeout"
    except Exception:  # noqa: BLE001 - sympy raises anything on odd input; recorded as a reason
        return None, "verifier_error"
