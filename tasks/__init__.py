"""One module per stage. Each Prefect task is a thin wrapper over pure functions in its module."""
