"""The sandbox that runs model-written programs: a pool of fork servers (pool.py) whose children
run one program each (worker.py) under namespaces and a chroot (jail.py), rlimits, a dropped uid
and a seccomp allow list compiled by libseccomp (seccomp.py). docs/sandbox.md is the threat
model, the guarantees and the limits."""

from domains.sandbox.canonical import canonical
from domains.sandbox.pool import (
    IsolationError,
    Job,
    Limits,
    Result,
    SandboxIsolationWarning,
    SandboxPool,
)
from domains.sandbox.worker import OUTCOMES

__all__ = ["OUTCOMES", "IsolationError", "Job", "Limits", "Result", "SandboxIsolationWarning",
           "SandboxPool", "canonical"]
