"""Retry policy for stages whose failures can be transient (rollout backends, training).

    @task(name="rollout", ..., **TRANSIENT)

Up to `RETRIES` retries, exponential backoff (`BACKOFF_SECONDS`, then twice that, ...) with
jitter. Only errors that can pass on their own are retried: OS and I/O errors, timeouts, out of
memory, runtime errors from torch or a backend. Never retried: a failed data gate (`GateFailed`,
matched by class name so this module does not import the validators), a bad config, rows that
break a schema, an unavailable backend, a locked run, and any other error (ValueError, KeyError,
...) that would only fail the same way again, nor an OS error that needs a person (a full
disk or quota, a read-only file system, a permission denied). A retry reruns the stage through
`run_stage`, so it resumes from what the failed attempt saved (training restarts from its last
checkpoint).
"""

from __future__ import annotations

import errno
from typing import Any

from prefect.tasks import exponential_backoff

from storage import interruption

RETRIES = 2
BACKOFF_SECONDS = 10.0
NEVER_RETRIED = frozenset(
    {"GateFailed", "ConfigError", "DatasetError", "BackendUnavailable", "RunLocked"}
)
NEEDS_A_PERSON = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
TRANSIENT_TYPES: tuple[type[BaseException], ...] = (OSError, TimeoutError, MemoryError,
                                                     RuntimeError)


def is_transient(exc: BaseException | None) -> bool:
    """True for an error worth retrying (see the module docstring)."""
    if exc is None or any(cls.__name__ in NEVER_RETRIED for cls in type(exc).__mro__):
        return False
    if isinstance(exc, OSError) and exc.errno in NEEDS_A_PERSON:
        return False
    return isinstance(exc, TRANSIENT_TYPES)


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn`: retry only when the failed state holds a transient error
    (and the run was not asked to stop: a library may have turned the interruption into a
    runtime error)."""
    if interruption.requested() is not None:
        return False
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            result = state.result(raise_on_failure=False)
        except Exception:  # noqa: BLE001 - an unreadable result is not known to be transient
            return False
        exc = result if isinstance(result, BaseException) else None
    return is_transient(exc)


TRANSIENT: dict[str, Any] = {
    "retries": RETRIES,
    "retry_delay_seconds": exponential_backoff(backoff_factor=BACKOFF_SECONDS),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": retry_transient,
}
