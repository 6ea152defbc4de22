"""Prefect flows (they only sequence tasks) and the `flywheel` command line."""
