"""bench/gpu_check.py: its CPU smoke mode runs end to end and writes its JSON, and it imports
nothing of this project (the GPU machine lacks TRL, Prefect, DuckDB, polars and Great
Expectations, which the project's modules pull in)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"
PROJECT = {"configs", "domains", "flows", "models", "schedules", "storage", "tasks", "validators"}
ABSENT_THERE = {"trl", "vllm", "prefect", "duckdb", "polars", "great_expectations", "datasets"}


def test_gpu_check_imports_nothing_the_gpu_machine_lacks_at_module_level():
    tree = ast.parse(SCRIPT.read_text())
    everywhere, top = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            everywhere.update(n.split(".")[0] for n in names)
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            top.update(n.split(".")[0] for n in names)
    assert not everywhere & PROJECT
    assert not everywhere & (ABSENT_THERE - {"vllm"})  # vLLM only where importable
    assert not top & ABSENT_THERE


@pytest.mark.slow
def test_the_cpu_smoke_mode_measures_every_section_and_writes_json(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--small",
                           "--no-vllm", "--out", str(out)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(out.read_text())
    results = record["results"]
    assert set(results) == {"sft", "sft_lora", "hf_generate", "vllm"}
    for name in ("sft", "sft_lora", "hf_generate"):
        assert results[name]["tokens_per_s"] > 0, name
    assert results["sft_lora"]["trainable_parameters"] < results["sft"]["trainable_parameters"]
    assert results["vllm"]["skipped"] == "--no-vllm"
    assert record["environment"]["device"] == "cpu" and record["dtype"] == "float32"
    assert "section" in done.stdout and "hf_generate" in done.stdout  # the table
