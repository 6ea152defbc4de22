"""Final-answer extraction from free-form solver completions (real models, not the tiny one).

A pretrained model answers in prose; its final answer is found by the extractors named in
`verify.extract`, tried in order, the first that finds one wins:

    boxed        the last \\boxed{...} (nested braces allowed)      "... so \\boxed{\\frac{1}{2}}"
    hashes       the text after the last `####` on its line (GSM8K)  "... #### 1,234"
    answer_is    after the last "the answer is" / "answer:"          "So the answer is 42."
    regex        group 1 (or the whole match) of `verify.answer_regex`, last match
    last_number  the last number: sign, thousands separators (1,234 / 1 234), decimals, a/b,
                 \\frac{a}{b} (also \\dfrac, \\tfrac), mixed numbers (1 1/2), a percent sign
    last_line    the last non-empty line, stripped
    whole        the whole completion, stripped (the tiny model's answers)

    >>> extract_answer("We add them: \\\\boxed{1/2}.", ("boxed", "last_number")).answer
    '1/2'
    >>> extract_answer("no digits here", ("boxed", "last_number")).reason
    'no_answer'

Patterns see Unicode minus and plus signs (U+2212, U+FF0D, U+FE63, a dash used as a minus,
U+FF0B) as `-` / `+` (domains/answer_forms.py), so `−5` is extracted whole, not as `5`; the
answer keeps the characters written (the comparison unifies them). An empty result
counts as none. When no extractor finds an answer the result carries the reason `no_answer`,
which the verdict records (never a silent 0).

A reasoning model thinks between tags (Qwen3's `<think>...</think>`, `verify.think_tags`): only
the text after the last closing tag is searched, so a number in the reasoning is never read as
the answer; a completion that opens the tag and never closes it (cut off by `max_new_tokens`
while thinking) has no answer, with the reason `thinking_unfinished`:

    >>> extract_answer("<think>7*8 is 54? no, 56</think> \\\\boxed{56}", ("boxed",),
    ...                think_tags=("<think>", "</think>")).answer
    '56'
    >>> extract_answer("<think>7*8 is 54? no, 5", ("last_number",),
    ...                think_tags=("<think>", "</think>")).reason
    'thinking_unfinished'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from configs import ANSWER_EXTRACTORS as EXTRACTORS
from domains.answer_forms import closing_brace, unify_signs

_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS = re.compile(r"(?:the (?:final )?answer is|answer:)[ \t]*:?[ \t]*([^\n]*)",
                        re.IGNORECASE)
# The last number: a sign that is not an operator ("10-3" ends in 3), then the longest form:
# a (mixed) LaTeX fraction, a mixed number, a number with thousands separators, a decimal, a/b;
# an optional percent sign. `\frac{3}{4}` is one number, not its denominator 4.
_FRAC_GROUP = r"\{\s*[-+]?\d+(?:\.\d+)?\s*\}"
_NUMBER = re.compile(
    r"(?:(?<![\w)\]}])[-+])?(?:"
    rf"(?:\d+\s*)?\\[dt]?frac\s*{_FRAC_GROUP}\s*{_FRAC_GROUP}"
    r"|(?:\d+\s*)?\\[dt]?frac\d\d"
    r"|\d+ \d+/\d+(?!\d|\.\d)"
    r"|(?:\d{1,3}(?:(?:,|\{,\}|\\,)\d{3})+(?!\d|,\d)|\d{1,3}(?: \d{3})+(?![\d/-]| \d)"
    r"|\d+)(?:\.\d+)?(?:/\d+(?:\.\d+)?)?"
    r"|\.\d+"
    r")(?:\s?\\?%)?")
_TRAILING = " \t.;!$"


@dataclass(frozen=True)
class Extraction:
    """An extracted answer, or None with the reason (`no_answer`) and which extractors ran."""

    answer: str | None
    reason: str | None = None


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if none
    or unclosed."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    index = text.index("{", start) + 1
    end = closing_brace(text, index)
    return None if end is None else text[index:end]


def _last_group(pattern: re.Pattern[str], text: str) -> str | None:
    """The last match (group 1 if any) of `pattern`, searched with Unicode signs read as ASCII
    (`unify_signs` keeps positions) and returned as written, so a task scorer sees the text."""
    matches = list(pattern.finditer(unify_signs(text)))
    if not matches:
        return None
    start, end = matches[-1].span(1 if pattern.groups else 0)
    return text[start:end] if start >= 0 else None


def _clean(answer: str | None) -> str | None:
    if answer is None:
        return None
    answer = answer.strip().rstrip(_TRAILING).lstrip(" \t$")
    return answer or None


def _extract_one(method: str, completion: str, pattern: re.Pattern[str] | None) -> str | None:
    if method == "boxed":
        return last_boxed(completion)
    if method == "hashes":
        return _last_group(_HASHES, completion)
    if method == "answer_is":
        found = _last_group(_ANSWER_IS, completion)
        boxed = last_boxed(found) if found else None  # "the answer is \boxed{4}"
        return boxed if boxed is not None else found
    if method == "regex":
        return _last_group(pattern, completion) if pattern is not None else None
    if method == "last_number":
        return _last_group(_NUMBER, completion)
    if method == "last_line":
        lines = [line for line in completion.splitlines() if line.strip()]
        return lines[-1] if lines else None
    if method == "whole":
        return completion
    msg = f"unknown answer extractor {method!r}; use one of {', '.join(EXTRACTORS)}"
    raise ValueError(msg)


def after_thinking(completion: str, think_tags: Sequence[str] = ()) -> str | None:
    """The part of `completion` after its reasoning: the text after the last closing tag; the
    whole completion when it never opens the tag; None when it opens it and never closes it
    (the answer was never written). `think_tags` = (opening, closing), or () for none."""
    if not think_tags:
        return completion
    opening, closing = think_tags
    end = completion.rfind(closing)
    if end >= 0:
        return completion[end + len(closing):]
    return None if opening in completion else completion


def extract_answer(completion: str, methods: Sequence[str],
                   pattern: str | re.Pattern[str] | None = None,
                   think_tags: Sequence[str] = ()) -> Extraction:
    """The final answer of `completion` by the first of `methods` that finds one.

    Parameters
    ----------
    completion
        The solver's completion, as sampled.
    methods
        Extractor names from `EXTRACTORS`, tried in order.
    pattern
        The regex of the `regex` extractor (group 1 is the answer, else the whole match).
    think_tags
        (opening, closing) of the reasoning block (`after_thinking`), or () for none.

    Returns
    -------
    The stripped answer (trailing `.`, `;`, `$` removed), or
    `Extraction(None, "no_answer")`, or `Extraction(None, "thinking_unfinished")`.
    """
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    final = after_thinking(completion, think_tags)
    if final is None:
        return Extraction(None, "thinking_unfinished")
    for method in methods:
        answer = _clean(_extract_one(method, final, compiled))
        if answer is not None:
            return Extraction(answer)
    return Extraction(None, "no_answer")
