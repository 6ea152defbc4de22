"""Flywheel: a workflow-orchestrated data flywheel for self-improving language models."""

__version__ = "0.1.0"
