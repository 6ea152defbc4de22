"""Verify and curate over 2 M rollouts with 2 KB completions stay under 1.5 GB resident."""

import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MB = 1536


def test_verify_and_curate_of_two_million_rollouts_stay_in_bounded_memory(tmp_path):
    folder = tmp_path / "round"
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; "
            f"from bench.scale import write_round, step_verify, step_curate; "
            f"folder = Path({str(folder)!r}); write_round(folder, 50_000, 40, 2048); "
            f"print(json.dumps([step_verify(folder), step_curate(folder)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=900, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    verdicts, curated = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdicts == 2_000_000 and curated["output_rows"] > 50_000
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS {peak_mb:.0f} MB")
    assert peak_mb < LIMIT_MB, f"peak RSS {peak_mb:.0f} MB"
