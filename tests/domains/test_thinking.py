"""A reasoning model's thinking (`verify.think_tags`): the answer is read after it, never in it,
and a completion cut off while thinking has no answer, with its reason."""

from __future__ import annotations

import json

import pytest

from configs import load_config
from domains import get_domain
from domains.answers import after_thinking, extract_answer
from domains.checking import UNJUDGED_REASONS, AnswerChecker, Judgement
from tests.domains.labels import labelled

TAGS = ("<think>", "</think>")
DEFAULT = ("boxed", "hashes", "answer_is", "last_number")


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>Is it 54? 7*8 = 56.</think>\n\nThe answer is 56.", "56"),
        ("<think>\\boxed{54} looks wrong</think> so \\boxed{56}", "56"),
        ("<think>a</think><think>b 12</think> 56", "56"),  # after the last closing tag
        ("no thinking at all: 56", "56"),
        ("<think>\n7*8 = 56, so \\boxed{56}</think>", None),  # nothing after it: no answer
    ],
)
def test_the_answer_is_read_after_the_thinking(completion, expected):
    extraction = extract_answer(completion, DEFAULT, think_tags=TAGS)
    assert extraction.answer == expected
    assert extraction.reason == (None if expected else "no_answer")


def test_a_completion_cut_off_while_thinking_has_no_answer_and_says_why():
    cut = "<think>Let me compute 7*8. 7*8 = 5"
    assert after_thinking(cut, TAGS) is None
    assert extract_answer(cut, DEFAULT, think_tags=TAGS).reason == "thinking_unfinished"
    assert "thinking_unfinished" in UNJUDGED_REASONS
    checker = AnswerChecker(extract=DEFAULT, compare="math", think_tags=TAGS)
    assert checker.judge(cut, "56") == Judgement(None, "thinking_unfinished")
    assert checker.judge(cut + "6</think> \\boxed{56}", "56") == Judgement(1.0)
    # without tags the number in the unfinished reasoning would have been the answer
    assert extract_answer(cut, DEFAULT).answer == "5"


def test_other_tags_and_none():
    assert extract_answer("[r] 3 [/r] 4", DEFAULT, think_tags=("[r]", "[/r]")).answer == "4"
    assert extract_answer("<think>3</think> 4", DEFAULT, think_tags=()).answer == "4"
    assert extract_answer("<think>3 and on", DEFAULT, think_tags=()).answer == "3"


def _dataset_domain(tmp_path, **verify):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)})
                            + "\n" for i in range(20)))
    config = load_config(None, {"domain.name": "dataset",
                                "domain.dataset": {"paths": [str(path)]},
                                **{f"verify.{k}": v for k, v in verify.items()}})
    return get_domain("dataset", config)


def test_the_dataset_domain_skips_thinking_by_default_and_names_it_in_its_verifier(tmp_path):
    domain = _dataset_domain(tmp_path)
    completions = ["<think>2+2 is 5? no</think> 4", "<think>2+2 is 5? no", "4"]
    assert domain.score(completions, labelled(["4", "4", "4"])) == [1.0, None, 1.0]
    assert domain.verifier().endswith("after</think>]@1")
    off = _dataset_domain(tmp_path, think_tags=[])
    assert off.score(completions[:2], labelled(["4", "4"])) == [1.0, 0.0]
    assert "after" not in off.verifier()


@pytest.mark.parametrize("tags", [["<think>"], ["<think>", ""], ["a", "b", "c"]])
def test_unpaired_tags_are_refused_naming_the_key(tags):
    with pytest.raises(ValueError, match="think_tags"):
        load_config(None, {"verify.think_tags": tags})


def test_the_judge_reads_the_answer_after_the_thinking_and_is_not_asked_about_a_cut_one():
    from domains.judge import ModelJudge
    from tests.domains.test_judge import ROWS, ScriptedBackend

    config = load_config(None, {"verify.compare": "judge"})
    backend = ScriptedBackend(["9"])
    judge = ModelJudge(config.verify.judge, model_path="scripted", backend=backend,
                       think_tags=config.verify.think_tags)
    domain = get_domain("arithmetic")
    judged = judge.judge(["<think>2+2 = 5?</think>4", "<think>2+2 = 5?"], ROWS[1:3], domain)
    assert judged == [Judgement(8 / 9), Judgement(None, "thinking_unfinished")]
    (prompts, _), = backend.calls
    assert prompts == [judge.prompt(domain.question(ROWS[1]["text"]), "4")]
    plain = ModelJudge(config.verify.judge, model_path="scripted", backend=ScriptedBackend([]))
    assert plain.describe() != judge.describe()  # the tags are part of the judge's id


def test_the_tags_travel_with_the_domains_settings_into_its_fingerprint_and_other_processes():
    from configs import VerifyConfig
    from configs.settings import AnswerChecking, DomainSettings

    # every answer-checking key of [verify] (all but the label mode and the canaries)
    assert set(VerifyConfig.model_fields) - set(AnswerChecking.model_fields) == {"labels",
                                                                                "canary"}
    config = load_config(None, {"verify.think_tags": ["[r]", "[/r]"]})
    settings = DomainSettings.from_config(config)
    assert settings != DomainSettings.from_config(load_config(None))
    assert settings.domain_config().verify.think_tags == ["[r]", "[/r]"]
