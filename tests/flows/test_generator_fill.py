"""`synthesize.top_up = "generator"`: one proposer batch, its shortfall of novel problems filled
by the domain generator, the two sources side by side in one round's files and lineage."""

from __future__ import annotations

import math

import pytest

from configs import load_config
from storage.catalog import Catalog
from tests.flows.test_presets import OVERRIDES


@pytest.mark.slow
def test_generator_fills_the_proposers_shortfall(tmp_path, prefect_server):
    from flows.run import RunSpec, flywheel_flow
    from storage.audit.lineage import lineage
    from storage.audit.snapshot import open_run

    config = load_config(None, {**OVERRIDES, "synthesize.min_novel_share": 1.0,
                                "synthesize.top_up": "generator"})
    flywheel_flow(RunSpec(data_root=str(tmp_path), run_id="fill", config=config))
    catalog = Catalog(tmp_path)
    proposals = catalog.query("SELECT proposal_id, source, problem_id, drop_reason FROM proposals"
                              " WHERE run_id = 'fill' AND round = 1")
    by_source = {s: [p for p in proposals if p["source"] == s] for s in ("proposer", "generator")}
    # one proposer batch; the generator added only novel problems, exactly the shortfall
    assert len(by_source["proposer"]) == config.synthesize.proposals
    novel = sum(p["drop_reason"] is None for p in by_source["proposer"])
    target = math.ceil(config.synthesize.min_novel_share * config.synthesize.proposals)
    assert novel < target, "these sizes must leave a shortfall"
    assert len(by_source["generator"]) == target - novel
    assert all(p["drop_reason"] is None for p in by_source["generator"])
    assert len({p["proposal_id"] for p in proposals}) == len(proposals)
    problems = catalog.query("SELECT problem_id, source, level FROM problems"
                             " WHERE run_id = 'fill' AND round = 1")
    assert len(problems) == target == len({p["problem_id"] for p in problems})
    assert {p["level"] for p in problems if p["source"] == "generator"} <= {1, 2}
    earlier = {r["problem_id"] for r in catalog.query("SELECT problem_id FROM problems"
                                                      " WHERE run_id = 'fill' AND round = 0")}
    assert not earlier & {p["problem_id"] for p in problems}
    fill = catalog.query("SELECT value FROM metrics WHERE run_id = 'fill' AND round = 1"
                         " AND stage = 'synthesize' AND name = 'generator_fill'")
    assert fill == [{"value": float(target - novel)}]
    # a generator problem's lineage names the generator as its writer
    problem_id = next(p["problem_id"] for p in problems if p["source"] == "generator")
    con = open_run(tmp_path, "fill")
    try:
        chain = lineage(con, problem_id)
    finally:
        con.close()
    writer = next(r for r in chain.rows if r["kind"] == "model")
    assert writer["id"] == "generator", chain.rows
