"""A scripted LLM judge for the judge tests: its backend marks an arithmetic answer right or
wrong (PASS / FAIL) from the prompt, so a run's rewards are real and the gates pass; the judge's
tokenizer and chat template are the tiny chat model's of tests/models. The `judge_folder`
fixture (tests/conftest.py) puts it in place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from configs import load_config
from models.rollout_types import Completion, SamplingParams
from storage.datasets import write_atomic

ASKED = re.compile(r"Question: (?P<question>.*?)=?\s*\n\nAnswer: (?P<answer>.*?)\n\n", re.S)


class ArithmeticJudge:
    """Replies PASS when the prompt's answer is the value of its question (digits and + - *),
    else FAIL, and "no idea" to a question it cannot read; every call is recorded in `CALLS`
    (all instances: a resume builds a new judge)."""

    CALLS: list[int] = []

    def generate(self, prompts: list[str], params: SamplingParams,
                 progress=None) -> list[list[Completion]]:
        assert params.greedy
        ArithmeticJudge.CALLS.append(len(prompts))
        return [[Completion(text=self.reply(p), tokens=2)] for p in prompts]

    @staticmethod
    def reply(prompt: str) -> str:
        if "\n\nCriteria:" in prompt:  # asked for a question's rubric (rubrics = true)
            question = re.search(r"Question: (.*?)=?\s*\n", prompt)[1]
            return f" 1. The answer is the value of {question}.\n2. A bare integer."
        asked = ASKED.search(prompt)
        if asked is None or not re.fullmatch(r"[\d+\-* ()]+", asked["question"]):
            return "no idea"
        value = eval(asked["question"], {"__builtins__": {}})  # noqa: S307 - digits and + - *
        return "PASS" if asked["answer"].strip() == str(value) else "FAIL"

    def close(self) -> None:
        pass


def scripted_judge_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny chat model's folder as the judge's (its tokenizer renders the prompts), with the
    scripted backend in place of its model (the `judge_folder` fixture, tests/conftest.py)."""
    from models import backends
    from tests.models.chat_model import build_chat_model

    folder = build_chat_model(tmp_path / "judge")
    real = backends.make_backend

    def make_backend(name: str, checkpoint: Path, **options: object):
        if Path(checkpoint) == folder:
            return ArithmeticJudge()
        return real(name, checkpoint, **options)  # the run's own sampler

    monkeypatch.setattr(backends, "make_backend", make_backend)
    ArithmeticJudge.CALLS.clear()
    return folder


def judged_config(folder: Path, **overrides: object):
    return load_config(None, {"verify.compare": "judge", "verify.judge.model_path": str(folder),
                              "verify.judge.scale": "pass_fail", **overrides})


def judged_files(tmp_path: Path, completions: list[tuple[str, str]]) -> dict[str, Path]:
    problems = [{"problem_id": f"p{i}", "run_id": "r", "round": 1, "text": text,
                 "reference": str(eval(text)), "level": 1, "source": "generator",  # noqa: S307
                 "proposal_id": f"q{i}", "task": None, "payload": None}
                for i, text in enumerate(dict.fromkeys(t for t, _ in completions))]
    ids = {p["text"]: p["problem_id"] for p in problems}
    rollouts = [{"rollout_id": f"c{i}", "run_id": "r", "round": 1, "problem_id": ids[text],
                 "sample_index": i, "prompt": f"<solve>{text}=", "completion": answer,
                 "completion_tokens": 1, "checkpoint": "k"}
                for i, (text, answer) in enumerate(completions)]
    return {kind: write_atomic(kind, rows, tmp_path / f"{kind}.parquet").path
            for kind, rows in (("problems", problems), ("rollouts", rollouts))}
