"""Storage contract: immutable Parquet datasets, content-hash ids, and the DuckDB catalog.

This package imports nothing else from flywheel.
"""
