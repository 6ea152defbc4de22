"""Benchmark files (`[evaluate] benchmarks`): the figures of replayed answers exactly, the
training-leak check, the file checks, the fingerprint following the file's bytes, the refusal
of a benchmark that is a training file, the status block and the model-index entries."""

from __future__ import annotations

import json

import polars as pl
import pytest

from configs import ConfigError, DatasetConfig, load_config
from configs.settings import EvaluateSettings
from domains import get_domain
from domains.dataset import DatasetFileError
from flows.status_view import benchmark_lines
from models.rollout_types import Completion
from storage.audit.round_metrics import bootstrap_interval
from tasks import evaluate as evaluate_module
from tasks.benchmarks import read_benchmark, training_leaks
from tasks.context import Checkpoint, RunContext
from tasks.evaluate import benchmark_metrics
from tasks.model_card import add_benchmarks, eval_results, write_card
from tasks.stage import settings_fingerprint

QUESTIONS = {"What is 48 + 24?": "72", "What is 2 * 3?": "6", "What is 1 + 1?": "2"}


class Replay:
    """A backend answering each prompt with fixed completions, one per sample; it records the
    sampling params of each call."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers, self.params = answers, []

    def generate(self, prompts, params, progress=None):
        self.params.append(params)
        out = []
        for prompt in prompts:
            question = next(q for q in self.answers if q in prompt)
            out.append([Completion(text, 1) for text in self.answers[question][:params.n]])
        return out

    def close(self) -> None:
        pass


def _benchmark(tmp_path, rows=None, name="bench.jsonl"):
    path = tmp_path / name
    rows = rows if rows is not None else [{"question": q, "answer": a}
                                          for q, a in QUESTIONS.items()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


# two samples: 72 right twice, 6 right once, 2 never (one answer has no integer: reward 0)
ANSWERS = {"What is 48 + 24?": ["72", "72"], "What is 2 * 3?": ["5", "6"],
           "What is 1 + 1?": ["no idea", "3"]}


def test_benchmark_figures_of_replayed_answers(tmp_path):
    backend = Replay(ANSWERS)
    metrics = benchmark_metrics(
        backend, get_domain("arithmetic"), {"toy": _benchmark(tmp_path)}, DatasetConfig(),
        train_rows=None, max_new_tokens=8, samples=2, temperature=0.7, seed=5, checkpoint="c",
        run_id="r", round_index=1)
    (params,) = backend.params  # the run's evaluate sampling: n samples at its temperature
    assert (params.n, params.temperature, params.seed, params.greedy) == (2, 0.7, 5, False)
    assert metrics["benchmark/toy/accuracy"] == pytest.approx(3 / 6)
    assert metrics["benchmark/toy/pass_at_1"] == pytest.approx(3 / 6)
    assert metrics["benchmark/toy/pass_at_2"] == pytest.approx(2 / 3)
    assert metrics["benchmark/toy/samples"] == 2.0
    assert (metrics["benchmark/toy/accuracy_low"], metrics["benchmark/toy/accuracy_high"]) == \
        pytest.approx(bootstrap_interval([1.0, 0.5, 0.0]))
    assert not any(key.endswith(("in_training", "overlap")) for key in metrics)  # no train rows


def test_one_greedy_answer_by_default(tmp_path):
    backend = Replay(ANSWERS)
    metrics = benchmark_metrics(
        backend, get_domain("arithmetic"), {"toy": _benchmark(tmp_path)}, DatasetConfig(),
        train_rows=None, max_new_tokens=8, samples=1, temperature=0.0, seed=5, checkpoint="c",
        run_id="r", round_index=1)
    assert backend.params[0].greedy and backend.params[0].n == 1
    assert metrics["benchmark/toy/accuracy"] == pytest.approx(1 / 3)  # 72 only
    assert "benchmark/toy/pass_at_1" not in metrics


def test_a_benchmark_question_in_the_training_rows_is_counted(tmp_path):
    items = read_benchmark(_benchmark(tmp_path), DatasetConfig())
    rows = pl.DataFrame({"prompt": ["<solve>What is 2 * 3? Answer: ", "<solve>7+8"],
                         "completion": ["6", "15"], "rejected": [None, None],
                         "problem": ['{"text": "What is 2 * 3?"}', '{"text": "7+8"}']})
    leaks = training_leaks("toy", items, rows)
    assert leaks["benchmark/toy/in_training"] == 1.0
    assert leaks["benchmark/toy/overlap"] == 1.0
    clean = training_leaks("toy", items, rows.filter(pl.col("completion") == "15"))
    assert clean == {"benchmark/toy/in_training": 0.0, "benchmark/toy/overlap": 0.0}
    assert training_leaks("toy", items, None) == {}  # the base model's baseline


def test_a_bad_benchmark_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "What is 1 + 1?", "answer": "2"}\nnot json\n')
    with pytest.raises(DatasetFileError, match=r"bad.jsonl line 2: not JSON"):
        read_benchmark(str(path), DatasetConfig())
    long = _benchmark(tmp_path, [{"question": "x" * 50, "answer": "1"}], "long.jsonl")
    with pytest.raises(DatasetFileError, match=r"long.jsonl line 1: the question is 50 "
                                               r"characters, more than .*max_question_chars"):
        read_benchmark(long, DatasetConfig(max_question_chars=40))
    twice = _benchmark(tmp_path, [{"question": "What is 1+1?", "answer": "2"},
                                  {"question": "what is  1+1?", "answer": "2"}], "twice.jsonl")
    with pytest.raises(DatasetFileError, match=r"twice.jsonl: the question .* more than once"):
        read_benchmark(twice, DatasetConfig())


def _fingerprint(config) -> str:
    return settings_fingerprint("evaluate", evaluate_module.VERSION,
                                EvaluateSettings.from_config(config), 0, {"checkpoint": "c"})


def test_editing_a_benchmark_file_changes_the_evaluate_fingerprint(tmp_path):
    path = _benchmark(tmp_path)
    config = load_config(None, {"evaluate.benchmarks": {"toy": path}})
    before = _fingerprint(config)
    assert _fingerprint(config) == before
    assert before != _fingerprint(load_config(None))
    _benchmark(tmp_path, [{"question": "What is 2 * 3?", "answer": "7"}])  # an answer corrected
    assert _fingerprint(config) != before


def test_a_missing_benchmark_file_is_one_line_naming_the_key(tmp_path):
    config = load_config(None, {"evaluate.benchmarks": {"toy": str(tmp_path / "no.jsonl")}})
    with pytest.raises(FileNotFoundError, match=r"evaluate.benchmarks.toy = .*no.jsonl.*: "
                                                r"cannot read it"):
        EvaluateSettings.from_config(config)


def test_a_benchmark_that_is_a_training_file_is_refused(tmp_path):
    train = _benchmark(tmp_path, name="train.jsonl")
    with pytest.raises(ConfigError, match=r"evaluate.benchmarks.gsm8k = .*train.jsonl.* is the "
                                          r"training file .*train.jsonl.* of "
                                          r"domain.dataset.paths"):
        load_config(None, {"domain.name": "dataset", "domain.dataset.paths": [train],
                           "evaluate.benchmarks": {"gsm8k": train}})
    (tmp_path / "link.jsonl").symlink_to(train)  # the same file under another name
    with pytest.raises(ConfigError, match=r"is the training file"):
        load_config(None, {"domain.name": "dataset", "domain.dataset.paths": [train],
                           "evaluate.benchmarks": {"gsm8k": str(tmp_path / "link.jsonl")}})


@pytest.mark.parametrize(("benchmarks", "message"), [
    ({"gsm 8k": "a.jsonl"}, r"benchmark name 'gsm 8k'"),
    ({"gsm8k": "a.parquet"}, r"benchmarks.gsm8k = 'a.parquet': .* name a .jsonl file"),
])
def test_benchmark_names_and_file_types_are_checked(benchmarks, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"evaluate.benchmarks": benchmarks})


def test_the_stage_records_benchmarks_beside_the_heldout_figures(tmp_path, monkeypatch):
    domain = get_domain("arithmetic")
    items = domain.heldout(1)
    answers = {**ANSWERS, **{p.text: [p.reference] for p in items}}  # held-out all right
    monkeypatch.setattr("models.backends.backend_for", lambda *_: Replay(answers))
    train = tmp_path / "train_rows.parquet"
    pl.DataFrame({"prompt": ["What is 1 + 1?"], "completion": ["2"], "rejected": [None],
                  "problem": ['{"text": "What is 1 + 1?"}']}).write_parquet(train)

    def metrics(overrides, train_rows=None):
        config = load_config(None, overrides)
        ctx = RunContext(tmp_path / "data", "r", config)
        result = evaluate_module.evaluate_checkpoint(
            ctx, EvaluateSettings.from_config(config), 1, Checkpoint(tmp_path, "fp"), items, {},
            stage="evaluate", train_rows=train_rows)
        return result.metrics

    plain = metrics({})
    assert plain["accuracy"] == 1.0 and not any(k.startswith("benchmark/") for k in plain)
    with_benchmark = metrics({"evaluate.benchmarks": {"toy": _benchmark(tmp_path)}}, train)
    assert {k: v for k, v in with_benchmark.items() if not k.startswith("benchmark/")} == plain
    assert with_benchmark["benchmark/toy/accuracy"] == pytest.approx(1 / 3)
    assert with_benchmark["benchmark/toy/in_training"] == 1.0


def test_status_shows_a_block_per_benchmark():
    rows = [{"round": 0, "stage": "baseline", "name": "benchmark/toy/accuracy", "value": 0.1},
            {"round": 0, "stage": "baseline", "name": "benchmark/toy/accuracy_low",
             "value": 0.05},
            {"round": 0, "stage": "baseline", "name": "benchmark/toy/accuracy_high",
             "value": 0.2},
            {"round": 1, "stage": "evaluate", "name": "benchmark/toy/accuracy", "value": 0.25},
            {"round": 1, "stage": "evaluate", "name": "benchmark/toy/pass_at_2", "value": 0.4},
            {"round": 1, "stage": "evaluate", "name": "benchmark/toy/pass_at_4", "value": 0.5},
            {"round": 1, "stage": "evaluate", "name": "benchmark/toy/in_training", "value": 0.0},
            {"round": 1, "stage": "evaluate", "name": "accuracy", "value": 0.9}]
    assert benchmark_lines(rows) == [
        "benchmarks (accuracy = pass@1, 95% interval; in training = questions in the train rows)",
        "  toy  round  accuracy  interval        pass@k          in training",
        "        base     0.100  [0.050, 0.200]  -                         -",
        "           1     0.250  -               pass@4 0.500              0",
    ]
    assert benchmark_lines(rows[-1:]) == []  # no benchmarks: no block


def test_the_model_card_has_one_model_index_entry_per_benchmark(tmp_path):
    write_card(tmp_path, {"run_id": "r", "round": 1, "stage": "train", "fingerprint": "f",
                          "evaluation": {"heldout_accuracy": 0.5, "promoted": True,
                                         "reason": "accuracy 0.5 >= 0.4"}})
    add_benchmarks(tmp_path, {"benchmark/gsm8k/accuracy": 0.25,
                              "benchmark/gsm8k/accuracy_low": 0.2,
                              "benchmark/gsm8k/accuracy_high": 0.3,
                              "benchmark/math/accuracy": 0.1, "benchmark/math/accuracy_low": None,
                              "benchmark/math/accuracy_high": None})
    from tasks.model_card import read_meta

    meta = read_meta(tmp_path)
    assert meta["benchmarks"]["gsm8k"] == {"accuracy": 0.25, "accuracy_low": 0.2,
                                           "accuracy_high": 0.3}
    heldout, gsm8k, math = eval_results(meta)
    assert heldout.metric_value == 0.5
    assert (gsm8k.dataset_name, gsm8k.metric_value, gsm8k.metric_args) == (
        "gsm8k", 0.25, {"interval": [0.2, 0.3]})
    assert (math.dataset_name, math.metric_value, math.metric_args) == ("math", 0.1, None)
    assert "Benchmark `gsm8k`: accuracy 0.250." in (tmp_path / "README.md").read_text()
    assert add_benchmarks(tmp_path / "no-card", {"benchmark/x/accuracy": 1.0}) is None


def _dataset_config(tmp_path, benchmark: str | None, **overrides):
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i), "level": 1}
            for i in range(30)] + [{"question": "What is 48 + 24?", "answer": "72", "level": 1}]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    keys = {"domain.name": "dataset", "domain.min_level": 1, "domain.max_level": 1,
            "domain.seed_problems": 64, "domain.seed_max_level": 1,
            "domain.heldout_per_level": 2,
            "domain.dataset": {"paths": [str(train)], "heldout_fraction": 0.1}, **overrides}
    if benchmark is not None:
        keys["evaluate.benchmarks"] = {"toy": benchmark}
    return load_config(None, keys)


def test_synthesize_drops_benchmark_questions_so_they_are_never_trained_on(tmp_path):
    from configs.settings import stage_settings
    from tasks.synthesize import synthesize_round

    config = _dataset_config(tmp_path, _benchmark(tmp_path))
    ctx = RunContext(data_root=tmp_path / "data", run_id="r", config=config)
    settings = stage_settings(config, "synthesize", 0)
    out = synthesize_round(ctx, settings, 0, Checkpoint(tmp_path / "none", "c"), [], [], "fp")
    proposals, problems = out.datasets["proposals"], out.datasets["problems"]
    dropped = {p["text"] for p in proposals if p["drop_reason"] == "benchmark"}
    plain_config = _dataset_config(tmp_path, None)
    plain = synthesize_round(RunContext(data_root=tmp_path / "plain", run_id="r",
                                        config=plain_config),
                             stage_settings(plain_config, "synthesize", 0),
                             0, Checkpoint(tmp_path / "none", "c"), [], [], "fp")
    admitted = {p["text"] for p in plain.datasets["problems"]}
    # without the benchmark, the seed problems hold two of its questions (1 + 1 and 48 + 24);
    # with it, exactly those are dropped and the rest is admitted as before
    assert dropped == admitted & set(QUESTIONS) == {"What is 1 + 1?", "What is 48 + 24?"}
    assert {p["text"] for p in problems} == admitted - dropped


def test_admission_matches_benchmark_questions_case_and_spacing_aside(tmp_path):
    from tasks.benchmarks import benchmark_questions
    from tasks.synthesize import admit, generator_fill, novel_texts

    config = _dataset_config(tmp_path, None)
    domain = get_domain("dataset", config)
    questions = benchmark_questions({"toy": _benchmark(tmp_path)}, DatasetConfig())
    copies = ["what is 48 +  24?", "  WHAT IS 2 * 3?", "What is 5 + 5?"]
    proposals, problems = admit(domain, [("<propose>L1:", t) for t in copies],
                                source="proposer", seen=set(), heldout=set(), run_id="r",
                                round_index=1, benchmark=questions)
    assert [p["drop_reason"] for p in proposals] == ["benchmark", "benchmark", None]
    assert [p["text"] for p in problems] == ["What is 5 + 5?"]
    pairs = [("p", t) for t in copies]
    assert novel_texts(domain, pairs, set(), set(), questions) == {"What is 5 + 5?"}
    fill = generator_fill(domain, missing=100, exclude=set(), levels=[1], seed=0,
                          batch=64, max_batches=3, benchmark=questions)
    assert "What is 48 + 24?" not in {text for _, text in fill}


def test_benchmark_files_are_synthesize_inputs_only_when_there_are_some(tmp_path):
    from configs.settings import SynthesizeSettings
    from tasks.synthesize import synthesize_inputs

    path = _benchmark(tmp_path)
    with_file = SynthesizeSettings.from_config(load_config(None, {"evaluate.benchmarks":
                                                                  {"toy": path}}))
    without = SynthesizeSettings.from_config(load_config(None))
    # the paths do not enter the settings' dump; the files' bytes are inputs
    assert with_file.model_dump(mode="json") == without.model_dump(mode="json")
    checkpoint = Checkpoint(tmp_path, "c")
    assert synthesize_inputs(checkpoint, [], [], without.benchmarks) == {"checkpoint": "c"}
    inputs = synthesize_inputs(checkpoint, [], [], with_file.benchmarks)
    _benchmark(tmp_path, [{"question": "What is 2 * 3?", "answer": "6"}])  # edited
    assert synthesize_inputs(checkpoint, [], [], with_file.benchmarks)["benchmark_toy"] != \
        inputs["benchmark_toy"]
