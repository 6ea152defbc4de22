"""Data-quality gates: one Great Expectations suite per stage output kind (suites.py), the gate
runner (gate.py) and its Great Expectations side (gx_results.py: a suite on a frame, GX's
result read into failures), the whole-file checks of frames longer than the sample Great
Expectations sees (whole_frame.py; gate.py's docstring lists which checks see every row) and
the failure report (summary.py). Importing this package imports nothing heavy."""
