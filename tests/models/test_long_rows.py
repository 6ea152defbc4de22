"""Training rows longer than train.max_length are counted and said, never cut in silence."""

from __future__ import annotations

import logging

from models.tiny import build_tiny_model, build_tokenizer
from models.trainer import length_report, train_sft


def test_length_report_counts_cut_and_dropped_rows():
    assert length_report([5, 7, 8], rows=3, max_length=8)[:2] == (1, 0)
    cut, dropped, line = length_report([8, 8], rows=4, max_length=8)
    assert (cut, dropped) == (2, 2)
    assert "4 of 4 training rows" in line and "train.max_length = 8" in line
    assert length_report([3, 4], rows=2, max_length=8) == (0, 0, None)


def test_sft_reports_rows_cut_at_max_length_and_rows_left_without_a_completion(tmp_path,
                                                                                 caplog):
    tokenizer = build_tokenizer()
    rows = [{"prompt": "<solve>1+1=", "completion": "2", "weight": 1.0},
            {"prompt": "<solve>1+2=", "completion": "3" * 40, "weight": 1.0},  # cut
            {"prompt": "<solve>" + "1+" * 20 + "1=", "completion": "21", "weight": 1.0}]
    lengths = [len(tokenizer(r["prompt"] + r["completion"])["input_ids"]) for r in rows]
    max_length = 16
    assert lengths[0] < max_length < lengths[1]
    base = build_tiny_model(tmp_path / "init", hidden_size=32, num_layers=1, head_dim=16,
                            intermediate_size=64, init_seed=0)
    with caplog.at_level(logging.WARNING, logger="models.trainer"):
        result = train_sft(base=base, rows=rows, out_dir=tmp_path / "out", learning_rate=1e-3,
                           batch_size=2, epochs=1, max_steps=1, max_length=max_length, seed=0,
                           work_dir=tmp_path / "work")
    assert (result.rows_cut, result.rows_dropped) == (1, 1)  # the long prompt left no answer
    assert "2 of 3 training rows reach train.max_length = 16" in caplog.text
