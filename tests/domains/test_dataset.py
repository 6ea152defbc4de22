"""The dataset domain: the user's question/answer files, held-out rows kept out, one-line errors."""

from __future__ import annotations

import json
import random

import pytest

from configs import load_config
from domains import get_domain
from domains.dataset import DatasetFileError
from tasks.synthesize import admit
from tests.domains.labels import labelled


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _domain(tmp_path, rows, **dataset):
    paths = [_write(tmp_path / "train.jsonl", rows)]
    config = load_config(None, {"domain.name": "dataset", "domain.min_level": 1,
                                "domain.max_level": 2,
                                "domain.dataset": {"paths": paths, **dataset}})
    return get_domain("dataset", config)


ROWS = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i),
         "level": 1 + i % 2} for i in range(50)]


def test_fixed_fraction_is_held_out_and_never_proposed(tmp_path):
    domain = _domain(tmp_path, ROWS, heldout_fraction=0.2)
    heldout = domain.heldout(100)
    assert len(heldout) == 10
    assert heldout == _domain(tmp_path, ROWS, heldout_fraction=0.2).heldout(100)
    held = {p.text for p in heldout}
    assert not held & {r["question"] for r in domain.pool}
    rng = random.Random(0)
    drawn = [domain.generate(rng, 1 + n % 2) for n in range(200)]
    assert not held & {p.text for p in drawn}
    # a proposer copying a held-out question (other case and spacing) is dropped as heldout
    copy = "  " + heldout[0].text.upper().replace(" ", "  ")
    proposals, problems = admit(domain, [("<propose>L1:", copy)], source="proposer", seen=set(),
                                heldout=held, run_id="r", round_index=1)
    assert proposals[0]["drop_reason"] == "heldout" and problems == []


def test_heldout_file_and_split_column(tmp_path):
    test = _write(tmp_path / "test.jsonl", [{"question": "What is 0 + 0?", "answer": "0"},
                                             {"question": "What is 99 + 1?", "answer": "100"}])
    domain = _domain(tmp_path, ROWS, heldout_path=test)
    assert [p.text for p in domain.heldout(5)] == ["What is 0 + 0?", "What is 99 + 1?"]
    assert "What is 0 + 0?" not in {r["question"] for r in domain.pool}  # also in train: dropped
    split = [{**r, "split": "test" if i < 5 else "train"} for i, r in enumerate(ROWS)]
    assert len(_domain(tmp_path, split).heldout(100)) == 5


def test_answers_are_checked_by_math_equivalence(tmp_path):
    domain = _domain(tmp_path, [{"question": "Half of one?", "answer": "0.5"}, *ROWS])
    assert domain.score(["so \\boxed{1/2}", "the answer is 3", "no idea"],
                        labelled(["0.5", "0.5", "0.5"])) == [1.0, 0.0, None]


@pytest.mark.parametrize(
    ("rows", "dataset", "needle"),
    [([], {}, "has no rows"),
     ([{"q": "x", "answer": "1"}], {}, "no column 'question'"),
     ([{"q": "x", "a": "1"}], {"question_column": "q"}, "set domain.dataset.answer_column"),
     ([{"id": 1, "question": "a", "answer": "1"}, {"id": 1, "question": "b", "answer": "2"}], {},
      "duplicate id 1"),
     ([{"question": "a", "answer": "1", "level": 9}], {}, "level 9"),
     ([{"question": "a", "answer": "1"}], {"heldout_path": "/nonexistent.jsonl"}, "no such file")])
def test_bad_files_are_one_line_errors(tmp_path, rows, dataset, needle):
    with pytest.raises(DatasetFileError, match=needle) as info:
        _domain(tmp_path, rows, **dataset)
    assert "\n" not in str(info.value)


def _raw(path, *lines: bytes):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def _refusal(tmp_path, *lines: bytes, **dataset) -> str:
    """The one-line error of a train.jsonl of these raw lines (message checked one line)."""
    path = _raw(tmp_path / "train.jsonl", *lines)
    config = load_config(None, {"domain.name": "dataset",
                                "domain.dataset": {"paths": [path], **dataset}})
    with pytest.raises(DatasetFileError) as info:
        get_domain("dataset", config)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"dataset error: {path}"), message
    return message


GOOD = b'{"question": "What is 1 + 1?", "answer": "2"}'


@pytest.mark.parametrize(
    ("lines", "needle"),
    [((GOOD, b"42"), "line 2: a number, not a JSON object"),
     ((GOOD, b"null"), "line 2: null, not a JSON object"),
     ((GOOD, b'"a question"'), "line 2: a string, not a JSON object"),
     ((GOOD, b"[1, 2]"), "line 2: a JSON array, not a JSON object"),
     ((GOOD, b"", b"   ", b'{"question": "x", "answer": }'),
      "line 4: not JSON (Expecting value at column 29)"),  # blank lines count
     ((GOOD, b'{"question": "caf\xe9", "answer": "1"}'),
      "line 2: not UTF-8 text at byte offset 17 of the line"),
     ((GOOD, b"[" * 100_000 + b"]" * 100_000), "line 2: unusable JSON"),
     ((GOOD, b'{"question": "x", "answer": ' + b"9" * 5000 + b"}"), "line 2: unusable JSON"),
     ((GOOD, b'{"question": {"text": "What is 2 + 2?"}, "answer": "4"}'),
      "line 2: the question (column 'question') is a JSON object, not text"),
     ((GOOD, b'{"question": ["What", "is"], "answer": "4"}'), "is a JSON array, not text"),
     ((GOOD, b'{"question": 12, "answer": "4"}'), "the question (column 'question') is a number"),
     ((GOOD, b'{"question": "x", "answer": {"value": 4}}'),
      "line 2: the answer (column 'answer') is a JSON object, not text or a number"),
     ((GOOD, b'{"question": "x", "answer": true}'), "the answer (column 'answer') is a boolean"),
     ((GOOD, b'{"question": "x", "answer": NaN}'), "line 2: the answer nan is not a finite"),
     ((GOOD, b'{"question": "x"}'), "line 2: no answer (column 'answer' is missing or null)"),
     ((GOOD, b'{"question": "  ", "answer": "1"}'), "line 2: empty question"),
     ((GOOD, b'{"question": "x", "answer": "1", "level": true}'), "line 2: level True"),
     ((GOOD, b'{"question": "x", "answer": "1", "id": {"a": 1}}'),
      "line 2: id {'a': 1} (column 'id') is not text or an integer"),
     ((b'{"id": 1, "question": "a", "answer": "1"}', b"",
       b'{"id": 1, "question": "b", "answer": "2"}'), "line 3: duplicate id 1")])
def test_a_bad_line_is_named_by_its_file_and_line(tmp_path, lines, needle):
    assert needle in _refusal(tmp_path, *lines)


def test_questions_and_answers_longer_than_their_limits_are_refused(tmp_path):
    long_question = json.dumps({"question": "x" * 1_000_001, "answer": "1"}).encode()
    message = _refusal(tmp_path, GOOD, long_question)
    assert ("line 2: the question is 1,000,001 characters, more than "
            "domain.dataset.max_question_chars = 8,000") in message
    assert "raise domain.dataset.max_question_chars" in message
    long_answer = json.dumps({"question": "x", "answer": "9" * 31}).encode()
    assert "line 2: the answer is 31 characters, more than domain.dataset.max_answer_chars = 30" \
        in _refusal(tmp_path, GOOD, long_answer, max_answer_chars=30)
    # at the limit is fine
    domain = _domain(tmp_path, [*ROWS, {"question": "q" * 50, "answer": "7"}],
                     max_question_chars=50)
    assert "q" * 50 in {r["question"] for r in domain.pool + domain._heldout}


def test_numbers_are_answers_and_odd_but_valid_text_is_one_line(tmp_path):
    rows = [{"question": f"What is {i} + {i}?", "answer": 2 * i} for i in range(20)]
    lines = [json.dumps(r).encode() for r in rows]
    lines.append(json.dumps({"question": "Is a\u2028b one line?", "answer": 1.5},
                            ensure_ascii=False).encode())
    path = _raw(tmp_path / "train.jsonl", b"\xef\xbb\xbf" + lines[0], *lines[1:])  # with a BOM
    config = load_config(None, {"domain.name": "dataset", "domain.dataset.paths": [path]})
    domain = get_domain("dataset", config)
    every = domain.pool + domain._heldout
    assert len(every) == 21 and {r["answer"] for r in every} >= {"0", "38", "1.5"}


def test_parquet_rows_are_named_by_their_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"question": [{"t": "a"}, {"t": "b"}], "answer": ["1", "2"]}), path)
    config = load_config(None, {"domain.name": "dataset", "domain.dataset.paths": [str(path)]})
    with pytest.raises(DatasetFileError, match=r"train.parquet row 1: the question .* is a JSON "
                                               r"object, not text"):
        get_domain("dataset", config)
    path.write_bytes(b"PAR1 random bytes")
    with pytest.raises(DatasetFileError, match="not a readable Parquet file"):
        get_domain("dataset", config)


def test_a_heldout_file_that_is_the_train_file_names_both_and_the_key(tmp_path):
    train = _write(tmp_path / "train.jsonl", ROWS)
    link = tmp_path / "link.jsonl"
    link.symlink_to(train)
    for heldout in (train, str(link)):
        config = load_config(None, {"domain.name": "dataset", "domain.dataset": {
            "paths": [train], "heldout_path": heldout}})
        with pytest.raises(DatasetFileError) as info:
            get_domain("dataset", config)
        message = str(info.value)
        assert f"domain.dataset.heldout_path = {heldout!r} is the training file {train!r}" \
            in message
        assert "heldout_fraction" in message and "\n" not in message


@pytest.mark.parametrize(
    ("rows", "dataset", "needle"),
    [([{"question": "a", "answer": "1", "split": "test"}], {}, "every row has split = 'test'"),
     ([{"question": "a", "answer": "1"}], {}, "holding out 1 of 1 rows"),
     ([{"question": "Same", "answer": "1"}, {"question": "same ", "answer": "1"}], {},
      "holding out 1 of 2 rows (domain.dataset.heldout_fraction = 0.1)")])
def test_held_out_rows_that_leave_nothing_to_train_name_the_key(tmp_path, rows, dataset, needle):
    with pytest.raises(DatasetFileError, match="no training rows") as info:
        _domain(tmp_path, rows, **dataset)
    assert needle in str(info.value)


def test_a_heldout_file_covering_every_question_is_named(tmp_path):
    test = _write(tmp_path / "test.jsonl", ROWS)
    with pytest.raises(DatasetFileError, match=f"also in domain.dataset.heldout_path {test!r}"):
        _domain(tmp_path, ROWS, heldout_path=test)


PROMPTS = [{"id": f"p{i}", "prompt": f"Write a haiku about the number {i}."} for i in range(20)]


def _judged(tmp_path, rows, heldout=None, **verify):
    from domains.dataset import DatasetDomain

    dataset = {"paths": [_write(tmp_path / "train.jsonl", rows)], "question_column": "prompt"}
    if heldout is not None:
        dataset["heldout_path"] = _write(tmp_path / "test.jsonl", heldout)
    config = load_config(None, {"domain.name": "dataset", "domain.min_level": 1,
                                "domain.max_level": 1, "domain.dataset": dataset,
                                **{f"verify.{k}": v for k, v in verify.items()}})
    return DatasetDomain(config)


@pytest.mark.parametrize("verify", [{"compare": "judge"},
                                    {"compare": "reward_model",
                                     "reward_model.model_path": "/models/rm"},
                                    {"reward_function": "my_rewards:brevity"}])
def test_prompts_without_answers_are_read_where_a_judge_scores_the_answers(tmp_path, verify):
    domain = _judged(tmp_path, PROMPTS, heldout=PROMPTS[:3], **verify)
    assert {r["answer"] for r in domain.pool} == {None}
    assert [(p.text, p.reference) for p in domain.heldout(5)] == [
        (r["prompt"], None) for r in PROMPTS[:3]]
    problem = domain.generate(random.Random(0), 1)
    assert problem.reference is None and problem.text.startswith("Write a haiku")
    # some rows with answers, some without (missing or null): the answers are kept
    mixed = [{**r, "answer": "x" * (i % 3)} if i % 3 == 1 else
             {**r, "answer": None} if i % 3 == 2 else r for i, r in enumerate(PROMPTS)]
    kept = _judged(tmp_path, mixed, **verify)
    assert {r["answer"] for r in kept.pool} == {"x", None}


def test_prompts_without_answers_under_a_reference_verifier_name_the_key_and_the_choices(
        tmp_path):
    with pytest.raises(DatasetFileError) as raised:
        _judged(tmp_path, PROMPTS)
    message = str(raised.value)
    assert "train.jsonl line 1" in message and "no column 'answer'" in message
    assert "domain.dataset.answer_column" in message and "verify.compare = 'judge'" in message
    # a missing answer in a later row is still an error without a judge
    with pytest.raises(DatasetFileError, match="train.jsonl line 2"):
        _judged(tmp_path, [{**PROMPTS[0], "answer": "1"}, PROMPTS[1]])


def test_self_instruct_shows_training_questions_of_the_level_the_same_in_every_build(tmp_path):
    domain = _domain(tmp_path, ROWS, proposer_examples=3, heldout_fraction=0.2)
    shown = domain.style_examples(2)
    pool = {r["question"]: r["level"] for r in domain.pool}
    assert len(shown) == len(set(shown)) == 3
    assert all(pool[q] == 2 for q in shown)  # training rows of the level, never a held-out one
    assert domain.proposer_prompt(2) == ("<propose>Like:\n"
                                         + "".join(f"{i}. {q}\n" for i, q in enumerate(shown, 1))
                                         + "L2:")
    again = _domain(tmp_path, ROWS, proposer_examples=3, heldout_fraction=0.2)
    assert again.proposer_prompt(2) == domain.proposer_prompt(2)  # curate rebuilds the same rows
    reseeded = _domain(tmp_path, ROWS, proposer_examples=3, heldout_fraction=0.2, heldout_seed=5)
    assert reseeded.style_examples(1) != domain.style_examples(1)
    # a level with too few rows is completed from the others; 0 examples: the plain prompt
    assert len(domain.style_examples(5)) == 3 and set(domain.style_examples(5)) <= set(pool)
    assert _domain(tmp_path, ROWS).proposer_prompt(2) == "<propose>L2:"
    with pytest.raises(ValueError, match="proposer_examples"):
        _domain(tmp_path, ROWS, proposer_examples=17)


def test_self_instruct_on_prompts_only_puts_the_examples_in_the_proposers_chat_message(tmp_path):
    from domains.chat import ChatDomain, render
    from tests.models.chat_model import build_chat_model

    chat = build_chat_model(tmp_path / "chat")
    prompts = [{"question": f"Write a haiku about the number {i}."} for i in range(8)]
    config = load_config(None, {
        "model.path": str(chat), "verify.compare": "judge", "domain.name": "dataset",
        "domain.dataset": {"paths": [_write(tmp_path / "prompts.jsonl", prompts)],
                           "proposer_examples": 2}})
    domain = get_domain("dataset", config)
    shown = domain.style_examples(1)
    assert len(shown) == 2 and all(q.startswith("Write a haiku") for q in shown)
    user = ("Write one new problem of difficulty level 1. Reply with the problem only.\n\n"
            f"Problems like these:\n1. {shown[0]}\n2. {shown[1]}")
    wrapped = domain.domain
    assert isinstance(wrapped, ChatDomain)
    assert domain.proposer_prompt(1) == render(wrapped.tokenizer(),
                                               [{"role": "user", "content": user}])
