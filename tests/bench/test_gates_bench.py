"""bench/gates.py's synthetic rows stay in step with the datasets' schemas: every kind it times
(all of storage.datasets.KINDS by default) writes, and passes its gate as a real stage output
does, so the bench times gates on data they accept."""

from __future__ import annotations

import pytest

from bench import gates as bench
from configs import GatesConfig
from storage.datasets import KINDS, write_atomic
from validators.gate import run_gate


@pytest.mark.parametrize("kind", KINDS)
def test_the_bench_rows_of_every_kind_write_and_pass_their_gate(kind, tmp_path):
    previous = write_atomic("problems", bench.synthetic_rows("problems", 200, round_index=0,
                                                             seed=1),
                            tmp_path / "previous-problems.parquet").path
    path = write_atomic(kind, bench.synthetic_rows(kind, 200), tmp_path / f"{kind}.parquet").path
    result = run_gate(path, kind, GatesConfig(), run_id=bench.RUN_ID, round_index=1,
                      previous_path=previous if kind == "problems" else None)
    assert result.success, result.summary()
