"""Alarms for a loop that fools itself: four per-round signs, measured every round, each an
optional block on promotion (`[alarms]`, configs/operations.py `AlarmsConfig`).

A self-improvement loop grades itself: its proposer writes the problems, its own samples (or
votes) decide what is right, and the rewards it logs can climb while the model gets no better.
Each alarm compares what the loop says about itself with something it cannot write:

    reward_without_accuracy  the training reward (verify's `mean_reward`: the incumbent's
                             success on the round's own problems) rose by >= min_reward_rise
                             from round r - window to round r, while the held-out accuracy of the
                             rounds' candidates (evaluate's `accuracy`) rose by <= max_accuracy_rise
    novelty_collapse         the proposer's novelty (curate's `proposer_novelty`: the share of the
                             round's valid proposer samples admitted as new problems, not repeats
                             of this or earlier rounds nor held-out texts) is < min_proposer_novelty
    heldout_leak             a held-out question reached the round's training rows: curate's
                             `heldout_overlap` (the largest share of a held-out question's
                             character n-grams found in the rows' prompts, completions, rejected
                             answers and problem texts) is >= max_heldout_overlap
    label_accuracy_drop      the majority labels' accuracy against the references (verify's
                             `label_precision`, majority labels with references only) fell by
                             >= max_label_accuracy_drop from round r - window to round r

The trends compare rounds >= 1 (round 0 is the warm-up's untrained single samples). An alarm
without its figures (no proposer in the round, reference labels, the first rounds of a trend, a
stage recorded before these metrics existed) is not measured: it neither fires nor blocks.

Promote reads the figures from the catalog's metrics of rounds 0..r (`Catalog.round_metrics`),
records per alarm `alarm_<name>` (1 fired, 0 not; absent when not measured) and the figures
(`alarm_reward_rise`, `alarm_accuracy_rise`, `alarm_proposer_novelty`, `alarm_heldout_overlap`,
`alarm_label_precision_drop`), and a fired alarm named in `block` turns the decision into a
rejection whose one-line reason ends with it (tasks/promote.py `with_alarms`):

    "accuracy 0.242 >= 0.200 - 0.000; alarm heldout_leak: a held-out question has 1.00 of its
     50-character n-grams in the training rows >= 0.80"

The held-out overlap follows PaLM's contamination check (a held-out item is dirty when >= 70 %
of its 8-grams occur in the training data) over characters instead of tokens, so it needs no
tokenizer: texts are lower-cased with every whitespace removed, and a question shorter than
`LEAK_NGRAM` characters (every arithmetic problem) has one n-gram, itself, which only a whole
training text equal to it matches, so `12+37+5` does not leak `37+5`. Departure: the share is
over all training texts together, not per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from configs import AlarmsConfig
from tasks.curriculum.columns import lazy_frame
from tasks.curriculum.dedup import shingle_hashes

LEAK_NGRAM = 50  # characters per n-gram of the held-out overlap (about PaLM's 8 tokens)
LEAK_CHUNK_CHARS = 1 << 22  # characters of training text hashed at once (~200 MB of arrays)
REPEATS = ("duplicate", "near_duplicate", "heldout", "benchmark")  # valid, not new
_EPS = 1e-9  # the figures are ratios of counts: a rise of exactly the bar counts

Metrics = dict[tuple[int, str, str], float]  # (round, stage, name) -> value


@dataclass(frozen=True)
class Alarm:
    """One alarm in one round: whether it fired, a one-line reason (what was measured against
    which bar; "not measured: ..." without its figures) and the figures it recorded."""

    name: str
    fired: bool
    reason: str
    figures: dict[str, float]
    measured: bool = True


# ---- the figures curate records -------------------------------------------------------------


def proposer_novelty(proposals: Any) -> float | None:
    """The share of the valid proposer samples (source "proposer", parsed and executed) that
    were admitted as new problems; None when the round has none (round 0, the baselines).

    `proposals`: the round's proposals dataset (a path, frame or rows)."""
    frame = lazy_frame(proposals, {"source": pl.String, "drop_reason": pl.String})
    reason = pl.col("drop_reason")
    counts = frame.filter((pl.col("source") == "proposer")
                          & (reason.is_null() | reason.is_in(REPEATS))).select(
        pl.len().alias("valid"), reason.is_null().sum().alias("admitted")).collect()
    valid, admitted = counts.row(0)
    return admitted / valid if valid else None


def normalized(texts: pl.Series) -> list[str]:
    """Texts as the overlap compares them: lower case, every whitespace removed."""
    return texts.fill_null("").str.to_lowercase().str.replace_all(r"\s+", "").to_list()


def heldout_overlap(heldout: Sequence[str], training: pl.Series, *,
                    ngram: int = LEAK_NGRAM) -> np.ndarray:
    """Per held-out question, the share of its distinctive character n-grams (`normalized`; a
    question shorter than `ngram` is one n-gram, itself; `distinctive`: not in another held-out
    question) found among the n-grams of the `training` texts, hashed about `LEAK_CHUNK_CHARS`
    characters at a time (one n-gram hash per character: tasks/curriculum/dedup.py
    `shingle_hashes`), so long completions stay in bounded memory."""
    questions = normalized(pl.Series(list(heldout), dtype=pl.String))
    hashes, offsets = shingle_hashes(questions, ngram)
    found = np.zeros(len(hashes), dtype=bool)
    ends = training.fill_null("").str.len_chars().cum_sum() // LEAK_CHUNK_CHARS
    for part in pl.DataFrame({"text": training, "chunk": ends}).partition_by(
            "chunk", maintain_order=True):
        chunk, _ = shingle_hashes(normalized(part["text"]), ngram)
        found |= np.isin(hashes, chunk)
    counts = np.diff(np.append(offsets, len(hashes)))
    owner = np.repeat(np.arange(len(questions)), counts)
    kept = distinctive(hashes, owner, len(questions)).astype(float)
    return (np.bincount(owner, weights=found * kept, minlength=len(questions))
            / np.maximum(np.bincount(owner, weights=kept, minlength=len(questions)), 1))


def distinctive(hashes: np.ndarray, owner: np.ndarray, questions: int) -> np.ndarray:
    """Which n-grams of the held-out questions (`hashes`, each of question `owner`) tell their
    question apart: those no other held-out question has. A task's template (reasoning-gym's
    "Spell this word backward (example: sun -> nus): ") is in every question of the task, and
    so in every training row of it; only what follows it can leak. A question with no n-gram of
    its own keeps all of them."""
    pairs = pl.DataFrame({"hash": hashes, "owner": owner}).unique()
    shared = pairs.group_by("hash").len().filter(pl.col("len") > 1)["hash"].to_numpy()
    own = ~np.isin(hashes, shared)
    has_own = np.bincount(owner, weights=own, minlength=questions) > 0
    return own | ~has_own[owner]


def training_texts(train_rows: pl.DataFrame) -> pl.Series:
    """Every text of the training rows a held-out question could leak into: prompts,
    completions, rejected answers and the solver rows' problem texts (nulls left out)."""
    problem_text = pl.col("problem").str.json_path_match("$.text")
    return pl.concat([train_rows.select(pl.col(c).alias("text"))["text"]
                      for c in ("prompt", "completion", "rejected")]
                     + [train_rows.select(problem_text.alias("text"))["text"]]).drop_nulls()


def leak_metrics(heldout: Sequence[str], train_rows: pl.DataFrame) -> dict[str, float]:
    """curate's `heldout_overlap` (the largest share of one held-out question's n-grams found in
    the training rows) and `heldout_in_training` (questions found whole); nothing when there
    is no held-out question."""
    if not heldout:
        return {}
    shares = heldout_overlap(heldout, training_texts(train_rows))
    return {"heldout_overlap": float(shares.max()),
            "heldout_in_training": int((shares >= 1.0 - _EPS).sum())}


# ---- the alarms promote checks ---------------------------------------------------------------


def trend(metrics: Metrics, stage: str, name: str, round_index: int,
          window: int) -> tuple[float, float] | None:
    """(value in round r - window, value in round r) of a metric; None when either is missing
    or r - window is the warm-up."""
    before = (round_index - window, stage, name)
    now = (round_index, stage, name)
    if before[0] < 1 or before not in metrics or now not in metrics:
        return None
    return metrics[before], metrics[now]


def not_measured(name: str, why: str) -> Alarm:
    return Alarm(name, False, f"not measured: {why}", {}, measured=False)


def reward_without_accuracy(metrics: Metrics, round_index: int, cfg: AlarmsConfig) -> Alarm:
    """The training reward rose over the window while held-out accuracy stayed flat or fell."""
    name = "reward_without_accuracy"
    reward = trend(metrics, "verify", "mean_reward", round_index, cfg.window)
    accuracy = trend(metrics, "evaluate", "accuracy", round_index, cfg.window)
    if reward is None or accuracy is None:
        return not_measured(name, f"the trend from round {round_index - cfg.window} to "
                                  f"{round_index} needs both >= 1, each with a training reward "
                                  "and a candidate")
    reward_rise, accuracy_rise = reward[1] - reward[0], accuracy[1] - accuracy[0]
    fired = (reward_rise >= cfg.min_reward_rise - _EPS
             and accuracy_rise <= cfg.max_accuracy_rise + _EPS)
    reason = (f"training reward {reward_rise:+.3f} over {cfg.window} round(s) "
              f"{'>=' if reward_rise >= cfg.min_reward_rise - _EPS else '<'} "
              f"{cfg.min_reward_rise:+.3f} while held-out accuracy {accuracy_rise:+.3f} "
              f"{'<=' if accuracy_rise <= cfg.max_accuracy_rise + _EPS else '>'} "
              f"{cfg.max_accuracy_rise:+.3f}")
    return Alarm(name, fired, reason, {"alarm_reward_rise": reward_rise,
                                       "alarm_accuracy_rise": accuracy_rise})


def novelty_collapse(metrics: Metrics, round_index: int, cfg: AlarmsConfig) -> Alarm:
    """Too few of the proposer's valid samples were new problems."""
    name = "novelty_collapse"
    novelty = metrics.get((round_index, "curate", "proposer_novelty"))
    if novelty is None:
        return not_measured(name, "no proposer samples this round")
    fired = novelty < cfg.min_proposer_novelty - _EPS
    reason = (f"proposer novelty {novelty:.3f} {'<' if fired else '>='} "
              f"{cfg.min_proposer_novelty:.3f} (new problems / valid proposer samples)")
    return Alarm(name, fired, reason, {"alarm_proposer_novelty": novelty})


def heldout_leak(metrics: Metrics, round_index: int, cfg: AlarmsConfig) -> Alarm:
    """A held-out question is (nearly) in the round's training rows."""
    name = "heldout_leak"
    overlap = metrics.get((round_index, "curate", "heldout_overlap"))
    if overlap is None:
        return not_measured(name, "the round's curate stage recorded no heldout_overlap")
    fired = overlap >= cfg.max_heldout_overlap - _EPS
    reason = (f"a held-out question has {overlap:.2f} of its {LEAK_NGRAM}-character n-grams in "
              f"the training rows {'>=' if fired else '<'} {cfg.max_heldout_overlap:.2f}")
    return Alarm(name, fired, reason, {"alarm_heldout_overlap": overlap})


def label_accuracy_drop(metrics: Metrics, round_index: int, cfg: AlarmsConfig) -> Alarm:
    """The majority labels' accuracy against the references fell over the window."""
    name = "label_accuracy_drop"
    accuracy = trend(metrics, "verify", "label_precision", round_index, cfg.window)
    if accuracy is None:
        return not_measured(name, f"the trend from round {round_index - cfg.window} to "
                                  f"{round_index} needs both >= 1, each with majority labels "
                                  "and references")
    drop = accuracy[0] - accuracy[1]
    fired = drop >= cfg.max_label_accuracy_drop - _EPS
    reason = (f"majority-label accuracy {accuracy[0]:.3f} -> {accuracy[1]:.3f} over "
              f"{cfg.window} round(s): a drop of {drop:.3f} {'>=' if fired else '<'} "
              f"{cfg.max_label_accuracy_drop:.3f}")
    return Alarm(name, fired, reason, {"alarm_label_precision_drop": drop})


CHECKS = (reward_without_accuracy, novelty_collapse, heldout_leak, label_accuracy_drop)


def round_alarms(metrics: Metrics, round_index: int, cfg: AlarmsConfig) -> list[Alarm]:
    """Every alarm of round `round_index` from the run's metrics of rounds 0..round_index."""
    return [check(metrics, round_index, cfg) for check in CHECKS]


def alarm_metrics(alarms: Sequence[Alarm]) -> dict[str, float]:
    """The promote metrics of the alarms: `alarm_<name>` (1 fired, 0 not) of each measured one
    and the figures."""
    out: dict[str, float] = {}
    for alarm in alarms:
        if alarm.measured:
            out[f"alarm_{alarm.name}"] = float(alarm.fired)
            out.update(alarm.figures)
    return out


def blocking(alarms: Sequence[Alarm], cfg: AlarmsConfig) -> list[Alarm]:
    """The fired alarms that `cfg.block` names: each keeps the candidate from promotion."""
    return [alarm for alarm in alarms if alarm.fired and alarm.name in cfg.block]
