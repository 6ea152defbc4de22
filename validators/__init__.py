"""Data-quality gates: one Great Expectations suite per stage output kind (suites.py), the gate
runner (gate.py) and the failure report (summary.py). Importing this package imports nothing
heavy."""
