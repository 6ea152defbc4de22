"""Chat prompts (domains/chat.py): the template's rendering of both roles, its inversion, the
raw prompts kept for a tokenizer without a template, and the stop strings."""

from __future__ import annotations

import pytest

from configs import PromptConfig, RunConfig, load_config
from domains import get_domain
from domains.chat import ChatDomain, chat_messages, cut_at_stop, render
from models.tiny import build_tokenizer
from tests.models.chat_model import build_chat_model


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("chat") / "model")


@pytest.fixture(scope="module")
def tokenizer(chat_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(chat_dir)


def test_the_default_run_has_the_raw_domain_and_no_prompt_fingerprint():
    config = RunConfig()
    assert not isinstance(get_domain("arithmetic", config), ChatDomain)
    assert get_domain("arithmetic", config).solver_prompt("58+67") == "<solve>58+67="
    from configs.settings import DomainSettings

    changed = load_config(None, {"prompt.stop": ["\n"]})
    assert DomainSettings.from_config(changed).prompt.stop == ["\n"]


@pytest.mark.parametrize("system", ["", "Be brief."])
def test_solver_and_proposer_prompts_are_the_templates_rendering(chat_dir, tokenizer, system):
    config = load_config(None, {"model.path": str(chat_dir), "domain.name": "reasoning_gym",
                                "prompt.system": system,
                                "prompt.instruction": "Put your final answer in \\boxed{}."})
    domain = get_domain("reasoning_gym", config)
    head = [{"role": "system", "content": system}] if system else []
    solver = head + [{"role": "user", "content": "Find 2+2. Put your final answer in \\boxed{}."}]
    assert domain.solver_prompt("basic_arithmetic L1: Find 2+2.") == \
        tokenizer.apply_chat_template(solver, add_generation_prompt=True, tokenize=False)
    proposer = head + [{"role": "user", "content": "Write one new problem of difficulty level 3."
                                                   " Reply with the problem only."}]
    assert domain.proposer_prompt(3) == render(tokenizer, proposer)
    assert domain.name == "reasoning_gym" and domain.levels == (1, 2, 3, 4)  # the wrapped domain's
    assert domain.task_of("basic_arithmetic L1: Find 2+2.") == "basic_arithmetic"


def test_chat_messages_inverts_the_rendering_and_refuses_raw_prompts(tokenizer):
    for messages in ([{"role": "user", "content": "What is 1 plus 2?"}],
                     [{"role": "system", "content": "S"}, {"role": "user", "content": "a\nb"}]):
        assert chat_messages(tokenizer, render(tokenizer, messages)) == messages
    assert chat_messages(tokenizer, "<solve>58+67=") is None
    assert chat_messages(tokenizer, render(tokenizer, [{"role": "user", "content": "x"}]) + "y") \
        is None


def test_never_and_a_tokenizer_without_template_keep_raw_prompts(chat_dir, tmp_path):
    never = load_config(None, {"model.path": str(chat_dir), "prompt.chat_template": "never"})
    assert get_domain("arithmetic", never).solver_prompt("3-9") == "<solve>3-9="
    plain = tmp_path / "plain"
    build_tokenizer().save_pretrained(plain)  # the tiny model's tokenizer: no chat template
    domain = ChatDomain(get_domain("arithmetic"), PromptConfig(), str(plain))
    assert domain.solver_prompt("3-9") == "<solve>3-9="
    assert domain.proposer_prompt(2) == "<propose>L2:"


def test_stop_strings_cut_completions():
    assert cut_at_stop("42\nUser: more", ["\nUser:", "###"]) == "42"
    assert cut_at_stop("42 ### x\nUser:", ["\nUser:", "###"]) == "42 "
    assert cut_at_stop("42", ["###"]) == "42" and cut_at_stop("42", []) == "42"
    config = load_config(None, {"prompt.stop": ["\n"]})
    assert get_domain("arithmetic", config).cut("12\n34") == "12"
    assert get_domain("arithmetic").cut("12\n34") == "12\n34"


def test_a_proposer_instruction_with_other_placeholders_is_a_config_error():
    from configs import ConfigError

    with pytest.raises(ConfigError, match="prompt.proposer_instruction"):
        load_config(None, {"prompt.proposer_instruction": "level {n}"})


def test_references_are_trained_in_the_answer_format_only_with_the_chat_template(chat_dir):
    overrides = {"domain.name": "reasoning_gym", "prompt.answer_format": "\\boxed{{{answer}}}"}
    chat = get_domain("reasoning_gym", load_config(None, {**overrides,
                                                          "model.path": str(chat_dir)}))
    assert chat.training_target("42") == "\\boxed{42}"
    raw = get_domain("reasoning_gym", load_config(None, {**overrides,
                                                         "prompt.chat_template": "never",
                                                         "model.path": str(chat_dir)}))
    assert raw.training_target("42") == "42"  # no template: no instruction, no format
    default = get_domain("reasoning_gym", load_config(None, {"model.path": str(chat_dir),
                                                             "domain.name": "reasoning_gym"}))
    assert default.training_target("42") == "42"
