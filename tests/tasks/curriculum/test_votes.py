import pytest

from tasks.curriculum.votes import (
    Vote,
    label_matches,
    label_precision,
    majority_labels,
    majority_vote,
)


@pytest.mark.parametrize(
    ("answers", "vote"),
    [
        (["42", "42", "41", None], Vote("42", 0.5, False)),
        (["7", "7", "7", "7"], Vote("7", 1.0, False)),
        (["1", "2", "3", "4"], Vote("1", 0.25, True)),       # four-way tie: smallest string
        (["9", "10", "9", "10"], Vote("10", 0.5, True)),      # "10" < "9" as strings
        (["5", None, None, None], Vote("5", 0.25, False)),    # None votes for nothing, counts in k
        ([None, None], Vote(None, 0.0, False)),
        ([], Vote(None, 0.0, False)),
        (["3", "3", "4", "4", "4"], Vote("4", 0.6, False)),
    ],
)
def test_majority_vote(answers, vote):
    got = majority_vote(answers)
    assert got.label == vote.label and got.tie == vote.tie
    assert got.agreement == pytest.approx(vote.agreement)


def test_majority_labels_is_per_problem_and_independent_of_answer_order():
    answers = {"a": ["2", "3", "2"], "b": ["8", "9"], "c": [None]}
    votes = majority_labels(answers)
    assert votes == {"a": ("2", pytest.approx(2 / 3), False), "b": ("8", 0.5, True),
                     "c": (None, 0.0, False)}
    reversed_votes = majority_labels({k: list(reversed(v)) for k, v in answers.items()})
    assert reversed_votes == votes


@pytest.mark.parametrize(
    ("labels", "references", "only", "matches", "precision"),
    [
        ({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "5", "c": "3"}, None, (2, 3), 2 / 3),
        # no label: not counted
        ({"a": "1", "b": None}, {"a": "1", "b": "2"}, None, (1, 1), 1.0),
        # no reference: not counted
        ({"a": "1", "b": "2"}, {"a": None, "b": "3"}, None, (0, 1), 0.0),
        ({"a": "1"}, {}, None, (0, 0), None),                                  # nothing to measure
        ({"a": "1", "b": "2"}, {"a": "1", "b": "3"}, ["b"], (0, 1), 0.0),
    ],
)
def test_label_precision(labels, references, only, matches, precision):
    assert label_matches(labels, references, only=only) == matches
    assert label_precision(labels, references, only=only) == precision
