"""Promotion: the pure decision (table-driven), and a round with no training rows in a tiny run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from configs import ConfigError, PromoteConfig, load_config
from storage.audit.queries import labels
from storage.audit.snapshot import open_run
from storage.catalog import Catalog
from tasks.promote import level_flips, promotion_decision

T, F = True, False


def evals(marks: dict[int, list[bool]]) -> list[dict]:
    """Eval rows: item i of level L is `L-i`; the same ids in incumbent and candidate sets."""
    return [{"item_id": f"{level}-{i}", "level": level, "correct": ok}
            for level, oks in marks.items() for i, ok in enumerate(oks)]


@pytest.mark.parametrize(
    ("candidate", "incumbent", "cfg", "promoted", "reason"),
    [
        # default: promote when candidate >= incumbent (a tie promotes, as before)
        ({2: [T, T, F, F]}, {2: [F, F, T, T]}, {}, T, "accuracy 0.500 >= 0.500 - 0.000"),
        ({2: [T, F, F, F]}, {2: [T, T, F, F]}, {}, F, "accuracy 0.250 < 0.500 - 0.000"),
        # margin: an allowed drop
        ({2: [T, F, F, F]}, {2: [T, T, F, F]}, {"margin": 0.25}, T,
         "accuracy 0.250 >= 0.500 - 0.250"),
        ({2: [F, F, F, F]}, {2: [T, T, F, F]}, {"margin": 0.25}, F,
         "accuracy 0.000 < 0.500 - 0.250"),
        # min_gain: a required gain; a tie no longer promotes
        ({2: [T, T, F, F]}, {2: [T, T, F, F]}, {"min_gain": 0.1}, F,
         "accuracy 0.500 < 0.500 + 0.100"),
        ({2: [T, T, T, F]}, {2: [T, T, F, F]}, {"min_gain": 0.1}, T,
         "accuracy 0.750 >= 0.500 + 0.100"),
        # 0.2 + 0.1 is 0.30000000000000004 in floats: 3/10 still meets it
        ({2: [T] * 3 + [F] * 7}, {2: [T] * 2 + [F] * 8}, {"min_gain": 0.1}, T,
         "accuracy 0.300 >= 0.200 + 0.100"),
        # per level: overall better, but half of level 3 flips pass -> fail
        ({2: [T, T, T, T], 3: [T, T, F, F]}, {2: [F, F, F, F], 3: [T, T, T, T]},
         {"max_level_regression": 0.25}, F,
         "accuracy 0.750 >= 0.500 - 0.000; level 3: 2/4 items pass->fail > 0.250"),
        ({2: [T, T, T, T], 3: [T, T, F, F]}, {2: [F, F, F, F], 3: [T, T, T, T]},
         {"max_level_regression": 0.5}, T,
         "accuracy 0.750 >= 0.500 - 0.000; worst level 3: 2/4 items pass->fail <= 0.500"),
        # flip-based, not accuracy-based: level 2 keeps its accuracy but swaps which items pass
        ({2: [F, F, T, T], 3: [T, T]}, {2: [T, T, F, F], 3: [T, T]},
         {"max_level_regression": 0.25}, F,
         "accuracy 0.667 >= 0.667 - 0.000; level 2: 2/4 items pass->fail > 0.250"),
        # both checks fail: both reasons
        ({2: [F, F], 3: [F, F]}, {2: [T, T], 3: [F, F]}, {"max_level_regression": 0.0}, F,
         "accuracy 0.000 < 0.500 - 0.000; level 2: 2/2 items pass->fail > 0.000"),
        # nothing flips, limit 0: promoted
        ({2: [T, T], 3: [T, F]}, {2: [T, F], 3: [F, F]}, {"max_level_regression": 0.0}, T,
         "accuracy 0.750 >= 0.250 - 0.000; worst level 2: 0/2 items pass->fail <= 0.000"),
    ],
)
def test_promotion_decision(candidate, incumbent, cfg, promoted, reason):
    decision = promotion_decision(evals(candidate), evals(incumbent), PromoteConfig(**cfg))
    assert (decision.promoted, decision.reason) == (promoted, reason)


def test_level_flips_match_items_by_id_not_position():
    incumbent = evals({2: [T, T, F]})
    candidate = list(reversed(evals({2: [F, T, T]})))  # item 2-0 fails now, 2-2 passes now
    assert level_flips(candidate, incumbent) == {2: (1, 3)}


def test_margin_and_min_gain_together_is_a_config_error():
    with pytest.raises(ConfigError, match="margin = 0.1 and min_gain = 0.1: set one of them"):
        load_config(None, {"promote.margin": 0.1, "promote.min_gain": 0.1})


# ---- [promote] test: a paired test instead of the measured accuracies ----------------------

# 200 items: the incumbent passes 100; the candidate passes the same plus `gained`, less `lost`
def paired_evals(gained: int, lost: int) -> tuple[list[dict], list[dict]]:
    incumbent = [i < 100 for i in range(200)]
    candidate = [(ok and i >= lost) or (not ok and i < 100 + gained)
                 for i, ok in enumerate(incumbent)]
    return (evals({2: candidate[:100], 3: candidate[100:]}),
            evals({2: incumbent[:100], 3: incumbent[100:]}))


@pytest.mark.parametrize(
    ("gained", "lost", "cfg", "promoted", "start", "end"),
    [
        # +0.010 (2 items): promoted by the measured accuracies, not by either test
        (2, 0, {}, T, "accuracy 0.510 >= 0.500 - 0.000", ""),
        (2, 0, {"test": "paired_bootstrap"}, F, "accuracy 0.510 vs 0.500: +0.010 [",
         "> 0.050 (paired bootstrap, 200 items, 90% interval)"),
        (2, 0, {"test": "mcnemar"}, F, "accuracy 0.510 vs 0.500: +0.010 [",
         "p = 0.250 > 0.050 (McNemar exact, 200 items, 90% interval)"),
        # +0.060 (12 items): a gain either test finds
        (12, 0, {"test": "paired_bootstrap"}, T, "accuracy 0.560 vs 0.500: +0.060 [",
         "<= 0.050 (paired bootstrap, 200 items, 90% interval)"),
        (12, 0, {"test": "mcnemar"}, T, "accuracy 0.560 vs 0.500: +0.060 [",
         "p = 2.4e-04 <= 0.050 (McNemar exact, 200 items, 90% interval)"),
        # a margin: non-inferiority; 5 items each way is no gain but within -0.05
        (5, 5, {"test": "paired_bootstrap"}, F, "accuracy 0.500 vs 0.500: +0.000 [", ""),
        (5, 5, {"test": "paired_bootstrap", "margin": 0.05}, T, "accuracy 0.500 vs 0.500",
         "<= 0.050 for a gain > -0.050 (paired bootstrap, 200 items, 90% interval)"),
        # min_gain: the gain must exceed it, not just 0
        (12, 0, {"test": "paired_bootstrap", "min_gain": 0.05}, F, "accuracy 0.560 vs 0.500",
         "> 0.050 for a gain > +0.050 (paired bootstrap, 200 items, 90% interval)"),
        # the per-level check still applies: level 2 loses 10 of its 100 items
        (30, 10, {"test": "paired_bootstrap", "max_level_regression": 0.05}, F,
         "accuracy 0.600 vs 0.500: +0.100 [", "; level 2: 10/100 items pass->fail > 0.050"),
    ],
)
def test_promotion_decision_with_a_paired_test(gained, lost, cfg, promoted, start, end):
    candidate, incumbent = paired_evals(gained, lost)
    decision = promotion_decision(candidate, incumbent, PromoteConfig(**cfg))
    assert decision.promoted == promoted
    assert decision.reason.startswith(start) and decision.reason.endswith(end), decision.reason
    assert (decision.test.items if decision.test else None) == (200 if "test" in cfg else None)
    assert promotion_decision(candidate, incumbent, PromoteConfig(**cfg)) == decision


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"promote.test": "mcnemar", "promote.margin": 0.05},
     "use test = 'paired_bootstrap' for a margin or a required gain"),
    ({"promote.test": "paired_bootstrap", "promote.alpha": 0.001,
      "promote.bootstrap_samples": 1000}, "set bootstrap_samples >= 10000"),
    ({"promote.test": "t_test"}, "`promote.test` = 't_test'"),
    ({"promote.alpha": 0.6}, "`promote.alpha` = 0.6"),
])
def test_bad_test_settings_are_config_errors(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(None, overrides)


# ---- a round whose curate stage keeps nothing ----------------------------------------------

# k = 2 samples: pass rates are 0, 0.5 or 1, none strictly inside (0.99, 1.0), so rounds 1 and 2
# keep no problem and have no training rows. Round 0 (the warm-up) trains on seed references.
# Rounds >= 1 draw generator problems (the 10-step warm-up model writes no valid ones) and label
# them by majority vote, so the run also checks the recorded label precision end to end.
EMPTY_BAND = {"rounds": 2, "domain.seed_problems": 200, "domain.heldout_per_level": 2,
              "synthesize.proposals": 64, "synthesize.source": "generator",
              "verify.labels": "majority", "curate.solver_targets": "verified",
              "rollout.samples_per_problem": 2,
              "train.warmup.max_steps": 10, "train.max_steps": 5, "train.batch_size": 32,
              "curate.min_pass_rate": 0.99, "curate.max_pass_rate": 1.0, "gates.enabled": False}


def test_round_without_training_rows_is_rejected_and_the_run_goes_on(tmp_path, prefect_server,
                                                                     monkeypatch):
    from flows.cli import app
    from flows.run import RunSpec, flywheel_flow

    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "WARNING")
    config = load_config(None, EMPTY_BAND)
    spec = RunSpec(data_root=str(tmp_path), run_id="empty", config=config)
    winner = flywheel_flow(spec)

    catalog = Catalog(tmp_path)
    rounds = {r["round"]: r for r in catalog.query("SELECT * FROM rounds WHERE run_id = 'empty'")}
    assert sorted(rounds) == [0, 1, 2]
    assert rounds[0]["reason"].startswith("accuracy ")
    warm = rounds[0]["candidate"] if rounds[0]["promoted"] else rounds[0]["incumbent"]
    for k in (1, 2):
        assert not rounds[k]["promoted"] and rounds[k]["reason"] == "no training rows"
        assert rounds[k]["candidate"] is None and rounds[k]["candidate_accuracy"] is None
        assert rounds[k]["incumbent"] == warm  # the incumbent stays
    assert winner.fingerprint == warm
    stages = catalog.query("SELECT round, stage, fingerprint, status FROM stages "
                           "WHERE run_id = 'empty'")
    for k in (1, 2):
        assert {s["stage"] for s in stages if s["round"] == k} == {
            "synthesize", "rollout", "verify", "curate", "promote"}
    assert {s["status"] for s in stages} == {"completed"}
    # base + warm-up
    assert len(list(Path(tmp_path, "runs", "empty").glob("round-*/checkpoint-*"))) == 2
    curriculum = catalog.query("SELECT round, count(*) AS n, count(*) FILTER (WHERE kept) AS kept"
                               " FROM curriculum GROUP BY round ORDER BY round")
    assert [(c["round"], c["kept"]) for c in curriculum if c["round"]] == [(1, 0), (2, 0)]
    assert all(c["n"] > 0 for c in curriculum)  # problems were there; the band dropped them all

    # majority labels: the recorded label precision is what the audit recomputes from the files
    metrics = {(m["round"], m["name"]): m["value"] for m in catalog.query(
        "SELECT round, name, value FROM metrics WHERE run_id = 'empty' AND stage = 'verify'")}
    con = open_run(tmp_path, "empty")
    try:
        audited = {r["round"]: r for r in labels(con).rows}
        methods = {r[0] for r in con.execute("SELECT DISTINCT method FROM verdicts").fetchall()}
    finally:
        con.close()
    assert methods <= {"majority", "none"} and "majority" in methods
    for k in (0, 1, 2):
        assert metrics[(k, "labelled_problems")] == audited[k]["problems"]
        assert metrics[(k, "label_precision")] == pytest.approx(audited[k]["agreement"])
    assert [(audited[k]["kept"], audited[k]["kept_agreement"]) for k in (1, 2)] == [(0, None)] * 2

    # resume: every stage is done (same fingerprints), nothing is recomputed
    assert flywheel_flow(spec).fingerprint == warm
    again = catalog.query("SELECT round, stage, fingerprint, status FROM stages "
                          "WHERE run_id = 'empty'")
    assert len(again) == len(stages)

    result = CliRunner().invoke(app, ["status", "empty", "--data-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "no training rows" in result.output and "accuracy " in result.output
