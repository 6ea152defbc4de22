"""Audit queries, lineage, the report and the catalog's readability, on one real tiny run.

The module fixture runs the flywheel (warm-up + one self-improvement round) under the session's
Prefect server, while a separate `duckdb` process keeps opening the catalog read-only; every
test then checks its query against the Parquet files themselves.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from configs import load_config, validate_config
from storage.audit.answer import answer
from storage.audit.lineage import lineage
from storage.audit.markdown import round_markdown
from storage.audit.queries import drift, drops, funnel, labels, samples
from storage.audit.snapshot import AuditError, open_run, render
from storage.catalog import Catalog
from storage.datasets import KINDS

ROOT = Path(__file__).resolve().parents[3]
RUN = "audit"
# Small enough to run in well under a minute on two cores, big enough that round 1 keeps some
# proposer-written problems (so its training rows lead back to proposer samples). Data gates are
# off: their suites are tested in tests/validators, and this run must not depend on them.
OVERRIDES = {"rounds": 1, "domain.seed_problems": 200, "synthesize.proposals": 160,
             "train.warmup.max_steps": 80, "train.max_steps": 5, "train.batch_size": 32,
             "domain.heldout_per_level": 3, "domain.min_level": 1, "domain.max_level": 2,
             "gates.enabled": False}

READER = """
import os, sys, time, duckdb
catalog, stop = sys.argv[1], sys.argv[2]
while not os.path.exists(stop):
    if os.path.exists(catalog):
        try:
            con = duckdb.connect(catalog, read_only=True)
        except duckdb.IOException as exc:  # the run holds the write lock for a moment
            if "lock" not in str(exc).lower():
                raise
            print("locked", flush=True)
            time.sleep(0.02)
            continue
        stages = con.execute("SELECT count(*) FROM stages").fetchone()[0]
        views = {r[0] for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        problems = (con.execute("SELECT count(*) FROM problems").fetchone()[0]
                    if "problems" in views else -1)
        con.close()
        print(stages, problems, flush=True)
    time.sleep(0.5)
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory, prefect_server):
    from flows.run import RunSpec, flywheel_flow

    data_root = tmp_path_factory.mktemp("audit")
    config = load_config(ROOT / "tests" / "flows" / "small.toml", OVERRIDES)
    stop = data_root / "stop-reader"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(data_root / "catalog.duckdb"),
                               str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        flywheel_flow(RunSpec(data_root=str(data_root), run_id=RUN, config=config))
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=60)
    reads = {"code": reader.returncode, "lines": out.split("\n"), "stderr": err[-2000:]}
    con = open_run(data_root, RUN)
    yield {"root": data_root, "con": con, "reads": reads, "catalog": Catalog(data_root)}
    con.close()


def _paths(run, kind):
    rows = run["catalog"].query("SELECT round, path FROM datasets WHERE run_id = ? AND kind = ?",
                                [RUN, kind])
    return {r["round"]: run["catalog"].resolve(r["path"]) for r in rows}


def _files(run, kind):
    """{round: pyarrow table} of the run's files of a kind, read directly (not through DuckDB)."""
    return {k: pq.read_table(path) for k, path in _paths(run, kind).items()}


def test_funnel_counts_equal_the_row_counts_of_the_files(run):
    result = {r["round"]: r for r in funnel(run["con"]).rows}
    proposals, problems = _files(run, "proposals"), _files(run, "problems")
    curriculum, train_rows = _files(run, "curriculum"), _files(run, "train_rows")
    assert sorted(result) == [0, 1]
    for k, row in result.items():
        reasons = proposals[k]["drop_reason"].to_pylist()
        assert row["proposed"] == proposals[k].num_rows
        assert row["valid"] == sum(r != "invalid" for r in reasons)
        assert row["novel"] == problems[k].num_rows == reasons.count(None)
        assert row["kept"] == sum(curriculum[k]["kept"].to_pylist())
        assert row["train_rows"] == train_rows[k].num_rows
        roles = train_rows[k]["role"].to_pylist()
        assert (row["solver_rows"], row["proposer_rows"]) == (roles.count("solver"),
                                                              roles.count("proposer"))
        solver_problems = {p for p, r in zip(train_rows[k]["problem_id"].to_pylist(), roles,
                                             strict=True) if r == "solver"}
        assert row["trained"] == len(solver_problems)
        assert row["proposed"] >= row["valid"] >= row["novel"] >= row["kept"] >= row["trained"]
        assert row["state"] == "decided"
    assert result[1]["kept"] > 0, "round 1 kept nothing; the fixture's config is too small"
    train = validate_config(json.loads(run["catalog"].run_config_json(RUN)), RUN).train
    pool = result[0]["train_rows"] if train.replay_proposer_rows else result[0]["solver_rows"]
    assert result[1]["replayed_rows"] == min(pool,
                                             round(train.replay_ratio * result[1]["train_rows"]))


def test_drops_counts_and_examples_match_the_files(run):
    result = drops(run["con"], examples=2)
    expected = Counter()
    for k, table in _files(run, "proposals").items():
        expected.update(("proposals", k, r) for r in table["drop_reason"].to_pylist() if r)
    for k, table in _files(run, "curriculum").items():
        expected.update(("curriculum", k, r) for r in table["drop_reason"].to_pylist() if r)
    assert ({(r["dataset"], r["round"], r["reason"]): r["count"] for r in result.rows}
            == dict(expected))
    assert (("proposals", 1, "invalid") in expected
            and ("curriculum", 0, "above_warmup_level") in expected)
    texts = {(k, t["text"]) for k, table in _files(run, "proposals").items()
             for t in table.to_pylist() if t["drop_reason"] == "invalid"}
    invalid = next(r for r in result.rows if r["reason"] == "invalid")
    assert 1 <= len(invalid["examples"]) <= 2
    assert all((invalid["round"], text) in texts for text in invalid["examples"])


def test_lineage_of_a_training_row_reaches_the_proposer_sample_and_its_model(run):
    con = run["con"]
    row = con.execute("SELECT train_row_id, rollout_id, problem_id, proposal_id FROM train_rows"
                      " WHERE round = 1 AND role = 'solver' AND rollout_id IS NOT NULL"
                      " ORDER BY train_row_id LIMIT 1").fetchone()
    result = lineage(con, row[0][:10])  # a unique prefix is enough
    chain = [(r["link"], r["kind"], r["id"]) for r in result.rows]
    assert [kind for _, kind, _ in chain[:7]] == ["train_row", "rollout", "verdict", "problem",
                                                  "curriculum", "proposal", "model"]
    assert [i for _, _, i in chain[:4]] == [row[0], row[1], row[1], row[2]]
    assert chain[5][2] == row[3]
    proposal = pq.read_table(_one_path(run, "proposals", 1)).to_pylist()
    sample = next(p for p in proposal if p["proposal_id"] == row[3])
    assert sample["source"] == "proposer" and sample["drop_reason"] is None
    assert "reward=1.0" in result.rows[2]["detail"]
    decided = run["catalog"].query("SELECT incumbent, candidate FROM rounds"
                                   " WHERE run_id = ? AND round = 1", [RUN])
    assert chain[6][2] == decided[0]["incumbent"]  # the round-1 proposer is round 1's incumbent
    trained_into = [r for r in result.rows if r["link"] == "trained into"]
    assert [r["id"] for r in trained_into] == [decided[0]["candidate"]]


def test_lineage_of_a_rationalized_row_shows_the_reference_and_the_unsolved_problem(run):
    con = run["con"]
    row = con.execute("SELECT train_row_id, problem_id, proposal_id FROM train_rows WHERE round = 1"
                      " AND role = 'solver' AND rollout_id IS NULL"
                      " ORDER BY train_row_id LIMIT 1").fetchone()
    assert row is not None, "round 1 rationalized nothing; the fixture's config is too small"
    result = lineage(con, row[0])
    chain = [(r["kind"], r["id"]) for r in result.rows]
    assert chain[:4] == [("train_row", row[0]), ("problem", row[1]), ("curriculum", row[1]),
                         ("proposal", row[2])]
    assert "completion = the executed reference" in result.rows[0]["detail"]
    assert "pass_rate=0.0" in result.rows[2]["detail"] and "kept=True" in result.rows[2]["detail"]


def _one_path(run, kind, round_index):
    return _paths(run, kind)[round_index]


def test_lineage_of_a_checkpoint_lists_the_rows_it_saw(run):
    from tasks.train import replayed_rows

    con = run["con"]
    (fingerprint, folder), = con.execute(
        "SELECT fingerprint, path FROM datasets WHERE kind = 'checkpoint' AND stage = 'train'"
        " AND round = 1").fetchall()
    result = lineage(con, folder)
    assert lineage(con, fingerprint[:12]).rows == result.rows
    own = pq.read_table(_one_path(run, "train_rows", 1)).to_pylist()
    earlier = pq.read_table(_one_path(run, "train_rows", 0)).to_pylist()
    config = validate_config(json.loads(run["catalog"].run_config_json(RUN)), RUN)
    from storage.seeds import stage_seed

    metrics = {r[0]: r[1] for r in con.execute(
        "SELECT name, value FROM metrics WHERE stage = 'train' AND round = 1").fetchall()}
    seed = stage_seed(config.seed, "train", 1)
    # the train stage recorded what it replayed with: the audit redraws from these
    assert (metrics["replay_seed"], metrics["replay_ratio"], metrics["replay_proposer_rows"]) == (
        seed, config.train.replay_ratio, float(config.train.replay_proposer_rows))
    trained = own + replayed_rows([_one_path(run, "train_rows", 0)], len(own),
                                  ratio=config.train.replay_ratio, seed=seed,
                                  proposer_rows=config.train.replay_proposer_rows)
    expected = Counter((r["round"], r["role"]) for r in trained)
    selected = {(r["round"], r["role"]): r["rows_selected"] for r in result.rows}
    assert {key: n for key, n in selected.items() if n} == dict(expected)
    # replay_proposer_rows = false: in the file, not in the pool
    assert selected[0, "proposer"] == 0
    in_file = Counter((r["round"], r["role"]) for r in own + earlier)
    assert {(r["round"], r["role"]): r["rows_in_file"] for r in result.rows} == dict(in_file)
    listed = lineage(con, fingerprint, rows=True)
    assert [r["train_row_id"] for r in listed.rows] == [r["train_row_id"] for r in trained]
    base = con.execute("SELECT fingerprint FROM datasets WHERE kind = 'checkpoint'"
                       " AND stage = 'base'").fetchone()[0]
    assert lineage(con, base).rows == []


def test_lineage_without_recorded_replay_settings_reports_the_replay_as_unknown(run):
    """A train stage that recorded no replay settings: the sample is not guessed."""
    con = run["con"]
    (fingerprint,) = con.execute(
        "SELECT fingerprint FROM datasets WHERE kind = 'checkpoint' AND stage = 'train'"
        " AND round = 1").fetchone()
    recorded = ("WHERE stage = 'train' AND round = 1"
                " AND name IN ('replay_seed', 'replay_ratio', 'replay_proposer_rows')")
    saved = con.execute(f"SELECT * FROM metrics {recorded}").fetchall()
    assert len(saved) == 3
    con.execute(f"DELETE FROM metrics {recorded}")  # the snapshot's copy, not the catalog
    try:
        result = lineage(con, fingerprint)
    finally:
        con.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?)", saved)
    assert any("recorded no replay settings" in note for note in result.notes)
    replayed = [r for r in result.rows if r["round"] == 0]
    assert replayed and all(r["rows_selected"] is None for r in replayed)
    assert all(r["rows_selected"] is not None for r in result.rows if r["round"] == 1)


def test_lineage_of_a_dropped_proposal_and_unknown_ids(run):
    con = run["con"]
    dropped = con.execute("SELECT proposal_id FROM proposals WHERE drop_reason = 'invalid'"
                          " LIMIT 1").fetchone()[0]
    result = lineage(con, dropped)
    assert [r["kind"] for r in result.rows] == ["proposal", "model"]
    assert "drop_reason=invalid" in result.rows[0]["detail"]
    with pytest.raises(AuditError, match="no checkpoint, train row, rollout, problem or proposal"):
        lineage(con, "0123456789abcdef")
    with pytest.raises(AuditError, match="not an id"):
        lineage(con, "round one")


def test_drift_matches_the_files(run):
    result = {r["round"]: r for r in drift(run["con"]).rows}
    for k, table in _files(run, "problems").items():
        levels = table["level"].to_pylist()
        texts = table["text"].to_pylist()
        assert result[k]["problems"] == len(levels)
        assert result[k]["mean_text_chars"] == pytest.approx(sum(map(len, texts)) / len(texts))
        for level, n in Counter(levels).items():
            assert result[k][f"level_{level}"] == pytest.approx(n / len(levels))
    for k, table in _files(run, "curriculum").items():
        rates = [p for p in table["pass_rate"].to_pylist() if p is not None]
        assert result[k]["pass_rate_mean"] == pytest.approx(sum(rates) / len(rates))
        assert result[k]["share_p0"] == pytest.approx(rates.count(0.0) / len(rates))


def test_label_agreement_matches_a_majority_vote_computed_from_the_files(run):
    result = {r["round"]: r for r in labels(run["con"]).rows}
    verdicts, problems = _files(run, "verdicts"), _files(run, "problems")
    for k in verdicts:
        votes: dict[str, Counter] = {}
        for v in verdicts[k].to_pylist():
            if v["answer"] is not None:
                votes.setdefault(v["problem_id"], Counter())[v["answer"]] += 1
        reference = {p["problem_id"]: p["reference"] for p in problems[k].to_pylist()}
        majority = {pid: min(c.items(), key=lambda a: (-a[1], a[0]))[0] for pid, c in votes.items()}
        agree = sum(reference[pid] == answer for pid, answer in majority.items()
                    if reference[pid] is not None)
        assert result[k]["problems"] == sum(reference[pid] is not None for pid in majority)
        assert result[k]["agree"] == agree
        tops = {pid: sorted(c.values(), reverse=True)[:2] for pid, c in votes.items()
                if reference[pid] is not None}
        assert result[k]["tied"] == sum(len(t) == 2 and t[0] == t[1] for t in tops.values())


def test_samples_and_sql(run):
    con = run["con"]
    result = samples(con, "proposals", where="drop_reason = 'invalid' AND round = 1", limit=3)
    assert len(result.rows) == 3 and all(r["drop_reason"] == "invalid" for r in result.rows)
    with pytest.raises(AuditError, match="columns of proposals"):
        samples(con, "proposals", where="no_such_column = 1")
    with pytest.raises(AuditError, match="name a view"):
        samples(con, "nope")
    total = answer(con, None, [], sql_text="SELECT count(*) AS n FROM rollouts").rows[0]["n"]
    assert total == sum(t.num_rows for t in _files(run, "rollouts").values())


def test_cli_formats_and_errors(run):
    from flows.cli import app

    cli = CliRunner()
    base = ["audit", RUN, "--data-root", str(run["root"])]
    as_json = cli.invoke(app, [*base, "funnel", "--format", "json"])
    assert as_json.exit_code == 0, as_json.output
    assert ([r["proposed"] for r in json.loads(as_json.output)]
            == [r["proposed"] for r in funnel(run["con"]).rows])
    as_csv = cli.invoke(app, [*base, "drops", "--format", "csv"])
    assert as_csv.output.splitlines()[0] == "dataset,round,reason,count,share,examples"
    table = cli.invoke(app, [*base, "samples", "rollouts", "--where", "round = 1", "--limit", "2"])
    assert table.exit_code == 0 and "2 of" in table.output
    for args, message in [(["nope"], "unknown query 'nope'"),
                          (["funnel", "--format", "xml"], "--format 'xml'"),
                          (["lineage"], "lineage: give"),
                          (["drift", "--where", "x"], "--where works with"),
                          (["samples", "rollouts", "--round", "1"], "--round works with"),
                          ([], "name a query")]:
        bad = cli.invoke(app, [*base, *args])
        assert bad.exit_code == 2 and message in bad.output, (args, bad.output)
    unknown = cli.invoke(app, ["audit", "no-such-run", "funnel", "--data-root", str(run["root"])])
    assert unknown.exit_code == 2 and f"known runs: {RUN}" in unknown.output


def test_status_and_audit_import_neither_torch_nor_prefect(run):
    check = (
        "import sys\nfrom flows.cli import app\n"
        "for args in (['status', '{run}'], ['audit', '{run}', 'lineage', '{row}'],"
        " ['audit', '{run}', 'funnel']):\n"
        "    try:\n        app(args + ['--data-root', '{root}'])\n    except SystemExit as exc:\n"
        "        assert not exc.code, exc.code\n"
        "heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {{'torch', 'trl', 'prefect', "
        "'great_expectations', 'transformers', 'pandas'}})\n"
        "print('HEAVY', heavy)\n"
    )
    row = run["con"].execute(
        "SELECT train_row_id FROM train_rows WHERE round = 1 LIMIT 1").fetchone()[0]
    done = subprocess.run([sys.executable, "-c", check.format(run=RUN, row=row, root=run["root"])],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "HEAVY []"


def test_catalog_opens_in_another_duckdb_process_while_the_run_writes(run):
    reads = run["reads"]
    assert reads["code"] == 0, reads["stderr"]
    counts = [tuple(map(int, line.split())) for line in reads["lines"] if line and line != "locked"]
    final = run["catalog"].query("SELECT count(*) AS n FROM stages")[0]["n"]
    stage_counts = [stages for stages, _ in counts]
    # it read the catalog several times while stages were still being added, views included
    assert len(set(stage_counts)) >= 3 and min(stage_counts) < final, stage_counts
    assert any(problems > 0 and stages < final for stages, problems in counts), counts


def test_catalog_is_in_a_storage_format_the_duckdb_cli_reads(run):
    # DuckDB's file header: 8 bytes checksum, "DUCK", then the storage version (64 = DuckDB 1.0,
    # which the PyPI `duckdb-cli` reads; the Python package's default format is newer)
    header = (run["root"] / "catalog.duckdb").read_bytes()[:20]
    assert header[8:12] == b"DUCK" and struct.unpack("<Q", header[12:20])[0] == 64


@pytest.mark.parametrize("kind", KINDS)
def test_parquet_files_load_unchanged_in_polars_pandas_and_datasets(run, kind, tmp_path):
    import datasets
    import pandas
    import polars

    for path in _paths(run, kind).values():
        table = pq.read_table(path)
        expected = table.to_pylist()
        assert polars.read_parquet(path).to_dicts() == expected
        frame = pandas.read_parquet(path)
        assert list(frame.columns) == table.schema.names and len(frame) == len(expected)
        loaded = datasets.load_dataset("parquet", data_files=str(path), split="train",
                                       cache_dir=str(tmp_path / "hf"))
        assert loaded.column_names == table.schema.names and loaded.to_list() == expected


def test_round_artifact_shows_the_funnel_in_prefect(run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[f"flywheel-{RUN}-round-1"])))
    assert found and found[0].type == "markdown"
    row = funnel(run["con"], round_index=1).rows[0]
    assert f"| 1 | {row['proposed']} | {row['valid']} | {row['novel']} |" in found[0].data
    assert found[0].data == round_markdown(run["con"], RUN, 1)


def _png_size_and_colours(path: Path) -> tuple[int, int, int]:
    """Width, height and the number of distinct byte values in the image data of a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, offset = [], 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        if kind == b"IDAT":
            chunks.append(data[offset + 8: offset + 8 + length])
        offset += 12 + length
    return width, height, len(set(zlib.decompress(b"".join(chunks))))


def test_report_renders_in_headless_chromium(run, tmp_path):
    from storage.audit.report import write_report

    page = write_report(run["root"], RUN, tmp_path / "report")
    html = page.read_text()
    assert "<script" not in html and "src=" not in html and "<link" not in html  # nothing fetched
    assert html.count("<svg") >= 7
    assert 'aria-label="training loss per round"' in html  # round 0's warm-up logged its steps
    for section in ("<h2>Training</h2>", "<h3>Stage timings</h3>", "<h3>Promotion decisions</h3>",
                    "ci95_<wbr>low", "0 (never solved)"):
        assert section in html, section
    for stage in ("synthesize", "rollout", "verify", "curate", "train", "evaluate", "promote"):
        assert f"<th>{stage}</th>" in html, stage
    assert "/round-000/checkpoint-" in html  # the promoted candidate's folder
    browser = shutil.which("chromium")
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    shot = Path(os.environ.get("FLYWHEEL_REPORT_SCREENSHOT", tmp_path / "report.png"))
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,3400",
         "--enable-logging=stderr",
         f"--screenshot={shot}", page.as_uri()],
        check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "net::ERR" in line]
    assert not errors, errors
    width, height, colours = _png_size_and_colours(shot)
    assert (width, height) == (1280, 3400) and colours > 20


def test_report_command_and_markdown_are_pure_functions_of_the_data(run, tmp_path):
    from flows.cli import app

    out = CliRunner().invoke(app, ["report", RUN, "--out", str(tmp_path),
                                   "--data-root", str(run["root"])])
    assert out.exit_code == 0 and (tmp_path / "report.html").exists()
    first = round_markdown(run["con"], RUN, 0)
    assert first == round_markdown(open_run(run["root"], RUN), RUN, 0)
    assert render(funnel(run["con"]), "table").splitlines()[0] == "funnel"
