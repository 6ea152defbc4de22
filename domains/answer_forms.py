"""One spelling per notation: the text an answer is compared in (both answer and reference).

Models and datasets write one number many ways. `exact_form` and `math_form` rewrite a text
so that the comparison (domains/equivalence.py) sees one spelling:

    signs       U+2212 minus, U+FF0D, U+FE63, U+2796 -> "-" everywhere; the dashes U+2010-U+2014
                -> "-" where they stand as a sign (before a number, not after a word or digit);
                U+FF0B, U+FE62, U+2795 -> "+"; a leading "+" of a number is dropped
    spaces      no-break, thin and figure spaces, `\\,` `\\;` `\\:` `~` -> " "; `\\!` dropped
    wrappers    `$...$`, `\\(...\\)`, `\\[...\\]`, `\\boxed{}`, `\\fbox{}`, `\\text{}`,
                `\\textbf{}`, `\\mathrm{}`, `\\mathbf{}`, `\\mbox{}`, `\\displaystyle`, `\\left`,
                `\\right` dropped (content kept); spaces just inside brackets dropped; a lone
                number in parentheses loses them
    fractions   `\\dfrac`, `\\tfrac` -> `\\frac`; `\\frac12` -> `\\frac{1}{2}`
    separators  `1,234`, `1 234`, `1\\,234`, `1{,}234` -> `1234`: groups of exactly three digits
                after one to three, one separator throughout; `1,2` and `12,34` are kept
    percent     `\\%` -> `%`, `50 %` -> `50%`

`exact_form` then writes integer fractions as `a/b` (`-\\frac{3}{4}` -> `-3/4`, `1\\frac{1}{2}`
-> `1 1/2`), collapses whitespace, drops a trailing `.` and folds case; it changes notation,
never value (`1/2` stays unequal to `0.5`, `50%` to `0.5`). `math_form` instead writes a mixed
number `1 1/2` or `1\\frac{1}{2}` (whole part, then a proper fraction) as its value `3/2`, the
form math-verify reads (it reads `1 1/2` as 1 and `1 234` as 235).

    >>> exact_form("$\\u22121{,}234$")
    '-1234'
    >>> math_form("\\\\boxed{-1\\\\dfrac{1}{2}}")
    '-\\\\frac{3}{2}'
"""

from __future__ import annotations

import re
from functools import lru_cache

_ALWAYS = str.maketrans({"\u2212": "-", "\uff0d": "-", "\ufe63": "-", "\u2796": "-",
                         "\uff0b": "+", "\ufe62": "+", "\u2795": "+", "\u00a0": " ",
                         "\u2007": " ", "\u2009": " ", "\u202f": " ", "\u2044": "/",
                         "\u2215": "/"})
# A dash is a minus where it starts a number and does not join two words or numbers ("3–5").
_DASH_AS_MINUS = re.compile(r"(?<![\w)\]}])[\u2010-\u2014](?=\s*[\d.\\])")
_UNWRAP = re.compile(r"\\(?:boxed|fbox|text|textbf|textit|textrm|mathrm|mathbf|mbox)\s*\{")
_DROP = re.compile(r"\$|\\[()\[\]]|\\displaystyle|\\(?:left|right)(?![a-zA-Z])|\\!")
_LATEX_SPACES = re.compile(r"\\[,;: ]|~")
_FRAC_NAME = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*(\d)")
_SEPARATED = re.compile(r"(?<![\d.,/])(\d{1,3})(,|\{,\}| )(\d{3})((?:\2\d{3})*)(?![\d/]|\2\d)")
_PERCENT = re.compile(r"(\d)\s*\\?%")
_SPACES = re.compile(r"\s+")
_INNER_SPACES = re.compile(r"(?<=[(\[{])\s+|\s+(?=[)\]}])")  # `\left( 3 \right)`
_SIGN_SPACE = re.compile(r"(?:^|(?<=[(\[{=,]))\s*([-+])\s+(?=[\d.\\])")
_PLUS = re.compile(r"(?:^|(?<=[(\[{=,])|(?<=[(\[{=,] ))\+(?=[\d.]|\\frac)")
_GROUP = r"\{\s*(\d+)\s*\}"
_FRAC = re.compile(r"(?<![\^_\w])([-+]?)\\frac\s*\{\s*([-+]?\d+)\s*\}\s*" + _GROUP + r"(?![\w\\^])")
_MIXED_LATEX = re.compile(r"(?<![\d.,/^_])([-+]?)(\d+)\s*\\frac\s*" + _GROUP + r"\s*" + _GROUP)
_MIXED_PLAIN = re.compile(r"(?<![\d.,/^_])([-+]?)(\d+) (\d+)/(\d+)(?![\d./])")
_PAREN_NUMBER = re.compile(r"^\(\s*(-?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?%?)\s*\)$")


def unify_signs(text: str) -> str:
    """Unicode minus and plus signs (and dashes used as a minus) as ASCII `-` / `+`, odd spaces
    as " "; character for character, so positions in `text` stay valid."""
    return _DASH_AS_MINUS.sub("-", text.translate(_ALWAYS))


def closing_brace(text: str, index: int) -> int | None:
    """The position of the `}` closing the group that starts at `index` (just after its `{`)."""
    depth = 1
    for position in range(index, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return position
    return None


def _unwrap(text: str) -> str:
    while (match := _UNWRAP.search(text)) is not None:
        end = closing_brace(text, match.end())
        if end is None:
            return text
        text = text[:match.start()] + text[match.end():end] + text[end + 1:]
    return text


def _ungroup(match: re.Match[str]) -> str:
    return match.group(1) + match.group(3) + match.group(4).replace(match.group(2), "")


def _canonical(text: str) -> str:
    text = _DROP.sub("", _unwrap(unify_signs(text)))
    text = _SPACES.sub(" ", _LATEX_SPACES.sub(" ", text)).strip()
    text = _INNER_SPACES.sub("", text)
    text = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", _FRAC_NAME.sub(r"\\frac", text))
    text = _SEPARATED.sub(_ungroup, text)
    text = _PERCENT.sub(r"\1%", text)
    text = _PLUS.sub("", _SIGN_SPACE.sub(r"\1", text))
    text = text.rstrip(".").strip()
    number = _PAREN_NUMBER.match(text)
    return number.group(1) if number else text


def _mixed_value(match: re.Match[str], *, latex: bool) -> str:
    sign, whole, numerator, denominator = match.groups()
    if int(numerator) >= int(denominator):  # 2 3/2: not a mixed number
        return match.group(0)
    value = int(whole) * int(denominator) + int(numerator)
    sign = "-" if sign == "-" else ""
    return f"{sign}\\frac{{{value}}}{{{denominator}}}" if latex else f"{sign}{value}/{denominator}"


@lru_cache(maxsize=1 << 16)
def exact_form(text: str) -> str:
    """The text `exact` compares: notation unified (see the module docstring), whitespace
    collapsed, case folded; the value is never computed."""
    text = _canonical(text)
    text = _MIXED_LATEX.sub(r"\1\2 \\frac{\3}{\4}", text)  # 1\frac{1}{2} -> 1 \frac{1}{2}
    text = _FRAC.sub(lambda m: _signed(m.group(1), m.group(2)) + "/" + m.group(3), text)
    return text.casefold()


def _signed(outer: str, numerator: str) -> str:
    negative = (outer == "-") != numerator.startswith("-")
    return ("-" if negative else "") + numerator.lstrip("+-")


@lru_cache(maxsize=1 << 16)
def math_form(text: str) -> str:
    """The text given to math-verify: notation unified, mixed numbers written as their value."""
    text = _canonical(text)
    text = _MIXED_LATEX.sub(lambda m: _mixed_value(m, latex=True), text)
    return _MIXED_PLAIN.sub(lambda m: _mixed_value(m, latex=False), text)
