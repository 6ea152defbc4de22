"""Verify and curate over 2 M rollouts with 2 KB completions stay under 1.5 GB resident.

The child reads its own peak from /proc/self/status (`VmHWM`, the high-water mark of its own
address space): `RUSAGE_CHILDREN` of the test process is the largest of every child it ever
waited for, and a child's `RUSAGE_SELF` starts from the test process's size at the fork."""

import json
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
            f"steps = [step_verify(folder), step_curate(folder)]; "
            f"peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
            f"print(json.dumps([*steps, int(peak.split()[1])]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=900, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    verdicts, curated, peak_kb = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdicts == 2_000_000 and curated["output_rows"] > 50_000
    peak_mb = peak_kb / 1024
    print(f"peak RSS {peak_mb:.0f} MB")
    assert peak_mb < LIMIT_MB, f"peak RSS {peak_mb:.0f} MB"
