"""The model, the problem domain and how its answers are checked and prompted: `[model]`,
`[proposer]`, `[domain]` (with `[domain.reasoning_gym]`, `[domain.dataset]`), `[verify]`,
`[sandbox]`, `[prompt]`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from configs.base import Section, one_placeholder


class ModelConfig(Section):
    """The solver, and the proposer too unless `[proposer] separate`. `path` = None builds the
    tiny character-level model."""

    path: str | None = Field(
        None,
        description="a local Hugging Face model folder or a hub id (e.g. "
                    "'Qwen/Qwen2.5-0.5B-Instruct', read from the local hub cache: HF_HOME / "
                    "HF_HUB_CACHE); None = the built-in tiny model")
    revision: str | None = Field(
        None,
        description="a hub id's snapshot: commit hash, branch or tag; None = main. A run records "
                    "the commit hash it resolved here, so a resume loads the same snapshot")
    hidden_size: int = Field(128, ge=32, le=4096, description="tiny model: residual stream width")
    num_layers: int = Field(4, ge=1, le=64, description="tiny model: transformer blocks")
    head_dim: int = Field(32, ge=8, le=256, description="tiny model: width of one attention head")
    intermediate_size: int = Field(512, ge=32, le=16384, description="tiny model: width of the MLP")
    init_seed: int = Field(0, ge=0, description="tiny model: seed of the initial weights")

    @model_validator(mode="after")
    def _revision_needs_a_hub_id(self) -> ModelConfig:
        if self.revision is not None and self.path is None:
            msg = (f"revision = {self.revision!r} without a path: set model.path to a hub id, or "
                   "unset model.revision (the built-in tiny model has no revisions)")
            raise ValueError(msg)
        return self


class ProposerConfig(Section):
    """Who writes the problems: the solver itself (one model in two roles), or with `separate`
    a second model (R-Zero's challenger beside its solver), `[proposer.model]`, trained on the
    proposer rows in a stage of its own (tasks/train.py `train_proposer`)."""

    separate: bool = Field(
        False, description="true: a second model, [proposer.model], proposes and trains on the "
                           "proposer rows; false: the solver proposes too")
    model: ModelConfig = Field(
        ModelConfig(), description="the separate proposer: a folder or hub id, or the tiny model "
                                   "of these sizes and seed; it must share the solver's tokenizer")

    @model_validator(mode="after")
    def _a_folder_needs_a_separate_proposer(self) -> ProposerConfig:
        if self.model.path is not None and not self.separate:
            msg = (f"proposer.model.path = {self.model.path!r} without proposer.separate = true: "
                   "set proposer.separate = true to give the proposer that model, or unset "
                   "proposer.model.path (the solver proposes)")
            raise ValueError(msg)
        return self


FREE_FORM_DOMAINS = ("reasoning_gym", "dataset")  # answers checked by [verify]'s extractors
# The domains a run can name, each "module:class" (domains.get_domain imports the one chosen): a
# new domain is its module, deriving from domains.base.Domain, plus its line here.
DOMAINS = {"arithmetic": "domains.arithmetic:ArithmeticDomain",
           "python_io": "domains.python_io:PythonIODomain",
           "reasoning_gym": "domains.reasoning_gym:ReasoningGymDomain",
           "dataset": "domains.dataset:DatasetDomain"}
ANSWER_EXTRACTORS = ("boxed", "hashes", "answer_is", "regex", "last_number", "last_line",
                     "whole")


class ReasoningGymConfig(Section):
    """`[domain.reasoning_gym]`: the reasoning-gym tasks of `domain.name = "reasoning_gym"`
    (domains/reasoning_gym.py); level L is the task curriculum's global level L - 1."""

    tasks: dict[str, float] = Field(
        {"basic_arithmetic": 1.0},
        description="reasoning-gym dataset names (reasoning_gym.factory.DATASETS, each with a "
                    "curriculum) and their weights in the generator's draws; each >= 0, not all 0")
    item_seconds: float = Field(
        30.0, gt=0, le=86_400,
        description="most seconds a task's generator may take for one item (a held-out or "
                    "generator problem) before the run stops with an error naming the task; not "
                    "part of the domain's settings (configs/settings.py DomainSettings) like "
                    "every [domain] key")

    @field_validator("tasks")
    @classmethod
    def _tasks_weighted(cls, value: dict[str, float]) -> dict[str, float]:
        if not value or any(w < 0 for w in value.values()) or not any(value.values()):
            msg = (f"tasks = {value}: name at least one reasoning-gym task with a weight > 0, "
                   "e.g. {basic_arithmetic = 1.0, spell_backward = 1.0}")
            raise ValueError(msg)
        return value


class DatasetConfig(Section):
    """`[domain.dataset]`: the user's question/answer files of `domain.name = "dataset"`
    (domains/dataset.py); every row is checked when the run starts, before anything is
    written: a row that is no JSON object, a question that is no text or is longer than
    `max_question_chars`, an answer that is no text or number or is longer than
    `max_answer_chars` is refused naming the file and line."""

    paths: list[str] = Field(
        [], description="JSONL (.jsonl) or Parquet (.parquet) files of questions and answers")
    heldout_path: str | None = Field(
        None, description="a file of held-out questions (same columns); None = split the rows")
    heldout_fraction: float = Field(
        0.1, gt=0, lt=1,
        description="share of the rows held out (by a fixed-seed draw) when no heldout_path and "
                    "no split column is given")
    heldout_seed: int = Field(0, ge=0, description="seed of the held-out draw")
    question_column: str = Field("question", min_length=1, description="column of the questions")
    answer_column: str = Field("answer", min_length=1, description="column of the answers")
    level_column: str = Field(
        "level", min_length=1,
        description="optional column of integer difficulty levels 1..5 (absent: every row is "
                    "level 1; `difficulty` is read when `level` is absent)")
    id_column: str = Field(
        "id", min_length=1, description="optional column of unique row ids (checked for repeats)")
    split_column: str = Field(
        "split", min_length=1,
        description="optional column naming each row's split; rows of heldout_split are held out")
    heldout_split: str = Field(
        "test", min_length=1, description="the split column's value of held-out rows")
    max_question_chars: int = Field(
        8000, ge=1, le=1_000_000,
        description="longest question a file may hold, characters; a longer one is refused when "
                    "the run starts, naming its file and line (a question becomes the prompt of "
                    "every rollout and training row: a very long one exhausts memory mid-run)")
    max_answer_chars: int = Field(
        2000, ge=1, le=1_000_000,
        description="longest answer a file may hold, characters; a longer one is refused when "
                    "the run starts, naming its file and line (an answer is compared by "
                    "math-verify and trained on as a reference)")
    proposer_examples: int = Field(
        0, ge=0, le=16,
        description="self-instruct: the proposer's prompt shows this many questions of the "
                    "requested level from the training rows (drawn once per level with "
                    "heldout_seed, the same in every stage), and the proposer writes a new one "
                    "in their style; 0 = none")


class DomainConfig(Section):
    """The problem domain (domains/): its levels, its seed generator and its held-out set."""

    name: Literal[tuple(DOMAINS)] = Field(  # type: ignore[valid-type]
        "arithmetic", description="the domain (domains/)")
    min_level: int = Field(2, ge=1, le=5, description="easiest difficulty level proposed")
    max_level: int = Field(4, ge=1, le=5, description="hardest difficulty level proposed")
    seed_problems: int = Field(8000, ge=1, le=1_000_000, description="round-0 generator problems")
    seed_max_level: int = Field(
        2, ge=1, le=5, description="hardest level the warm-up trains the solver on")
    heldout_per_level: int = Field(
        40, ge=1, le=10_000, description="held-out problems per level (evaluate)")
    modes: dict[Literal["deduction", "abduction", "induction"], float] = Field(
        {"deduction": 1.0, "abduction": 0.0, "induction": 0.0},
        description="python_io: the task modes' weights in the generator's problems (seed, "
                    "top-up; the held-out set covers the modes weighted > 0): deduction = "
                    "predict the output, abduction = give an input that yields the output, "
                    "induction = write the function from input/output pairs; each >= 0, not all "
                    "0")

    @field_validator("modes")
    @classmethod
    def _modes_weighted(cls, value: dict[str, float]) -> dict[str, float]:
        missing = {"deduction", "abduction", "induction"} - set(value)
        if missing or any(w < 0 for w in value.values()) or not any(value.values()):
            msg = (f"modes = {value}: give deduction, abduction and induction each a weight "
                   ">= 0, not all 0")
            raise ValueError(msg)
        return value

    reasoning_gym: ReasoningGymConfig = Field(
        ReasoningGymConfig(), description="reasoning_gym: the tasks and their weights")
    dataset: DatasetConfig = Field(DatasetConfig(), description="dataset: the files and columns")

    @model_validator(mode="after")
    def _levels_ordered(self) -> DomainConfig:
        if self.min_level > self.max_level:
            msg = f"min_level = {self.min_level} must be <= max_level = {self.max_level}"
            raise ValueError(msg)
        return self


JUDGE_SCALES = ("1-10", "pass_fail")


class JudgeConfig(Section):
    """`[verify.judge]`: the LLM judge of `verify.compare = "judge"` (domains/judge.py,
    docs/judges.md): a model folder scores each (question, answer) greedily on the run's rollout
    backend; its reply is parsed into a reward by `scale`."""

    model_path: str | None = Field(
        None,
        description="the judge's model folder or hub id; None = the run's model.path (the base "
                    "model, one fixed judge for every round and stage)")
    incumbent: bool = Field(
        False,
        description="true = the round's incumbent judges the round's own answers (verify, "
                    "rationalization, the GRPO and proposer rewards: Meta-Rewarding's self-"
                    "judge, its id naming the checkpoint); held-out answers stay with the fixed "
                    "judge (model_path, else model.path), so promotion compares like with like")
    template: str | None = Field(
        None,
        description="the judge's prompt; placeholders {question}, {answer} and optionally "
                    "{rubric}; None = the scale's built-in template (domains/judge.py)")
    rubric: str = Field("", description="the text put in the template's {rubric}; empty = none")
    scale: Literal[JUDGE_SCALES] = Field(
        "1-10",
        description="how the reply becomes a reward: 1-10 (score s -> (s-1)/9) or pass_fail "
                    "(PASS -> 1, FAIL -> 0); anything else is unjudged (judge_unparseable)")
    max_new_tokens: int = Field(16, ge=1, le=4096, description="longest judge reply, tokens")
    mode: Literal["pointwise", "pairwise"] = Field(
        "pointwise",
        description="pointwise = each answer scored on `scale`; pairwise = each answer against "
                    "its problem's reference in both orders (win 1, tie or position-"
                    "inconsistent 0.5, loss 0)")
    pairwise_template: str | None = Field(
        None,
        description="pairwise's prompt; placeholders {question}, {first}, {second} and "
                    "optionally {rubric}; None = the built-in one (domains/pairwise.py)")
    rubrics: bool = Field(
        False,
        description="true = the judge first writes criteria for each question (EvoRubric) and "
                    "scores the answers against them; stored with each judgement")
    rubric_template: str | None = Field(
        None,
        description="the prompt that asks for a question's criteria; placeholder {question}; "
                    "None = the built-in one (domains/judge.py)")
    rubric_max_new_tokens: int = Field(
        256, ge=1, le=4096, description="longest criteria the judge writes, tokens")

    @field_validator("template")
    @classmethod
    def _template_placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            value.format(question="q", answer="a", rubric="r")
        except (KeyError, IndexError, ValueError) as exc:
            msg = (f"template = {value!r}: only the placeholders {{question}}, {{answer}} and "
                   f"{{rubric}} are allowed ({exc!r}); write other braces as {{{{ and }}}}")
            raise ValueError(msg) from None
        if "{answer}" not in value:
            msg = f"template = {value!r}: it must hold {{answer}}, the answer judged"
            raise ValueError(msg)
        return value

    @field_validator("pairwise_template")
    @classmethod
    def _pairwise_placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            value.format(question="q", first="a", second="b", rubric="r")
        except (KeyError, IndexError, ValueError) as exc:
            msg = (f"pairwise_template = {value!r}: only the placeholders {{question}}, "
                   f"{{first}}, {{second}} and {{rubric}} are allowed ({exc!r}); write other "
                   "braces as {{ and }}")
            raise ValueError(msg) from None
        if "{first}" not in value or "{second}" not in value:
            msg = f"pairwise_template = {value!r}: it must hold {{first}} and {{second}}"
            raise ValueError(msg)
        return value

    @field_validator("rubric_template")
    @classmethod
    def _rubric_placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            value.format(question="q")
        except (KeyError, IndexError, ValueError) as exc:
            msg = (f"rubric_template = {value!r}: only the placeholder {{question}} is allowed "
                   f"({exc!r}); write other braces as {{{{ and }}}}")
            raise ValueError(msg) from None
        return value

    @model_validator(mode="after")
    def _written_rubrics(self) -> JudgeConfig:
        if self.rubrics and self.rubric:
            msg = (f"rubrics = true with rubric = {self.rubric!r}: the judge writes each "
                   "question's criteria itself; set one of them")
            raise ValueError(msg)
        if self.rubrics and self.template is not None and "{rubric}" not in self.template:
            msg = (f"rubrics = true with template = {self.template!r}: the template must hold "
                   "{rubric}, where each question's criteria go")
            raise ValueError(msg)
        return self


class RewardModelConfig(Section):
    """`[verify.reward_model]`: the reward model of `verify.compare = "reward_model"`
    (domains/reward_model.py, docs/judges.md): a sequence classifier with one output scores
    each (solver prompt, answer); the reward is the sigmoid of its score."""

    model_path: str | None = Field(
        None,
        description="the reward model's folder or hub id (any AutoModelForSequenceClassification "
                    "with one label, e.g. a Skywork-Reward model); required with compare = "
                    "'reward_model' (the run's model is no reward model)")
    max_length: int = Field(
        1024, ge=16, le=131_072,
        description="most tokens of prompt and answer scored; a longer pair loses the start of "
                    "its prompt (truncated from the left), so the answer's end is always read")
    batch_size: int = Field(
        16, ge=1, le=4096, description="rows of every forward pass: pairs of one token length, "
                                       "filled out with copies (1 on the CPU wastes none)")


VERIFY_COMPARES = ("auto", "exact", "math", "task", "judge", "reward_model")
MODEL_VERIFIERS = ("judge", "reward_model")  # compares that score whole completions with a model


def incumbent_judges(verify: Any) -> bool:
    """Whether each round's incumbent judges the round's own answers: `[verify.judge] incumbent
    = true` where the LLM judge is the verifier (`verify`: the `[verify]` section or a stage's
    answer checking; a reward function comes first, domains/judge.py `judged_domain`)."""
    return (verify.reward_function is None and verify.compare == "judge"
            and verify.judge.incumbent)


class VerifyConfig(Section):
    """Which label a rollout's reward compares against (tasks/verify.py)."""

    labels: Literal["reference", "majority"] = Field(
        "reference",
        description="reference: the domain's executed reference answer; majority: the most "
                    "common answer among the problem's k samples (TTRL / R-Zero pseudo-labels; "
                    "label precision against references is recorded where they exist)",
    )
    extract: list[Literal[ANSWER_EXTRACTORS]] = Field(
        ["boxed", "hashes", "answer_is", "last_number"],
        description="reasoning_gym, dataset: how the final answer is found in a completion, "
                    "tried in order (domains/answers.py): boxed = last \\boxed{}, hashes = "
                    "after `####`, answer_is = after 'the answer is', regex = answer_regex, "
                    "last_number, last_line, whole = the stripped completion (the tiny model)",
        min_length=1,
    )
    answer_regex: str | None = Field(
        None, description="the `regex` extractor's pattern (group 1 = the answer)")
    think_tags: list[str] = Field(
        ["<think>", "</think>"],
        description="reasoning_gym, dataset: the (opening, closing) tags of a reasoning model's "
                    "thinking (Qwen3, DeepSeek-R1): the answer is looked for after the last "
                    "closing tag only, and a completion that opens the tag and never closes it "
                    "(cut off while thinking) has none (reason thinking_unfinished); [] = none")
    compare: Literal[VERIFY_COMPARES] = Field(  # type: ignore[valid-type]
        "auto",
        description="reasoning_gym, dataset: exact (normalised text), math (math-verify "
                    "equivalence: 1/2 = 0.5 = \\frac{1}{2}), task (reasoning-gym's own scorer, "
                    "partial credit); auto = task for reasoning_gym, math for dataset; judge (any "
                    "domain): an LLM judge scores each answer, [verify.judge]; reward_model (any "
                    "domain): a reward model scores each answer, [verify.reward_model]")
    judge: JudgeConfig = Field(JudgeConfig(), description="the LLM judge of compare = 'judge'")
    reward_model: RewardModelConfig = Field(
        RewardModelConfig(), description="the reward model of compare = 'reward_model'")
    reward_function: str | None = Field(
        None,
        description="'module:function', a TRL-style reward function (completions, the problem "
                    "row's columns as keywords -> floats in [0, 1] or None) judging every answer "
                    "in verify, GRPO and evaluate instead of the domain's verifier; imported "
                    "with the working directory on sys.path (domains/reward_function.py)")
    math_timeout_seconds: int = Field(
        5, ge=1, le=600, description="time limit of one math-verify parse or comparison")
    canary: int = Field(
        0, ge=0, le=100_000,
        description="rounds >= 1: problems with known answers (the domain generator's, never "
                    "held-out ones, drawn from the run's seed and the round) sampled with the "
                    "round's problems, judged like them and never trained on; the verify stage "
                    "records the verifier's false-positive and false-negative rates on them "
                    "with Wilson intervals (tasks/verifier_rates.py); 0 = none (default)")

    @model_validator(mode="after")
    def _one_verifier(self) -> VerifyConfig:
        if self.compare in MODEL_VERIFIERS and self.reward_function is not None:
            msg = (f"compare = {self.compare!r} and reward_function = {self.reward_function!r} "
                   "are two verifiers: choose one (unset reward_function or set another compare)")
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _reward_model_named(self) -> VerifyConfig:
        if self.compare == "reward_model" and self.reward_model.model_path is None:
            msg = ("compare = 'reward_model' needs a reward model: set "
                   "verify.reward_model.model_path to a sequence-classification model folder or "
                   "hub id (one label, e.g. a Skywork-Reward model); the run's model is none")
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _think_tags_paired(self) -> VerifyConfig:
        if self.think_tags and (len(self.think_tags) != 2 or not all(self.think_tags)):
            msg = (f"think_tags = {self.think_tags!r}: give two non-empty tags, opening and "
                   "closing (e.g. ['<think>', '</think>']), or [] for none")
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _regex_usable(self) -> VerifyConfig:
        import re

        if "regex" in self.extract and not self.answer_regex:
            msg = "extract names 'regex' but answer_regex is unset: set answer_regex = '...'"
            raise ValueError(msg)
        if self.answer_regex:
            try:
                re.compile(self.answer_regex)
            except re.error as exc:
                msg = f"answer_regex = {self.answer_regex!r} is not a valid regex: {exc}"
                raise ValueError(msg) from None
        return self


class SandboxConfig(Section):
    """`[sandbox]`: how model-written programs run (domains/sandbox/, docs/sandbox.md); read by
    the python_io domain only. The section is part of the domain's settings
    (configs/settings.py `DomainSettings`), so of the fingerprint of every stage that uses the
    domain, in every domain."""

    workers: int = Field(
        2, ge=1, le=256, description="pre-started sandbox workers (fork servers); one per core")
    cpu_seconds: float = Field(
        1.0, gt=0, le=60, description="CPU time of one program (user + system), seconds")
    wall_seconds: float = Field(
        2.0, gt=0, le=120, description="wall-clock time of one program, seconds")
    memory_mb: int = Field(
        256, ge=16, le=65_536, description="address space one program may add, MiB")
    max_file_bytes: int = Field(
        65_536, ge=0, le=1 << 30,
        description="largest file a program may write in its temporary folder, bytes")
    max_output_bytes: int = Field(
        4096, ge=64, le=1 << 20,
        description="most characters a program may print, and may return in all")
    tmpfs_mb: int = Field(
        16, ge=1, le=4096, description="size of the worker's private tmpfs (all program folders)")
    isolation: Literal["strict", "warn"] = Field(
        "strict",
        description="strict: refuse to run programs when an isolation mechanism (namespaces, "
                    "seccomp, uid drop) is missing; warn: run with a loud warning instead")

    @model_validator(mode="after")
    def _wall_covers_cpu(self) -> SandboxConfig:
        if self.wall_seconds < self.cpu_seconds:
            msg = (f"wall_seconds = {self.wall_seconds} must be >= cpu_seconds = "
                   f"{self.cpu_seconds} (a program cannot use more CPU than wall time)")
            raise ValueError(msg)
        return self


class PromptConfig(Section):
    """`[prompt]`: how prompts reach a pretrained chat model (domains/chat.py). With a
    `model.path` whose tokenizer has a chat template, every prompt is the template's rendering
    of a system message and a user message; the built-in tiny model (no template) keeps the
    domains' raw prompts. Part of the domain's settings (configs/settings.py `DomainSettings`),
    so of the fingerprint of every stage that uses the domain."""

    chat_template: Literal["auto", "never"] = Field(
        "auto",
        description="auto: render prompts with the model's chat template when its tokenizer has "
                    "one; never: the domains' raw prompts for every model")
    system: str = Field("", description="the system message of both roles; empty = none")
    instruction: str = Field(
        "", description="appended to the solver's question in its user message, e.g. the answer "
                        "format: 'Put your final answer in \\boxed{}.'")
    proposer_instruction: str = Field(
        "Write one new problem of difficulty level {level}. Reply with the problem only.",
        description="the proposer's user message; {level} is replaced by the requested level")
    stop: list[str] = Field(
        [], description="completions are cut before the first of these strings (solver, "
                        "proposer, held-out answers); their token counts stay as generated")
    answer_format: str = Field(
        "{answer}",
        description="how a reference is written where the solver trains on it (the warm-up, "
                    "too-hard problems) with the chat template in use, so it learns the format "
                    "`instruction` asks for, e.g. '\\boxed{{{answer}}}'; {answer} is the "
                    "reference")

    @field_validator("proposer_instruction")
    @classmethod
    def _level_placeholder_only(cls, value: str) -> str:
        return one_placeholder("proposer_instruction", value, "level")

    @field_validator("answer_format")
    @classmethod
    def _answer_placeholder_only(cls, value: str) -> str:
        return one_placeholder("answer_format", value, "answer")
